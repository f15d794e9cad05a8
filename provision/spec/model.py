"""The typed cluster spec: one YAML file describes nodes, hardware, pins, policy,
fabric, burn-in, admission, connection and (optionally) simulation.

Every model forbids unknown keys, because a misspelt key that is silently ignored
(``pcie_acs: {disabel: true}``) is exactly the "wrong config" that costs an infra
team a week. Checks that need more than one field live in
:mod:`provision.spec.semantics`, so that all of them can be reported at once.
"""

from __future__ import annotations

import ipaddress
import re
from fractions import Fraction
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator, model_validator

from provision.catalog import GPU_MODELS
from topology.design import LINK_RATES_GBPS

#: The stages of the burn-in, cheapest first; the spec's ``burnin.stages`` are written in this order.
#: ``nvlink_domain``: each GB200/GB300 NVLink domain's trays together (MNNVL), before the world over InfiniBand.
BURNIN_STAGES = ("preflight", "node", "dcgm", "pairs", "nvlink_domain", "collectives", "training", "soak")

Name = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$", max_length=63)]
EnvVarName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
Version = Annotated[str, StringConstraints(pattern=r"^[0-9A-Za-z][0-9A-Za-z.+~:_-]*$", max_length=64)]
Percent = Annotated[float, Field(ge=0, le=100)]
Fraction01 = Annotated[float, Field(gt=0, le=1)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)


class ClusterInfo(Strict):
    name: Name
    description: str = ""


class SecretRef(Strict):
    """Where a secret comes from. The value itself never appears in the spec."""

    env: EnvVarName | None = None
    file: Path | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> SecretRef:
        if (self.env is None) == (self.file is None):
            raise ValueError("give exactly one of env: (a variable name) or file: (a path)")
        return self


class BmcCredentials(Strict):
    username: SecretRef
    password: SecretRef


class Bmc(Strict):
    """The nodes' baseboard management controllers, for ``provision power`` (Redfish through sushy)."""

    credentials: BmcCredentials
    #: ``ipmi`` is refused (not supported yet): power control speaks Redfish.
    protocol: Literal["redfish", "ipmi"] = "redfish"
    scheme: Literal["https", "http"] = "https"
    port: Annotated[int, Field(ge=1, le=65535)] = 443
    #: Check the BMC's TLS certificate (BMCs often ship self-signed ones: turn off knowingly).
    verify_tls: bool = True
    #: How long one power transition may take before the node is reported stuck.
    timeout_s: Annotated[float, Field(gt=0, le=1800)] = 120.0


class NodeOverride(Strict):
    address: str | None = None
    bmc_address: str | None = None
    hardware: Name | None = None

    @field_validator("address", "bmc_address")
    @classmethod
    def _address(cls, value: str | None) -> str | None:
        return _host_or_ip(value)


class NodeGroup(Strict):
    name: Name
    hosts: Annotated[str, StringConstraints(min_length=1, max_length=10_000)]
    hardware: Name | None = None
    #: Management addresses are allocated in host order from here; without it the
    #: host name itself is the address (DNS).
    address_start: ipaddress.IPv4Address | None = None
    bmc_address_start: ipaddress.IPv4Address | None = None

    @field_validator("address_start", "bmc_address_start", mode="before")
    @classmethod
    def _dotted_quad(cls, value: Any) -> Any:
        """An address is written as one: ``true`` or ``167772161`` would otherwise become 0.0.0.1 or 10.0.0.1."""
        if value is not None and not isinstance(value, str):
            raise ValueError(f"write the address as a dotted quad (e.g. 10.0.0.1), not {value!r}")
        return value


class Nodes(Strict):
    groups: Annotated[list[NodeGroup], Field(min_length=1)]
    #: Keys are hostlist expressions; later entries win.
    overrides: dict[str, NodeOverride] = {}


class GpuSpec(Strict):
    model: str
    count: Annotated[int, Field(ge=1, le=16)]

    @field_validator("model")
    @classmethod
    def _known_model(cls, value: str) -> str:
        if value not in GPU_MODELS:
            raise ValueError(f"unknown GPU model {value!r}; known: {', '.join(GPU_MODELS)}")
        return value


class PcieLink(Strict):
    gen: Annotated[int, Field(ge=1, le=6)]
    width: Literal[1, 2, 4, 8, 16]


class PcieExpectation(Strict):
    gpu: PcieLink = PcieLink(gen=5, width=16)
    hca: PcieLink = PcieLink(gen=5, width=16)


class NvlinkSpec(Strict):
    present: bool = True
    nvswitch: bool = True


