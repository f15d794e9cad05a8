"""``ib_write_bw`` between two simulated hosts: real bytes over loopback TCP, perftest's report.

The server listens on its host's (loopback) address and the client connects to
it, so a test really needs both processes, the right port and the right order,
as on a real fabric. The bytes really cross the socket; the reported bandwidth
is what the simulated link would carry: the slower of the two ports' rates at
perftest's typical efficiency (doubled with ``-b``), times the share a degraded
cable on the flow's route lets through (``sim/fabric/link_quality.json``),
because loopback TCP says nothing about an InfiniBand link. GPUDirect (``--use_cuda``) needs the driver
loaded and nvidia-peermem registered on that host, as it does for real.
Only loopback peers are accepted: a simulated host never sends traffic elsewhere.
"""

from __future__ import annotations

import ipaddress
import json
import random
import socket
from dataclasses import dataclass
from pathlib import Path

from provision.sim.linkquality import StaleLinkQuality, fabric_dir_of, flow_factors
from provision.sim.node import load_state
from provision.sim.tools.common import ToolError, not_simulated

DEFAULT_PORT = 18515
EFFICIENCY = 0.965  # RDMA write at large messages reaches ~96-97% of the data rate
MAX_BYTES = 64 * 2**20  # bytes really moved per test; enough to prove the path without minutes of copying
ACCEPT_TIMEOUT_S = 120.0
CHUNK = 1 << 20
#: Options that change nothing a simulated link can show (CPU frequency checks, port and GID selection).
IGNORED_FLAGS = {"-F", "--CPU-freq"}
IGNORED_WITH_VALUE = {"-i", "--ib-port", "-x", "--gid-index"}


@dataclass
class Options:
    device: str = ""
    port: int = DEFAULT_PORT
    cuda: int | None = None
    bidirectional: bool = False
    gbits: bool = False
    iterations: int = 5000
    size: int = 65536
    all_sizes: bool = False
    duration: float | None = None
    peer: str | None = None


def _parse(args: list[str], cuda_built: bool = True) -> Options:
    options = Options()
    index = 0
    while index < len(args):
        arg = args[index]
        value = args[index + 1] if index + 1 < len(args) else None
        if arg in ("-d", "--ib-dev") and value:
            options.device, index = value, index + 1
        elif arg in ("-p", "--port") and value:
            options.port, index = int(value), index + 1
        elif arg.startswith("--use_cuda") and not cuda_built:  # perftest built without CUDA knows no such option
            raise ToolError(f"ib_write_bw: unrecognized option '{arg}'\n Usage:\n  ib_write_bw            start a "
                            "server and wait for connection", 1)
        elif arg.startswith("--use_cuda="):
            options.cuda = int(arg.split("=", 1)[1])
        elif arg == "--use_cuda" and value:
            options.cuda, index = int(value), index + 1
        elif arg in ("-b", "--bidirectional"):
            options.bidirectional = True
        elif arg in ("--report_gbits", "-R"):
            options.gbits = arg == "--report_gbits"
        elif arg in ("-n", "--iters") and value:
            options.iterations, index = int(value), index + 1
        elif arg.startswith("--iters="):
            options.iterations = int(arg.split("=", 1)[1])
        elif arg in ("-s", "--size") and value:
            options.size, index = int(value), index + 1
        elif arg in ("-a", "--all"):
            options.all_sizes = True
        elif arg in ("-D", "--duration") and value:
            options.duration, index = float(value), index + 1
        elif arg in IGNORED_FLAGS:
            pass
        elif arg in IGNORED_WITH_VALUE and value:
            index += 1
        elif not arg.startswith("-") and options.peer is None:
            options.peer = arg
        else:
            not_simulated("ib_write_bw", arg)
        index += 1
    if not options.device:
        raise ToolError(" Please specify the IB device with -d (several devices on this host).", 1)
    return options


def _port_state(root: Path, device: str) -> tuple[float, int]:
    """(rate Gb/s, LID) of the HCA's port, or an error when the port cannot carry traffic."""
    port = root / "sys" / "class" / "infiniband" / device / "ports" / "1"
    if not port.exists():
        raise ToolError(f" Couldn't find device {device}", 1)
    state = (port / "state").read_text().strip()
    if not state.startswith("4"):
        raise ToolError(f" Port number 1 state is {state.split(': ')[-1].title()}\n Couldn't set up local port", 1)
    return float((port / "rate").read_text().split()[0]), int((port / "lid").read_text().strip(), 16)


