"""Parse ``nvidia-smi`` output: CSV queries, the ``-q`` report, and ``nvlink --status``.

Pure functions. The ``-q`` report is an indentation tree of ``Key : Value``
lines; it is returned as nested dicts keyed by GPU bus id, because checks address
GPUs by bus id (the one identity lspci, the kernel log and NVML share).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any

from provision.facts import fact

_UNIT = re.compile(r"\s*\[[^\]]*\]$")


def parse_query_csv(text: str, fields: list[str] | None = None) -> list[dict[str, str]]:
    """``--query-* --format=csv``; with ``noheader`` pass the ``fields`` that were asked for."""
    lines = [line for line in text.replace("\r\n", "\n").split("\n") if line.strip()]
    if fields is None:
        if not lines:
            return []
        fields = [_UNIT.sub("", name.strip()) for name in lines[0].split(",")]
        lines = lines[1:]
    rows = []
    for line in lines:
        cells = [cell.strip() for cell in line.split(",")]
        if len(cells) != len(fields):
            raise ValueError(f"expected {len(fields)} columns, got {len(cells)}: {line!r}")
        rows.append(dict(zip(fields, cells, strict=True)))
    return rows


@dataclass
class SmiReport:
    header: dict[str, str] = field(default_factory=dict)
    gpus: dict[str, dict[str, Any]] = field(default_factory=dict)  # bus id -> tree


def parse_query_report(text: str) -> SmiReport:
    """``nvidia-smi -q [-d ...]``."""
    report = SmiReport()
    stack: list[tuple[int, dict[str, Any]]] = []
    current_gpu: dict[str, Any] | None = None
    for raw in text.replace("\r\n", "\n").split("\n"):
        if not raw.strip() or raw.startswith("=="):
            continue
        gpu = re.match(r"^GPU ([0-9A-Fa-f]+:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*$", raw)
        if gpu:
            current_gpu = {}
            report.gpus[gpu.group(1)] = current_gpu
            stack = [(0, current_gpu)]
            continue
        indent = len(raw) - len(raw.lstrip(" "))
        key, colon, value = raw.strip().partition(":")
        key, value = key.strip(), value.strip()
        if current_gpu is None or indent == 0:
            if colon:
                report.header[key] = value
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1] if stack else current_gpu
        if colon and value:
            parent[key] = value
        else:
            child: dict[str, Any] = {}
            parent[key] = child
            stack.append((indent, child))
    if not report.gpus:
        raise ValueError("no 'GPU <bus id>' section in nvidia-smi -q's output")
    attached = report.header.get("Attached GPUs", "")
    if attached.isdigit() and int(attached) != len(report.gpus):
        raise ValueError(f"nvidia-smi -q says {attached} GPUs attached and reports {len(report.gpus)}: cut short")
    return report


def parse_query_xml(text: str) -> SmiReport:
    """``nvidia-smi -q -x``: the same tree as ``-q``, keyed by the XML's element names (``retired_pages``,
    ``clocks_event_reasons`` from 535 on, ``clocks_throttle_reasons`` before), the header from the root's leaves.
    Not a ``nvidia_smi_log`` document, or fewer ``gpu`` elements than ``attached_gpus`` says, is refused."""
    import xml.etree.ElementTree as ElementTree

    try:
        root = ElementTree.fromstring(text.strip())
    except ElementTree.ParseError as error:
        raise ValueError(f"nvidia-smi -q -x's output is not XML: {error}") from None
    if root.tag != "nvidia_smi_log":
        raise ValueError(f"not nvidia-smi's XML log: the root is <{root.tag}>")

    def tree(element: ElementTree.Element) -> dict[str, Any] | str:
        if len(element) == 0:
            return (element.text or "").strip()
        return {child.tag: tree(child) for child in element}

    report = SmiReport()
    for child in root:
        if child.tag == "gpu":
            report.gpus[child.get("id", "")] = {grandchild.tag: tree(grandchild) for grandchild in child}
        elif len(child) == 0:
            report.header[child.tag] = (child.text or "").strip()
    attached = report.header.get("attached_gpus", "")
    if not report.gpus or (attached.isdigit() and int(attached) != len(report.gpus)):
        raise ValueError(f"nvidia-smi -q -x says {attached or '?'} GPUs attached and reports {len(report.gpus)}")
    return report


#: The flags of the Fabric block's Health (driver 560 on; older drivers print fewer): ``True`` is a fault.
FABRIC_HEALTH_FLAGS = ("Route Recovery in progress", "Route Unhealthy", "Access Timeout Recovery",
                       "Incorrect Configuration")


@dataclass(frozen=True)
class GpuFabric:
    """One GPU's place in an NVLink domain as ``nvidia-smi -q`` prints it (field guide 8.2): the Fabric block
    (``State``, ``Status``, ``CliqueId``, ``ClusterUUID``, ``Health``) and Platform Info (where the tray sits).
    Every value as printed (``N/A`` where the driver says so, ``""`` where it printed nothing): a GPU is named by
    its UUID, because the two GPUs of a GB200 superchip share a serial number."""

    pci: str
    uuid: str
    product: str
    state: str
    status: str
    clique_id: str
    cluster_uuid: str
    health: dict[str, str]
    chassis_serial: str
    slot: str
    tray_index: str
    host_id: str
    module_id: str
    c2c_mode: str


def parse_gpu_fabric(text: str) -> list[GpuFabric]:
    """``nvidia-smi -q``: each GPU's Fabric block and Platform Info. A report with no GPU section, or a GPU with no
    Fabric block at all (a driver before 550 prints none), is refused: silence about the fabric is not a
    healthy fabric."""
    report = parse_query_report(text)
    found = []
    for pci, tree in report.gpus.items():
        fabric = tree.get("Fabric")
        if not isinstance(fabric, dict):
            raise ValueError(f"GPU {pci} has no Fabric block in nvidia-smi -q (a driver before 550 prints none)")
        platform = tree.get("Platform Info")
        platform = platform if isinstance(platform, dict) else {}
        health = fabric.get("Health")
        found.append(GpuFabric(
            pci=pci.lower(), uuid=str(tree.get("GPU UUID", "")), product=str(tree.get("Product Name", "")),
            state=str(fabric.get("State", "")), status=str(fabric.get("Status", "")),
            clique_id=str(fabric.get("CliqueId", "")), cluster_uuid=str(fabric.get("ClusterUUID", "")),
            health={key: str(value) for key, value in health.items()} if isinstance(health, dict) else {},
            chassis_serial=str(platform.get("Chassis Serial Number", "")), slot=str(platform.get("Slot Number", "")),
            tray_index=str(platform.get("Tray Index", "")), host_id=str(platform.get("Host ID", "")),
            module_id=str(platform.get("Module Id", "")), c2c_mode=str(tree.get("GPU C2C Mode", ""))))
    return found


@dataclass
class NvlinkGpu:
    index: int
    name: str
    uuid: str
    links: dict[int, float | None] = field(default_factory=dict)  # GB/s, None when inactive
    all_inactive: bool = False

    @property
    def inactive_links(self) -> list[int]:
        return [link for link, speed in self.links.items() if speed is None]


def parse_nvlink_status(text: str) -> list[NvlinkGpu]:
    """``nvidia-smi nvlink --status``; empty output means no NVLink (a PCIe GPU)."""
    gpus: list[NvlinkGpu] = []
    for raw in text.replace("\r\n", "\n").split("\n"):
        line = raw.strip()
        head = re.match(r"^GPU (\d+): (.*) \(UUID: (GPU-[0-9a-fA-F-]+)\)$", line)
        if head:
            gpus.append(NvlinkGpu(int(head.group(1)), head.group(2), head.group(3)))
            continue
        if not gpus:
            continue
        if "all links are inactive" in line:
            gpus[-1].all_inactive = True
            continue
        link = re.match(r"^Link (\d+): (?:([\d.]+) GB/s|<inactive>)$", line)
        if link:
            gpus[-1].links[int(link.group(1))] = float(link.group(2)) if link.group(2) else None
    return gpus


@dataclass
class NvlinkErrorsGpu:
    index: int
    name: str
    uuid: str
    links: dict[int, dict[str, int]] = field(default_factory=dict)  # link -> error counter name -> count
    #: What the driver prints beside the errors (Blackwell): traffic (``Tx packets``), corrected codewords by symbols
    #: fixed (``FEC Errors - 0`` reads in the billions on a healthy link), BERs (``15e-255`` is the floor), raw
    #: pre-correction lane counters (non-zero on a healthy link), PLR blocks and the recovery events' total: link ->
    #: name -> value as printed. None is an error count.
    statistics: dict[int, dict[str, str]] = field(default_factory=dict)

    def total(self, link: int) -> int:
        return sum(self.links[link].values())

    def recovery_events(self, link: int) -> int | None:
        """A link's recovery events since the driver loaded: Blackwell's successful and failed ones, Hopper's
        ``Recovery Errors``; None where the listing has no such counter for it."""
        counters = self.links.get(link, {})
        named = [counters[name] for name in RECOVERY_COUNTERS if name in counters]
        return sum(named) if named else None


_LINK_COUNTER = re.compile(r"^Link (\d+): ([A-Za-z][A-Za-z0-9 \-]*?): (\S+)$")
#: Error counters as the drivers name them: Hopper's three (R535) and Blackwell's (R570+: the names a B300 prints
#: on 595.91.07). A name that ends so but is one of the statistics below is not one.
_ERROR_NAME = re.compile(r"(Errors|events|discards)$")
#: What Blackwell's listing prints that is no error count (``NvlinkErrorsGpu.statistics``), by exact name (the
#: names a B300 printed on 595.91.07, and ``PLR Xmit Blocks`` from another parser's test): the recovery events'
#: total is their sum, counted once through the successful and failed ones. Any other name that is not an error
#: count is not recognised (a listing with one is unknown), never filed as harmless.
_STATISTIC_NAME = re.compile(r"^(?:(?:Tx|Rx) (?:packets|bytes)|(?:Effective|Symbol) BER|FEC Errors - \d+"
                             r"|Raw BER (?:Lane \d+|Total)|Raw Errors Lane \d+|PLR Xmit Blocks"
                             r"|Total link recovery events)$")
#: The recovery counters a link's trend is read from (the soak): Blackwell's, then Hopper's.
RECOVERY_COUNTERS = ("Link recovery successful events", "Link recovery failed events", "Recovery Errors")


@dataclass
class NvlinkErrors:
    """``nvidia-smi nvlink -e`` read: the GPUs with their counters, and the lines that were neither a GPU, a
    counter nor blank (counted, a few kept): an elided or foreign listing is never read as a clean one."""

    gpus: list[NvlinkErrorsGpu] = field(default_factory=list)
    unrecognised: int = 0
    samples: list[str] = field(default_factory=list)


def parse_nvlink_errors(text: str) -> NvlinkErrors:
    """``nvidia-smi nvlink -e``: per GPU, per link, each error counter the driver prints (Replay, Recovery and CRC
    Errors up to Hopper; Blackwell's Rx, integrity, discards and recovery events) and, apart, the statistics
    Blackwell prints beside them (never an error count: a healthy link's corrected codewords number in the
    billions). Counts are since the driver loaded. A ``Link N: ...`` line that is not a counter, an error count
    that is not a whole number, or a count before any GPU, is refused; a counter name that is neither an error
    nor a known statistic, and any other line, is counted as not recognised."""
    read = NvlinkErrors()
    for raw in text.replace("\r\n", "\n").split("\n"):
        line = raw.strip()
        if not line or line.startswith("==="):
            continue
        head = re.match(r"^GPU (\d+): (.*) \(UUID: (GPU-[0-9a-fA-F-]+)\)$", line)
        if head:
            read.gpus.append(NvlinkErrorsGpu(int(head.group(1)), head.group(2), head.group(3)))
            continue
        counter = _LINK_COUNTER.match(line)
        if not counter or not read.gpus:
            if line.startswith("Link ") or counter:
                raise ValueError(f"not an NVLink error counter: {line[:120]!r}")
            _unrecognised(read, line)
            continue
        link, name, value = int(counter.group(1)), counter.group(2), counter.group(3)
        gpu = read.gpus[-1]
        if _STATISTIC_NAME.search(name):
            gpu.statistics.setdefault(link, {})[name] = value
        elif _ERROR_NAME.search(name):
            if not value.isdigit():
                raise ValueError(f"not an NVLink error count: {line[:120]!r}")
            gpu.links.setdefault(link, {})[name] = int(value)
        else:
            _unrecognised(read, line)
    return read


def _unrecognised(read: NvlinkErrors, line: str) -> None:
    read.unrecognised += 1
    if len(read.samples) < 3:
        read.samples.append(line[:120])


#: ``nvidia-smi topo -m``'s PCIe relations, nearest first (NV# is NVLink, X the device itself).
TOPO_RANK = {"PIX": 0, "PXB": 1, "PHB": 2, "NODE": 3, "SYS": 4}
_TOPO_CELL = re.compile(r"^(X|NV\d+|PIX|PXB|PHB|NODE|SYS)$")
#: A relation cut to two letters and run into the CPU affinity (``PH0-115``), as some drivers print the last NIC.
_TOPO_RUN_ON = re.compile(r"^(PH|PI|PX|NO|SY)(\d[\d,\-]*)$")
_TOPO_CUT = {"PH": "PHB", "PI": "PIX", "PX": "PXB", "NO": "NODE", "SY": "SYS"}


@dataclass
class TopoMatrix:
    devices: list[str]  # column order: GPU0.., then NIC0.. (or HCA names, before the NIC legend existed)
    relation: dict[str, dict[str, str]] = field(default_factory=dict)  # row -> column -> X | NV18 | PIX | ...
    cpu_affinity: dict[str, str] = field(default_factory=dict)
    numa_affinity: dict[str, str] = field(default_factory=dict)
    nics: dict[str, str] = field(default_factory=dict)  # NIC0 -> mlx5_0

    def name(self, device: str) -> str:
        """The HCA name of a NIC column (``NIC0`` -> ``mlx5_0``); GPUs and legend-less names as they are."""
        return self.nics.get(device, device)


def parse_topo_matrix(text: str) -> TopoMatrix:
    """``nvidia-smi topo -m``: the matrix (tab or space separated, ``X`` or `` X `` on the diagonal), CPU and NUMA
    affinity per GPU, and the NIC legend (older drivers name HCAs in the header instead). A GPU row shorter than the
    header is refused, except the known run-on of a cut last relation into the affinity (``PH0-115``)."""
    lines = text.replace("\r\n", "\n").split("\n")
    header = next((line.split() for line in lines if line.split()[:1] == ["GPU0"]), None)
    if header is None:
        raise ValueError("no 'GPU0 ...' header in nvidia-smi topo -m's output")
    devices = header[:header.index("CPU")] if "CPU" in header else header
    matrix = TopoMatrix(list(devices))
    in_legend = False
    for line in lines:
        cells = line.split()
        if not cells:
            continue
        if line.strip() == "NIC Legend:":
            in_legend = True
            continue
        if in_legend:
            if (legend := re.match(r"^(NIC\d+): (\S+)$", line.strip())) is not None:
                matrix.nics[legend.group(1)] = legend.group(2)
            continue
        if cells[0] not in devices or cells == header:
            continue
        row, rest = cells[0], cells[1:]
        relations = rest[:len(devices)]
        if len(relations) == len(devices) and (run_on := _TOPO_RUN_ON.match(relations[-1])):
            relations[-1] = _TOPO_CUT[run_on.group(1)]
            rest = [*rest[:len(devices)], run_on.group(2), *rest[len(devices):]]
        if len(relations) != len(devices) or not all(_TOPO_CELL.match(cell) for cell in relations):
            raise ValueError(f"topo -m row {row} not understood: {line.strip()[:160]!r}")
        matrix.relation[row] = dict(zip(devices, relations, strict=True))
        affinity = rest[len(devices):]
        if row.startswith("GPU") and affinity:
            matrix.cpu_affinity[row] = affinity[0]
            if len(affinity) > 1:
                matrix.numa_affinity[row] = affinity[1]
    gpus = [device for device in devices if device.startswith("GPU")]
    if not gpus or any(gpu not in matrix.relation for gpu in gpus):
        raise ValueError(f"topo -m lists {len(gpus)} GPU columns but rows for {sorted(matrix.relation)}")
    return matrix


#: The GPU fields preflight asks for (one CSV row per GPU, in this order).
GPU_FIELDS = ["index", "uuid", "serial", "pci.bus_id", "driver_version", "vbios_version", "ecc.mode.current",
              "ecc.mode.pending", "ecc.errors.uncorrected.volatile.total", "ecc.errors.corrected.volatile.total",
              "temperature.gpu", "pcie.link.gen.max", "pcie.link.width.current", "clocks_event_reasons.active",
              "persistence_mode", "mig.mode.current", "clocks.applications.graphics",
              "clocks.default_applications.graphics"]
REMAP_FIELDS = ["gpu_bus_id", "remapped_rows.failure", "remapped_rows.pending", "remapped_rows.correctable",
                "remapped_rows.uncorrectable"]

_BUS_ID = re.compile(r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$")


@dataclass(frozen=True)
class Gpu:
    """One GPU's row of preflight's ``--query-gpu`` (:data:`GPU_FIELDS`, in order), each value as nvidia-smi printed
    it (``[N/A]`` and ``[Not Supported]`` included: what a value means is the check's to say)."""

    index: str
    uuid: str
    serial: str
    bus_id: str
    driver_version: str
    vbios_version: str
    ecc_mode: str
    ecc_mode_pending: str
    ecc_uncorrected_volatile: str
    ecc_corrected_volatile: str
    temperature_c: str
    pcie_gen_max: str
    pcie_width: str
    clocks_event_reasons: str
    persistence_mode: str
    mig_mode: str
    application_clock_mhz: str
    default_application_clock_mhz: str


#: Each queried field and the attribute of :class:`Gpu` it fills.
GPU_COLUMNS = dict(zip(GPU_FIELDS, (column.name for column in dataclasses.fields(Gpu)), strict=True))


@dataclass(frozen=True)
class RemappedRows:
    """One GPU's row-remapping state (``--query-remapped-rows``): failure and pending as printed (``0``/``1`` or
    ``No``/``Yes`` by driver), the counts of rows remapped for correctable and uncorrectable errors."""

    bus_id: str
    failure: str
    pending: str
    correctable: str
    uncorrectable: str


def parse_gpus(text: str) -> list[Gpu]:
    """Preflight's GPU query (``--format=csv,noheader,nounits``), a :class:`Gpu` per row."""
    return [Gpu(**{GPU_COLUMNS[name]: value for name, value in row.items()})
            for row in parse_gpu_rows(text, GPU_FIELDS, "pci.bus_id")]


def parse_remapped_rows(text: str) -> list[RemappedRows]:
    """``--query-remapped-rows`` (:data:`REMAP_FIELDS`, ``--format=csv,noheader``), a row per GPU."""
    return [RemappedRows(*(row[name] for name in REMAP_FIELDS))
            for row in parse_gpu_rows(text, REMAP_FIELDS, "gpu_bus_id")]


def parse_gpu_rows(text: str, fields: list[str], bus_field: str) -> list[dict[str, str]]:
    """A per-GPU query's rows, each naming its GPU by a well-formed bus id. No row at all, or a row whose bus id is
    not one (a prefix we do not know, a cut line), is refused: a GPU node always lists its GPUs."""
    rows = parse_query_csv(text, fields)
    if not rows:
        raise ValueError("nvidia-smi listed no GPU (empty output)")
    for row in rows:
        if not _BUS_ID.match(row[bus_field]) or ("index" in row and not row["index"].isdigit()):
            raise ValueError(f"not a GPU row: {', '.join(row.values())[:200]!r}")
    return rows


_QUERY_NAME = re.compile(r'"([a-z0-9_.]+)"')


def parse_help_query(text: str) -> list[str]:
    """``nvidia-smi --help-query-gpu``: every field name it accepts, aliases too (``"clocks_event_reasons.active"
    or "clocks_throttle_reasons.active"`` from the 535 branch on; only the throttle names before it). The entries
    are quoted names at the start of a line; descriptions follow on their own lines."""
    names = [name for line in text.splitlines() if line.startswith('"') for name in _QUERY_NAME.findall(line)]
    if not names:
        raise ValueError("no field names in nvidia-smi --help-query-gpu's output")
    return sorted(set(names))


#: The names of a field across driver branches, newest first: the first one the driver lists is asked for.
FIELD_ALIASES = {"clocks_event_reasons.active": ("clocks_event_reasons.active", "clocks_throttle_reasons.active")}


def gpu_fields(accepted: list[str] | None) -> list[str]:
    """:data:`GPU_FIELDS` as this driver names them (``accepted`` from :func:`parse_help_query`; None when the
    probe failed: the newest names, and a driver that refuses one makes the GPU checks unknown, never ok). The
    order is kept, so the rows parse under :data:`GPU_FIELDS`'s names whichever alias was asked for."""
    return _as_named(GPU_FIELDS, accepted)


def _as_named(fields: list[str], accepted: list[str] | None) -> list[str]:
    if accepted is None:
        return list(fields)
    known = set(accepted)
    return [next((name for name in FIELD_ALIASES.get(field, (field,)) if name in known), field) for field in fields]


def gpus_command(accepted: list[str] | None) -> fact.Fact[list[Gpu]]:
    """The GPUS fact asking for the field names this driver accepts."""
    fields = gpu_fields(accepted)
    return fact.command("gpus", ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"],
                        parse_gpus)


#: What the soak polls from each GPU under load (one CSV row per GPU, in this order): the clock-event reasons and
#: temperature behind its throttle trend, the uncorrectable count behind its memory trend, and the SM clock (with its
#: maximum) and board power beside them, so a clock that sags with no reason the driver names is seen too.
TELEMETRY_FIELDS = ["index", "pci.bus_id", "clocks_event_reasons.active", "temperature.gpu",
                    "ecc.errors.uncorrected.volatile.total", "clocks.sm", "clocks.max.sm", "power.draw",
                    "power.limit"]


@dataclass(frozen=True)
class GpuTelemetry:
    """One GPU's row of the soak's query (:data:`TELEMETRY_FIELDS`), each value as nvidia-smi printed it with
    ``nounits`` (``[N/A]`` where the board does not report one: a power reading on some boards)."""

    index: str
    bus_id: str
    clocks_event_reasons: str
    temperature_c: str
    ecc_uncorrected_volatile: str
    sm_clock_mhz: str
    max_sm_clock_mhz: str
    power_draw_w: str
    power_limit_w: str


TELEMETRY_COLUMNS = dict(zip(TELEMETRY_FIELDS, (column.name for column in dataclasses.fields(GpuTelemetry)),
                             strict=True))


def parse_telemetry(text: str) -> list[GpuTelemetry]:
    """The soak's GPU query (``--format=csv,noheader,nounits``), a :class:`GpuTelemetry` per row."""
    return [GpuTelemetry(**{TELEMETRY_COLUMNS[name]: value for name, value in row.items()})
            for row in parse_gpu_rows(text, TELEMETRY_FIELDS, "pci.bus_id")]


def telemetry_command(accepted: list[str] | None) -> fact.Fact[list[GpuTelemetry]]:
    """The soak's GPU query in the field names this driver accepts (as :func:`gpus_command`)."""
    fields = _as_named(TELEMETRY_FIELDS, accepted)
    return fact.command("gpu_telemetry", ["nvidia-smi", f"--query-gpu={','.join(fields)}",
                                          "--format=csv,noheader,nounits"], parse_telemetry)


#: Which ``--query-gpu`` fields this driver knows: read once per node before the GPU query is built.
GPU_QUERY_FIELDS = fact.command("gpu_query_fields", ["nvidia-smi", "--help-query-gpu"], parse_help_query)
#: The GPU query with the newest field names (what preflight asks when the driver lists none).
GPUS = gpus_command(None)
#: The soak's GPU query with the newest field names.
TELEMETRY = telemetry_command(None)
REMAPPED_ROWS = fact.command("remapped_rows", ["nvidia-smi", f"--query-remapped-rows={','.join(REMAP_FIELDS)}",
                                               "--format=csv,noheader"], parse_remapped_rows)
RETIRED_PAGES = fact.command("retired_pages", ["nvidia-smi", "-q", "-d", "PAGE_RETIREMENT"], parse_query_report)
NVLINK = fact.command("nvlink", ["nvidia-smi", "nvlink", "-s"], parse_nvlink_status)
NVLINK_ERRORS = fact.command("nvlink_errors", ["nvidia-smi", "nvlink", "-e"], parse_nvlink_errors)
TOPOLOGY = fact.command("topology", ["nvidia-smi", "topo", "-m"], parse_topo_matrix)
#: The whole of ``-q`` as XML: what telemetry collectors read (a soak's polls), element names stable across drivers.
QUERY_XML = fact.command("query_xml", ["nvidia-smi", "-q", "-x"], parse_query_xml)
#: The whole report: nvidia-smi has no display filter for the Fabric block or Platform Info.
GPU_FABRIC = fact.command("gpu_fabric", ["nvidia-smi", "-q"], parse_gpu_fabric)