class HardwareProfile(Strict):
    gpu: GpuSpec
    #: Compute HCA → GPU index of its rail. The mlx5 index is not the GPU index
    #: (see the field guide): derive it from the PCIe tree, never assume it.
    rails: Annotated[dict[Annotated[str, StringConstraints(pattern=r"^mlx5_\d+$")], int], Field(min_length=1)]
    pcie: PcieExpectation = PcieExpectation()
    nvlink: NvlinkSpec = NvlinkSpec()
    #: ``hgx``: an 8-GPU baseboard whose NVSwitches the host manages (H100, H200, B200, B300); ``nvl72``: a compute
    #: tray of a GB200/GB300 rack, whose GPUs join an NVLink domain across trays (``nvlink_domains``).
    platform: Literal["hgx", "nvl72"] = "hgx"
    #: The host's architecture: ``x86_64`` on HGX, ``aarch64`` on a Grace tray (what the node runtime's wheels are
    #: built for). Default: by platform.
    arch: Literal["x86_64", "aarch64"] | None = None

    @property
    def architecture(self) -> str:
        return self.arch or ("aarch64" if self.platform == "nvl72" else "x86_64")


class OfedPin(Strict):
    flavor: Literal["doca", "mlnx_ofed"] = "doca"
    version: Version


class NodeRuntime(Strict):
    """The burn-in's Python on every node: a virtualenv at ``path`` with the pinned torch and this controller's
    ``fabric_tests`` (built as a wheel at provisioning), installed by the node_runtime role. Wheels come from
    ``wheelhouse`` (a folder on the controller, copied to each node: air-gapped sites) or ``index_url`` (a package
    index the nodes reach, e.g. PyTorch's CUDA index on GPU hosts)."""

    path: Annotated[str, StringConstraints(pattern=r"^/[A-Za-z0-9._/-]+$")] = "/opt/provision/runtime"
    torch: Version
    wheelhouse: Path | None = None
    index_url: Annotated[str, StringConstraints(pattern=r"^(https?|file)://\S+$")] | None = None

    @model_validator(mode="after")
    def _one_source(self) -> NodeRuntime:
        if (self.wheelhouse is None) == (self.index_url is None):
            raise ValueError("give exactly one of wheelhouse: (a folder of wheels) or index_url: (a package index)")
        return self


class PackageRepository(Strict):
    """An APT repository the nodes install the pinned packages from (NVIDIA's CUDA repository for the driver,
    the fabric manager and the toolkit; NVIDIA's DOCA or MLNX_OFED repository for the InfiniBand stack), or a
    site's mirror of one. A stock Ubuntu image knows none of them. ``key`` is the repository's OpenPGP public key,
    a file on the controller (relative to the spec's folder) that the site downloaded once and checked against the
    vendor's published fingerprint: the node trusts this file, never a key fetched at install time."""

    name: Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9-]*$", max_length=40)]
    url: Annotated[str, StringConstraints(pattern=r"^(https?|file)://\S+$")]
    key: Path
    #: ``/`` or ``./`` for a flat repository (NVIDIA's CUDA and DOCA repositories), else a distribution
    #: (``jammy``) followed by ``components``.
    suite: Annotated[str, StringConstraints(pattern=r"^\S+$")] = "/"
    components: list[Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9._-]+$")]] = []

    @model_validator(mode="after")
    def _flat_or_components(self) -> PackageRepository:
        if self.suite.endswith("/") and self.components:
            raise ValueError(f"a flat repository (suite {self.suite!r}) has no components")
        if not self.suite.endswith("/") and not self.components:
            raise ValueError(f"suite {self.suite!r} needs components (e.g. [main]); a flat repository's suite is /")
        return self


class SoftwarePins(Strict):
    gpu_driver: Version
    ofed: OfedPin
    cuda: Version
    #: Must equal the driver version on NVSwitch systems; defaults to it.
    fabric_manager: Version | None = None
    #: NVLSM (the NVLink subnet manager) on HGX B200/B300 hosts: the fabric manager starts it to manage the
    #: NVSwitches through their ConnectX bridge ports, and without it exits and CUDA fails with error 802. The
    #: package version of NVIDIA's ``nvlsm`` (CUDA repository); required there, refused elsewhere.
    nvlsm: Version | None = None
    kernel: Version | None = None
    nccl: Version | None = None
    runtime: NodeRuntime | None = None
    #: DCGM (NVIDIA's datacenter GPU manager), ``major.minor.patch``: the dcgm role installs and holds it and runs
    #: its host engine (nvidia-dcgm); none: the nodes' image brings DCGM, which preflight checks when the burn-in
    #: has the dcgm stage.
    dcgm: Annotated[str, StringConstraints(pattern=r"^\d+\.\d+\.\d+$")] | None = None
    #: Written to each node's APT sources with their keys before any pinned package is installed; none: the
    #: image already reaches the packages (a site's own image or mirror configuration).
    repositories: list[PackageRepository] = []

    @field_validator("repositories")
    @classmethod
    def _unique_names(cls, repositories: list[PackageRepository]) -> list[PackageRepository]:
        names = [repository.name for repository in repositories]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise ValueError(f"repository names must be unique: {', '.join(repeated)} repeated")
        return repositories