def _cuda_lines(root: Path, cuda: int) -> list[str]:
    state = load_state(root)
    gpus = [gpu for gpu in state["gpus"] if (root / "sys/bus/pci/devices" / gpu["bdf"]).exists()]
    if state.get("driver_loaded") is None or cuda >= len(gpus):
        raise ToolError("initializing CUDA\n cuInit() failed: CUDA_ERROR_NO_DEVICE", 1)
    if not (root / "sys/kernel/mm/memory_peers/nv_mem/version").exists():
        raise ToolError(" Couldn't allocate MR with CUDA memory: GPUDirect RDMA is not available "
                        "(nvidia-peermem not registered)", 1)
    bus = gpus[cuda]["bdf"][5:10]
    return ["initializing CUDA", "Listing all CUDA devices in system:", f"CUDA device {cuda}: PCIe address is {bus}",
            "", f"Picking device No. {cuda}", "creating CUDA Ctx", "making it the current CUDA Ctx"]


def _header(device: str, lid: int, remote_lid: int) -> list[str]:
    rule = "-" * 87
    return [
        "                    RDMA_Write BW Test",
        f" Dual-port       : OFF\t\tDevice         : {device}",
        " Number of qps   : 1\t\tTransport type : IB",
        " Connection type : RC\t\tUsing SRQ      : OFF",
        " PCIe relax order: ON", " TX depth        : 128", " CQ Moderation   : 1", " Mtu             : 4096[B]",
        " Link type       : IB", " Max inline data : 0[B]", " rdma_cm QPs\t : OFF", " Data ex. method : Ethernet",
        rule,
        f" local address: LID {lid:#06x} QPN 0x{random.randrange(0x10000):04x} PSN 0x{random.randrange(1 << 24):06x}",
        f" remote address: LID {remote_lid:#06x} QPN 0x{random.randrange(0x10000):04x} "
        f"PSN 0x{random.randrange(1 << 24):06x}",
        rule,
    ]


def _table(options: Options, link_gbps: float, seed: str) -> list[str]:
    unit = "Gb/sec" if options.gbits else "MB/sec"
    lines = [f" #bytes     #iterations    BW peak[{unit}]    BW average[{unit}]   MsgRate[Mpps]"]
    sizes = [2**power for power in range(1, 24)] if options.all_sizes else [options.size]
    rng = random.Random(seed)
    for size in sizes:
        small_message_limit = min(1.0, size / 16384)  # small messages are message-rate bound
        average = link_gbps * EFFICIENCY * (0.15 + 0.85 * small_message_limit) * rng.uniform(0.995, 1.0)
        if options.bidirectional:
            average *= 2
        peak = average * rng.uniform(1.0, 1.004)
        rate = average * 1e9 / 8 / size / 1e6
        shown = (peak, average) if options.gbits else (peak * 1000 / 8, average * 1000 / 8)
        lines.append(f" {size:<10} {options.iterations:<16} {shown[0]:.2f}            {shown[1]:.2f}\t\t   {rate:.6f}")
    return lines


def _address(root: Path) -> str:
    address = load_state(root).get("address", "127.0.0.1")
    try:
        return address if ipaddress.ip_address(address).is_loopback else "127.0.0.1"
    except ValueError:
        return "127.0.0.1"


def _route_share(root: Path, options: Options, writer: str, reader: str) -> float:
    """The fraction of the link rate this test's route carries: the writer-to-reader flow, and with ``-b``
    the mean of both directions (each direction is its own D-mod-K route)."""
    flows = [(writer, reader), (reader, writer)] if options.bidirectional else [(writer, reader)]
    try:
        shares = flow_factors(fabric_dir_of(root), flows)
    except StaleLinkQuality as error:
        raise ToolError(f" {error}", 1) from None
    return sum(shares) / len(shares)


def _hca(root: Path, device: str) -> str:
    return f"{load_state(root)['host']}/{device}"