class PcieAcsPolicy(Strict):
    disable: bool = True
    #: ``gpu_hca_paths``: bridges between each GPU and its rail HCA (what matters);
    #: ``all_bridges``: every bridge with the capability (NCCL guide's blunt form).
    scope: Literal["gpu_hca_paths", "all_bridges"] = "gpu_hca_paths"


class HostTuning(Strict):
    memlock_unlimited: bool = True  # RDMA registers large pinned buffers
    numa_balancing: bool = False  # page migration stalls pinned GPU/RDMA buffers
    cpu_governor: Literal["performance", "schedutil", "ondemand", "unchanged"] = "performance"
    swap: Literal["off", "unchanged"] = "off"

    @field_validator("swap", mode="before")
    @classmethod
    def _yaml_off(cls, value: object) -> object:
        return "off" if value is False else value  # YAML 1.1 reads a bare `off` as false


class HostPolicy(Strict):
    gpudirect: Literal["peermem", "dmabuf", "off"] = "peermem"
    pcie_acs: PcieAcsPolicy = PcieAcsPolicy()
    #: ``passthrough``: the kernel_cmdline role adds ``iommu=pt`` through a GRUB drop-in, the host boots into it
    #: (with the driver's reboot, one reboot for both) and the ``iommu`` check reads it back from /proc/cmdline.
    iommu: Literal["passthrough", "unchanged"] = "unchanged"
    #: How long a host may take to come back from a reboot before it is called hung (and, with a bmc: section,
    #: power-cycled through its BMC). Servers with 2 TB of memory and 8 GPUs take minutes to POST.
    reboot_timeout_s: Annotated[int, Field(ge=5, le=7200)] = 900
    tuning: HostTuning = HostTuning()


class SwitchNaming(Strict):
    """Python format strings; fields: su, rail, group, index, plane."""

    leaf: str = "leaf-su{su:02d}-r{rail}"
    spine: str = "spine-g{group:02d}-{index:02d}"
    core: str = "core-p{plane:02d}-{index:02d}"

    @field_validator("leaf", "spine", "core")
    @classmethod
    def _formattable(cls, value: str) -> str:
        try:
            value.format(su=1, rail=0, group=1, index=1, plane=1)
        except (KeyError, IndexError, ValueError) as error:
            raise ValueError(f"not a usable name pattern ({error}); fields: su, rail, group, index, plane") from None
        return value


class LinkHealth(Strict):
    """How ``provision topology flaps`` judges cables; defaults from the field guide (AzNHC, infiniband-diags)."""

    flaps: Annotated[int, Field(ge=1, le=10_000)] = 5
    window_hours: Annotated[float, Field(gt=0, le=24 * 30)] = 24.0
    #: a burst (gaps under storm_gap_s) of at least storm_events touching at least storm_cables is a reboot
    storm_gap_s: Annotated[float, Field(gt=0, le=600)] = 1.0
    storm_events: Annotated[int, Field(ge=2)] = 50
    storm_cables: Annotated[int, Field(ge=2)] = 8
    reboot_margin_s: Annotated[float, Field(ge=0, le=86_400)] = 300.0
    #: UFM writes local time with no zone; say which (an IANA name)
    ufm_timezone: str = "UTC"
    counter_thresholds: dict[str, Annotated[int, Field(ge=0)]] = {}

    @field_validator("ufm_timezone")
    @classmethod
    def _zone(cls, value: str) -> str:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown time zone {value!r}; use an IANA name such as UTC or America/Los_Angeles")\
                from None
        return value

    @field_validator("counter_thresholds")
    @classmethod
    def _counters(cls, value: dict[str, int]) -> dict[str, int]:
        from topology.counters import THRESHOLDS

        unknown = sorted(set(value) - set(THRESHOLDS))
        if unknown:
            raise ValueError(f"unknown counter(s) {', '.join(unknown)}; known: {', '.join(THRESHOLDS)}")
        return value


class RoutingTables(Strict):
    """``fabric.routing_tables``: the subnet manager's forwarding tables as the tools dump them (``dump_fts`` /
    ``ibroute`` output, OpenSM's ``opensm-lfts.dump`` or ibdiagnet's ``ibdiagnet2.fdbs``) and the ``ibnetdiscover``
    output of the same sweep, both relative to the spec file: the pair tests, the tomography and the rechecks then
    route by the SM's own tables."""

    lfts: Path
    discovery: Path


class FabricDesign(Strict):
    topology: Literal["rail_optimized_fat_tree"] = "rail_optimized_fat_tree"
    rails: Annotated[int, Field(ge=1, le=16)] | None = None
    hosts_per_su: Annotated[int, Field(ge=1, le=1024)] | None = None
    switch_radix: Annotated[int, Field(ge=4, le=256)] | None = None
    link_rate: Literal["EDR", "HDR", "NDR", "XDR"] = "NDR"
    oversubscription: str = "1:1"
    tiers: Literal["auto", 2, 3] = "auto"
    spine_groups: Literal["auto", "su_block", "rail_plane"] = "auto"
    naming: SwitchNaming = SwitchNaming()
    link_health: LinkHealth = LinkHealth()
    #: An explicit cabling plan (CSV or UFM .ndt), relative to the spec file.
    cabling_file: Path | None = None
    #: The SM's forwarding tables and the discovery they route over (without: the simulated fabric's own, or the
    #: design's D-mod-K).
    routing_tables: RoutingTables | None = None
    #: The switches route adaptively (NVIDIA AR / SHIELD groups): a flow may take any min-hop path, so the
    #: tomography weighs every cable of those paths (the tables, if given, are then only AR's static fallback).
    adaptive_routing: bool = False

    @field_validator("oversubscription")
    @classmethod
    def _ratio(cls, value: str) -> str:
        match = re.fullmatch(r"(\d+):(\d+)", str(value))
        if not match or int(match.group(2)) == 0:
            raise ValueError("write the ratio as DOWN:UP, e.g. 1:1 or 2:1")
        if Fraction(int(match.group(1)), int(match.group(2))) < 1:
            raise ValueError("a leaf with more uplink than host bandwidth is not oversubscribed; use 1:1")
        return value

    @property
    def oversubscription_ratio(self) -> Fraction:
        down, up = self.oversubscription.split(":")
        return Fraction(int(down), int(up))

    @property
    def link_gbps(self) -> int:
        return LINK_RATES_GBPS[self.link_rate]


class Thresholds(Strict):
    """Overrides; anything left out is derived from the GPU model and link rate."""

    matmul_efficiency: Fraction01 | None = None
    matmul_peer_fraction: Fraction01 | None = None
    memory_bandwidth_efficiency: Fraction01 | None = None
    intranode_allreduce_busbw_gbps: Annotated[float, Field(gt=0)] | None = None
    ib_write_bw_gbps: Annotated[float, Field(gt=0)] | None = None
    rail_busbw_gbps: Annotated[float, Field(gt=0)] | None = None
    world_busbw_gbps: Annotated[float, Field(gt=0)] | None = None
    rail_peer_fraction: Fraction01 | None = None
    domain_busbw_fraction: Fraction01 | None = None
    peer_copy_fraction: Fraction01 | None = None
    outlier_mad: Annotated[float, Field(gt=0, le=50)] | None = None
    flaps_per_24h: Annotated[int, Field(ge=1)] | None = None
    disk_usage_percent: Percent | None = None
    gpu_temperature_c: Annotated[float, Field(gt=0, le=120)] | None = None
    corrected_ecc: Annotated[int, Field(ge=0)] | None = None
    nvlink_errors: Annotated[int, Field(ge=0)] | None = None
    step_time_cv: Annotated[float, Field(gt=0, le=10)] | None = None
    collective_timeout_s: Annotated[float, Field(gt=0, le=3600)] | None = None


class Workload(Strict):
    """Sizes of the burn-in tests. The defaults suit 80 GB GPUs; a simulated or CPU cluster shrinks them."""

    matmul_n: Annotated[int, Field(ge=16, le=65536)] = 8192
    matmul_iters: Annotated[int, Field(ge=1, le=10000)] = 50
    #: Timed windows of the node test, in lockstep rounds; a GPU's speed is their mean less the slowest tenth (CPU
    #: workers sharing a core want 100-1,000 short ones; a GPU is steady in 5, all kept).
    repeats: Annotated[int, Field(ge=1, le=10000)] = 5
    memory_bytes: Annotated[int, Field(ge=4096, le=1 << 36)] = 1 << 30
    allreduce_bytes: Annotated[int, Field(ge=64, le=1 << 36)] = 1 << 30
    collective_sizes: Annotated[list[Annotated[int, Field(ge=64, le=1 << 36)]], Field(min_length=1)] = [
        1 << 20, 32 << 20, 1 << 30]
    collective_ops: list[Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all"]] = [
        "all_reduce", "all_gather", "reduce_scatter", "all_to_all"]
    warmup: Annotated[int, Field(ge=0, le=1000)] = 5
    iters: Annotated[int, Field(ge=1, le=10000)] = 20
    #: ib_write_bw message size and iterations per pair test (perftest's large-message regime).
    pair_message_bytes: Annotated[int, Field(ge=2, le=1 << 30)] = 8 << 20
    pair_iters: Annotated[int, Field(ge=5, le=100000)] = 2000
    #: The training smoke test: steps (checkpointed half-way), and the transformer's size.
    training_steps: Annotated[int, Field(ge=8, le=100000)] = 60
    training_width: Annotated[int, Field(ge=8, le=16384, multiple_of=4)] = 256
    training_layers: Annotated[int, Field(ge=1, le=128)] = 4
    training_length: Annotated[int, Field(ge=4, le=65536)] = 128
    training_batch: Annotated[int, Field(ge=1, le=4096)] = 8
    #: Where the training test writes its sharded checkpoint: storage every node sees at the same path
    #: (a shared filesystem), as a real run's checkpoints need.
    checkpoint_dir: Annotated[str, StringConstraints(pattern=r"^/\S*$")] = "/tmp/provision-burnin-checkpoints"