def ib_write_bw(root: Path, args: list[str]) -> int:
    options = _parse(args, cuda_built=not load_state(root).get("perftest_without_cuda"))
    rate, lid = _port_state(root, options.device)
    cuda = _cuda_lines(root, options.cuda) if options.cuda is not None else []
    if options.peer is None:
        return _serve(root, options, rate, lid, cuda)
    return _connect(root, options, rate, lid, cuda)


def _serve(root: Path, options: Options, rate: float, lid: int, cuda: list[str]) -> int:
    address = _address(root)
    with socket.create_server((address, options.port), reuse_port=False) as server:
        server.settimeout(ACCEPT_TIMEOUT_S)
        print("\n".join([*cuda, "", "*" * 36, "* Waiting for client to connect... *", "*" * 36]), flush=True)
        try:
            connection, _peer = server.accept()
        except TimeoutError:
            raise ToolError(f" No client connected within {ACCEPT_TIMEOUT_S:g} s", 1) from None
        with connection, connection.makefile("rwb") as stream:
            hello = json.loads(stream.readline())
            stream.write((json.dumps({"rate": rate, "lid": lid, "hca": _hca(root, options.device)}) + "\n")
                         .encode())
            stream.flush()
            # as perftest's server: the test's parameters and both ends' addresses as soon as the client has
            # connected and the two have exchanged them, before a byte of the test moves; the results at the end
            print("\n".join(["-" * 87, *_header(options.device, lid, hello["lid"])]), flush=True)
            received = 0
            while received < hello["bytes"]:
                chunk = connection.recv(min(CHUNK, hello["bytes"] - received))
                if not chunk:
                    raise ToolError(" Client went away in the middle of the test", 1)
                received += len(chunk)
            stream.write(b"done\n")
            stream.flush()
    print("\n".join([*_table(options, min(rate, hello["rate"]) * _route_share(root, options, hello["hca"],
                                                                                _hca(root, options.device)),
                             f"{root}:{options.port}:server"), "-" * 87]))
    return 0


def _connect(root: Path, options: Options, rate: float, lid: int, cuda: list[str]) -> int:
    try:
        peer = ipaddress.ip_address(socket.gethostbyname(options.peer or ""))
    except (OSError, ValueError):
        raise ToolError(f" Couldn't resolve {options.peer}", 1) from None
    if not peer.is_loopback:
        not_simulated("ib_write_bw", f"to {peer}: simulated hosts only reach loopback peers")
    total = min(options.size * options.iterations * (23 if options.all_sizes else 1), MAX_BYTES)
    try:  # one attempt, as perftest's client makes (ethernet_client_connect): a server not listening yet is the
        # caller's to retry (fabric_tests.perftest does)
        connection = socket.create_connection((str(peer), options.port), timeout=10)
    except OSError:
        raise ToolError(f" Couldn't connect to {peer}:{options.port}\n Unable to open file descriptor for socket "
                        "connection", 1) from None
    with connection, connection.makefile("rwb") as stream:
        stream.write((json.dumps({"rate": rate, "lid": lid, "bytes": total, "hca": _hca(root, options.device)})
                      + "\n").encode())
        stream.flush()
        remote = json.loads(stream.readline())
        payload = bytes(CHUNK)
        sent = 0
        try:
            while sent < total:
                connection.sendall(payload[: min(CHUNK, total - sent)])
                sent += min(CHUNK, total - sent)
        except OSError:  # the server went away mid-test: on RC, the writes' retries run out (IBV_WC_RETRY_EXC_ERR)
            raise ToolError(f" Completion with error at client\n Failed status 12: wr_id 0 syndrom 0x81\n"
                            f"scnt={sent // CHUNK}, ccnt={max(0, sent // CHUNK - 128)}", 1) from None
        try:
            confirmed = stream.readline().strip() == b"done"
        except OSError:
            confirmed = False
        if not confirmed:
            raise ToolError(" Server did not confirm the transfer", 1)
    print("\n".join([*cuda, "-" * 87, *_header(options.device, lid, remote["lid"]),
                     *_table(options, min(rate, remote["rate"]) * _route_share(root, options,
                                                                               _hca(root, options.device),
                                                                               remote["hca"]),
                             f"{root}:{options.port}:client"), "-" * 87]))
    return 0