Stage = Literal["preflight", "node", "dcgm", "pairs", "nvlink_domain", "collectives", "training", "soak"]
#: DCGM's diagnostic tests by plugin name (DCGM 4's names; 3.x display names map onto them): the levels' tests
#: and the optional ones a level 3 runs where their packages are installed.
DcgmTest = Literal["software", "pcie", "memory", "diagnostic", "targeted_stress", "targeted_power",
                   "memory_bandwidth", "memtest", "pulse_test", "eud", "cpu_eud", "nvbandwidth"]


class DcgmDiag(Strict):
    """``burnin.dcgm``: the dcgm stage's ``dcgmi diag -r <level>`` (1: deployment, seconds; 2: + PCIe and memory,
    minutes; 3: + stress, targeted power and memory bandwidth, ~15 min; 4: + memtest and the pulse test, > 1 h)."""

    level: Literal[1, 2, 3, 4] = 3
    #: Tests whose skip is accepted (a skip is otherwise unknown, never a pass): e.g. ``eud``, shipped apart.
    allowed_skips: list[DcgmTest] = []
    #: How long one node's diagnostic may run before it is cut short (unknown); default by level.
    timeout_s: Annotated[int, Field(ge=60, le=7 * 86400)] | None = None


#: A span of time as people write it: ``90m``, ``24h``, ``3d`` (minutes, hours, days).
Duration = Annotated[str, StringConstraints(pattern=r"^\d+(\.\d+)?[mhd]$")]
DURATION_HOURS = {"m": 1 / 60, "h": 1.0, "d": 24.0}


def duration_hours(duration: str) -> float:
    """A :data:`Duration`'s hours (``90m`` -> 1.5)."""
    return float(duration[:-1]) * DURATION_HOURS[duration[-1]]
IbCounter = Literal["symbol_error", "link_downed", "port_rcv_errors"]


class Soak(Strict):
    """``burnin.soak``: the node stage's load held for ``duration`` while the controller polls every node's
    telemetry; what develops over hours (throttling, row remaps, growing link errors, Xids) fails the node."""

    duration: Duration
    poll_interval_s: Annotated[float, Field(ge=1, le=3600)] = 60.0
    #: Consecutive polls a thermal or power slowdown must last to fail a node (fewer: a warning).
    throttle_polls: Annotated[int, Field(ge=1, le=10000)] = 3
    #: Growth per hour allowed each InfiniBand error counter (default: symbol_error 10, link_downed 0,
    #: port_rcv_errors 10).
    ib_errors_per_hour: dict[IbCounter, Annotated[float, Field(ge=0)]] = {}
    #: How far below its busy node-mates' median a GPU's SM clock may sit under load, with no reason the driver
    #: names, for ``throttle_polls`` polls before it fails.
    clock_drift_fraction: Annotated[float, Field(gt=0, lt=1)] = 0.1
    #: How far a GPU's matmul throughput, against its node-mates' in the same round, may fall from the soak's first
    #: third of rounds to its last.
    throughput_drift_fraction: Annotated[float, Field(gt=0, lt=1)] = 0.1

    @field_validator("duration")
    @classmethod
    def _span(cls, duration: str) -> str:
        hours = duration_hours(duration)
        if not 1 / 60 <= hours <= 90 * 24:
            raise ValueError(f"{duration} is outside one minute to 90 days")
        return duration

    @property
    def hours(self) -> float:
        return duration_hours(self.duration)


class BaselineJudgement(Strict):
    """``burnin.baseline``: how a node's figures are held against what the same hardware profile measured on the
    admitted nodes of earlier campaigns (kept in the state store, or imported with ``provision baseline import``)."""

    #: How far below the baseline's median a figure may fall (SuperBench flags 5%); the baseline's own scatter
    #: widens it where it is wider.
    margin: Annotated[float, Field(gt=0, lt=0.5)] = 0.05
    #: Samples a figure needs before it is judged against (one per GPU, or per node for a node's figure).
    min_samples: Annotated[int, Field(ge=2, le=1_000_000)] = 32


class Burnin(Strict):
    #: The soak (hours to days) is left out unless asked for: its duration is the site's to choose.
    stages: list[Stage] = ["preflight", "node", "dcgm", "pairs", "collectives", "training"]
    dcgm: DcgmDiag | None = None
    soak: Soak | None = None
    repetitions: Annotated[int, Field(ge=1, le=100)] = 1
    thresholds: Thresholds = Thresholds()
    uuid_blocklist: list[Annotated[str, StringConstraints(pattern=r"^GPU-[0-9a-fA-F-]{36}$")]] = []
    kernel_log_allowlist: Path | None = None
    nccl_env: dict[Annotated[str, StringConstraints(pattern=r"^(NCCL|TORCH_NCCL|CUDA|GLOO)_[A-Z0-9_]+$")], str] = {}
    #: The interpreter on the nodes that has torch and this project's fabric_tests.
    python: str = "python3"
    #: How the stages start their agents: ``ssh``, one session per node held by the controller (the connection
    #: model); ``slurm``, one ``srun`` per launch inside a maintenance reservation (needs the ``slurm:`` section).
    launcher: Literal["ssh", "slurm"] = "ssh"
    #: GPUs per node that take part in multi-node stages (default: all of them).
    ranks_per_node: Annotated[int, Field(ge=1, le=64)] | None = None
    workload: Workload = Workload()
    baseline: BaselineJudgement = BaselineJudgement()

    @field_validator("stages")
    @classmethod
    def _ordered_unique(cls, stages: list[str]) -> list[str]:
        if len(set(stages)) != len(stages):
            raise ValueError("a stage is listed twice")
        if stages != sorted(stages, key=BURNIN_STAGES.index):
            raise ValueError(f"stages run cheapest first; write them in the order {', '.join(BURNIN_STAGES)}")
        return stages


class FailureBudget(Strict):
    provision: Percent = 10.0
    burnin: Percent = 20.0


class Acceptance(Strict):
    mtbf_hours: Annotated[float, Field(gt=0, le=1e7)]
    confidence: Annotated[float, Field(gt=0, lt=1)]


class Admission(Strict):
    spare_fraction: Annotated[float, Field(ge=0, le=0.5)] = 0.05
    #: Past this share of failing nodes a phase stops: something systemic is wrong.
    max_failure_percent: FailureBudget = FailureBudget()
    warnings_block_admission: bool = False
    unknown_blocks_admission: bool = True
    #: The MTBF the delivery's soak must demonstrate, and at what confidence (docs/spec.md gives the formula).
    acceptance: Acceptance | None = None


class Connection(Strict):
    transport: Literal["ssh", "local"] = "ssh"
    user: Name = "root"
    port: Annotated[int, Field(ge=1, le=65535)] = 22
    key_file: Path | None = None
    known_hosts: Path | None = None
    jump_host: str | None = None
    become: bool = True
    become_password: SecretRef | None = None
    forks: Annotated[int, Field(ge=1, le=1024)] = 32
    timeout_s: Annotated[int, Field(ge=1, le=3600)] = 30

    @field_validator("jump_host")
    @classmethod
    def _jump(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"(?:[A-Za-z0-9._-]+@)?[A-Za-z0-9.:_-]+(?::\d+)?", value):
            raise ValueError("write the jump host as [user@]host[:port]")
        return value


class Fault(Strict):
    kind: str
    node: str | None = None
    #: A GPU index (``gpu3``), an HCA (``mlx5_2``), a PCIe bridge BDF, or a cable
    #: (``leaf-su01-r0/17``) depending on the kind.
    target: str | None = None
    params: dict[str, Any] = {}


class Simulation(Strict):
    seed: int = 0
    faults: list[Fault] = []
    #: ``prefix``: playbooks reach each host through ``hw_root`` and its stand-ins first on PATH (any machine).
    #: ``namespace``: each host is presented at the real paths by an sshd running in its own namespace
    #: (``provision sim shell SPEC HOST -- sshd ...``), so the playbooks get no ``hw_root`` at all.
    presentation: Literal["prefix", "namespace"] = "prefix"
    #: How the simulated hosts' collectives complete. ``gloo``: ``wait()`` blocks until the data is there (the CPU
    #: backend the workers really run). ``nccl``: as NCCL on a GPU, ``wait()`` only orders the work and returns at
    #: once, and completion blocks in the device synchronise; the collectives test's judgements must hold for both.
    collective_semantics: Literal["gloo", "nccl"] = "gloo"
    #: Simulated seconds per real second for what takes hours on real hosts (the soak's clock and the faults that
    #: develop over time): 3600 soaks a simulated hour a second.
    time_scale: Annotated[float, Field(ge=1, le=1e6)] = 1.0


class Metrics(Strict):
    """Where the cluster's state and burn-in figures go for Prometheus."""

    #: node_exporter's ``--collector.textfile.directory``: rewritten after every mutating run (relative paths are
    #: relative to the spec's directory).
    textfile_dir: Path


class WatchBreaker(Strict):
    """When the watch stops acting: more nodes to quarantine within ``window_minutes`` than ``share`` of the admitted
    fleet (and never for fewer than ``min_nodes``) is a cause common to all of them (a driver rollout, a fabric
    event), not as many bad nodes. Tripped, it acts on no node and lists what it would have done until an operator
    clears it (``provision watch SPEC --clear-breaker``)."""

    share: Annotated[float, Field(gt=0, le=1)] = 0.1
    min_nodes: Annotated[int, Field(ge=1, le=100_000)] = 2
    window_minutes: Annotated[int, Field(ge=1, le=7 * 24 * 60)] = 60


class WatchSignals(Strict):
    """The passive sources ``provision watch`` follows as they grow, judged as ``topology flaps`` judges them
    (``fabric.link_health``) over its window. Paths are relative to the spec's directory. A simulated cluster
    given none follows its simulated fabric's own UFM log and counter snapshots."""

    #: UFM's ``event.log`` files.
    ufm_events: list[Path] = []
    #: Syslog files holding the hosts' IB carrier lines (a syslog server's: one file, or one per host).
    syslogs: list[Path] = []
    #: A directory where counter snapshots arrive (``perfquery -x`` snapshot directories, each with its
    #: ``captured_at``, or ibdiagnet ``db_csv`` files): each new one is compared with the one before it.
    counters: Path | None = None
    #: ``host netdev hca`` lines naming the HCA behind each IPoIB netdev the syslogs mention (without it the
    #: hosts are asked).
    netdev_map: Path | None = None
    #: Disable (``ibportstate``) the switch port of a cable found down or flapping; without it the watch names
    #: the cable and opens a ticket, and a person disables it.
    disable_ports: bool = False


#: A rung of the watch's repair ladder: re-validate the node as it is, reset its failing GPUs (``nvidia-smi -r``),
#: power-cycle it through its BMC, burn it in again (every node stage, DCGM, a pair test with an admitted partner),
#: or send it to RMA (held, with its evidence bundle, until ``provision return``).
LadderStep = Literal["revalidate", "gpu_reset", "power_cycle", "reburnin", "rma"]


class WatchLadder(Strict):
    """The watch's repair ladder for a node it quarantined: per class of the check that failed, the steps in
    order; after each (but ``rma``) the node is re-validated and returns to service on its own measurements, or
    goes on to the next step. Past the last, or after ``rma_failures`` quarantines by the watch within
    ``rma_window_days``, it goes to RMA. Classes: ``gpu`` (xid, ecc, row_remap, gpu_count, clocks, throttle,
    nvlink, nvlink_errors, vbios), ``network`` (ib_ports, rail_map, a cable that cut its rail), ``host`` (every
    other check)."""

    gpu: list[LadderStep] = ["gpu_reset", "power_cycle", "reburnin", "rma"]
    network: list[LadderStep] = ["revalidate", "power_cycle", "reburnin", "rma"]
    host: list[LadderStep] = ["revalidate", "power_cycle", "reburnin", "rma"]
    rma_failures: Annotated[int, Field(ge=1, le=100)] = 3
    rma_window_days: Annotated[float, Field(gt=0, le=365)] = 30.0

    @field_validator("gpu", "network", "host")
    @classmethod
    def _steps(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError("give at least one step (a class with none would hold its nodes with no way back)")
        if "rma" in value[:-1]:
            raise ValueError("rma ends the ladder: a step after it would never run")
        if len(set(value)) != len(value):
            raise ValueError("a step twice: the second would repeat what already failed")
        return value


class WatchRevalidate(Strict):
    """``watch.revalidate``: each admitted node re-validated at least every ``every``, at an idle moment, by a job
    of ``command`` (node-check, which speaks Nagios: its exit code is the verdict) in ``partition``, a low-tier
    partition over the same nodes that a user's job preempts (``PreemptMode=CANCEL``: docs/watch.md measures it).
    A CRITICAL node-check with ``--drain`` drains its node, which the watch reads back and quarantines as any
    node-check drain; at most ``per_pass`` jobs start a pass."""

    every: Duration
    partition: str
    per_pass: Annotated[int, Field(ge=1, le=1000)] = 1
    time_limit_minutes: Annotated[int, Field(ge=1, le=1440)] = 30
    command: Annotated[str, StringConstraints(min_length=1, max_length=1000)] = (
        "/usr/local/sbin/provision-node-check --drain")

    @field_validator("every")
    @classmethod
    def _span(cls, duration: str) -> str:
        hours = duration_hours(duration)
        if not 1 <= hours <= 90 * 24:
            raise ValueError(f"{duration} is outside one hour to 90 days")
        return duration

    @field_validator("partition")
    @classmethod
    def _partition(cls, name: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", name):
            raise ValueError(f"{name!r} is not a Slurm partition name (letters, digits, '_', '.', '-')")
        return name

    @property
    def every_seconds(self) -> float:
        return duration_hours(self.every) * 3600.0


class WatchPolicy(Strict):
    """``provision watch``: what it may do to the admitted fleet."""

    breaker: WatchBreaker = WatchBreaker()
    signals: WatchSignals = WatchSignals()
    ladder: WatchLadder = WatchLadder()
    #: Active checks of idle admitted nodes; without the section, none.
    revalidate: WatchRevalidate | None = None


class Forecasting(Strict):
    """``forecast``: how far ahead a component's trend is projected, and what warns. A forecast flags a node (a
    warning in ``status``, the report and the metrics), never drains it by itself."""

    #: A forecast that reaches its threshold within this span flags the node.
    horizon: Duration = "72h"
    #: The span of recent samples a trend is read from (its earlier half against its recent half).
    window: Duration = "48h"

    @field_validator("horizon", "window")
    @classmethod
    def _span(cls, duration: str) -> str:
        hours = duration_hours(duration)
        if not 1 / 60 <= hours <= 90 * 24:
            raise ValueError(f"{duration} is outside one minute to 90 days")
        return duration

    @property
    def horizon_hours(self) -> float:
        return duration_hours(self.horizon)

    @property
    def window_hours(self) -> float:
        return duration_hours(self.window)


class SlurmIntegration(Strict):
    """Admission reaches Slurm: after every run, node states and features follow the state store."""

    #: The slurm.conf ``scontrol`` reads (``SLURM_CONF``); default: the controller machine's own.
    conf: Path | None = None
    #: Keep the GPU model, the rail count and ``burnin_ok`` (admitted nodes) among each node's features.
    features: bool = True
    timeout_s: Annotated[float, Field(gt=0, le=300)] = 10.0


class NvlinkDomain(Strict):
    """One NVLink domain of a GB200/GB300 rack: its compute trays, in tray order (Platform Info's Tray Index 1, 2,
    ...), joined by the rack's switch trays into one NVLink fabric. ``size`` is the domain's GPUs as the site runs
    it (72 = 18 trays x 4; many sites run 16-tray domains of 64): read from here, never assumed."""

    name: Name
    hosts: Annotated[str, StringConstraints(min_length=1, max_length=10_000)]
    size: Annotated[int, Field(ge=1, le=576)]
    #: NVLink switch trays joining the compute trays (9 in an NVL72 rack).
    switch_trays: Annotated[int, Field(ge=1, le=18)] = 9
    #: The rack's chassis serial number as nvidia-smi's Platform Info prints it: every tray must show it.
    chassis_serial: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9._-]+$", max_length=64)] | None = None
    #: A tray that fails takes its domain to degraded: ``hold`` keeps the whole domain out until it is whole again;
    #: ``shrink`` admits the trays that passed as a smaller domain when at least ``min_trays`` remain.
    on_tray_failure: Literal["hold", "shrink"] = "hold"
    min_trays: Annotated[int, Field(ge=1, le=72)] | None = None


class ClusterSpec(Strict):
    cluster: ClusterInfo
    nodes: Nodes
    bmc: Bmc | None = None
    hardware: Annotated[dict[Name, HardwareProfile], Field(min_length=1)]
    #: GB200/GB300 racks: which trays make each NVLink domain (HGX hosts need none: a node is its own domain).
    nvlink_domains: list[NvlinkDomain] = []
    software: SoftwarePins
    host: HostPolicy = HostPolicy()
    fabric: FabricDesign
    burnin: Burnin = Burnin()
    admission: Admission = Admission()
    connection: Connection = Connection()
    simulation: Simulation | None = None
    metrics: Metrics | None = None
    slurm: SlurmIntegration | None = None
    #: The watch's policy; without the section, the defaults (a breaker at a tenth of the fleet in an hour).
    watch: WatchPolicy = WatchPolicy()
    #: Trends projected to their thresholds (issue 54); without the section, 72 h ahead from 48 h of samples.
    forecast: Forecasting = Forecasting()


class FabricSpec(Strict):
    """A spec of a fabric alone (``cluster`` and ``fabric`` with a cabling file): for auditing and watching a
    fabric this tool did not provision. The topology commands take it; everything else needs a ClusterSpec."""

    cluster: ClusterInfo
    fabric: FabricDesign


FABRIC_ONLY_SECTIONS = frozenset(FabricSpec.model_fields)


def _host_or_ip(value: str | None) -> str | None:
    if value is None:
        return value
    try:
        ipaddress.ip_address(value)
    except ValueError:
        if not re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?", value):
            raise ValueError("not an IP address or host name") from None
    return value
