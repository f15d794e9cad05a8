"""What the simulated node's ``python3`` does at start-up: rank-layer faults, and bytecode kept for zipped modules.

Only the simulated node's ``python3`` puts this directory on the path, so it runs on simulated hosts and nowhere
else. In a burn-in test's processes it reads the host's faults from its hardware root and, when there are any,
wraps the torch entry points a fault acts on. Which process is hit is decided at call time from
``LOCAL_RANK``, because the test launcher forks its workers after this runs. The tests themselves are unchanged.

Every Ansible module arrives as a zip that Python imports from and, unlike a file on disk, never keeps the
bytecode of: ``ansible.module_utils.basic`` and what it imports are compiled again in every module call (0.34 s
of CPU a call, 0.25 s with the bytecode kept). A real node pays that on its own CPU; the simulated hosts all pay
it on this machine's. So the node keeps what it compiled under its root, keyed by the source's hash (the same
source gives the same code object, only its file name is set again), as it keeps ``__pycache__`` for files.
"""

from __future__ import annotations

import json
import os
import sys
import time

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: every start of the node's Python runs this module, typing is not imported
    from collections.abc import Callable
    from typing import Any

    #: One of the host's faults, as node.json lists it (``kind``, ``local_rank`` and what the kind needs).
    Fault = dict[str, Any]
    #: A collective's identity for the wire delay: its name, its group's id, the bytes it moves.
    CallKey = tuple[str, int, int]

#: The simulated wire a healthy rail's bytes cross (gloo on loopback CPU workers): the floor of a degraded
#: port's delay. Its latency is what keeps a degraded port slower than this machine's noise: beside another
#: suite's load a healthy loopback call of a few KiB took ~10 ms of scheduler slices, and a port at 0.1 of its
#: speed delayed by 9 x (1 ms + bytes) was paired as healthy (0.06 of its peers unloaded, above 0.4 loaded).
WIRE_LATENCY_S = 5e-3
WIRE_BYTES_PER_S = 50e6

#: The most a slow rank's or a degraded port's delay adds to one call, kept well below the collective timeout
#: (10 s in the examples): a GPU at a fifth of its speed, a port at a tenth, is slow within a call, never a hang.
#: Each delay follows a call's measured time, and two such faults in one group (a slow rank and a degraded port,
#: both on rail 1) fed on each other's delays, each measuring its own cost with the other's delay in it, until a
#: call outlasted the timeout on a loaded machine: every member of the rail timed out and the stage stopped as
#: systemic (one clean clone), or the slow rank was named as hung (another). Unloaded, a delay is milliseconds.
CALL_DELAY_CAP_S = 1.5


def _node_state() -> dict[str, Any]:
    root = os.environ.get("PROVISION_SIM_ROOT")
    if not root:
        return {}
    try:
        with open(os.path.join(root, "var/lib/provision-sim/node.json"), encoding="utf-8") as handle:
            return dict(json.load(handle))
    except (OSError, ValueError):
        return {}


def _install_nccl_semantics() -> None:
    """NCCL's completion, over gloo: a collective's ``wait()`` returns at once (it only orders the GPU stream) and the
    data is there after the device synchronise, where the time is spent. Applied to the collectives test, whose
    hang and straggler judgements depend on it (DDP and FSDP wait on their own works and need the data)."""
    import torch
    import torch.distributed as dist

    pending: list[tuple[Any, tuple[Any, ...], dict[str, Any]]] = []

    class Queued:
        def __init__(self, work: Any) -> None:
            self._work = work

        def wait(self, *args: Any, **kwargs: Any) -> bool:
            pending.append((self._work, args, kwargs))
            return True

        def __getattr__(self, name: str) -> Any:
            return getattr(self._work, name)

    def defer(real: Callable[..., Any]) -> Callable[..., Any]:
        def collective(*args: Any, **kwargs: Any) -> Any:
            result = real(*args, **kwargs)
            if kwargs.get("async_op") and hasattr(result, "wait") and _test() == "collectives":
                return Queued(result)
            return result
        return collective

    real_synchronize = torch.cpu.synchronize

    def synchronize(*args: Any, **kwargs: Any) -> Any:
        while pending:  # in stream order, each with the timeout its wait() was given
            work, wait_args, wait_kwargs = pending.pop(0)
            work.wait(*wait_args, **wait_kwargs)
        return real_synchronize(*args, **kwargs)

    torch.cpu.synchronize = synchronize
    for name in ("all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor", "all_to_all_single", "broadcast"):
        if hasattr(dist, name):
            setattr(dist, name, defer(getattr(dist, name)))


def _mine(fault: Fault) -> bool:
    return os.environ.get("LOCAL_RANK") == str(fault["local_rank"])


def _test() -> str:
    """The test the agent was started for (``--test NAME``), read when a worker calls into torch."""
    argv = sys.argv
    return argv[argv.index("--test") + 1] if "--test" in argv[:-1] else ""


def _one_core_per_node(root: str) -> None:
    """A node's GPUs are alike, each its own device; the simulator's stand-in for them in the node test is one of
    this machine's cores per node, chosen by the node. Spread over every core, a node's workers differ by which core
    the scheduler gave each (the two cores of a VM measured 28% apart, per process, for hours): a difference of
    this machine's, not of the node, that would hide a GPU a few percent slow from the node-mate and baseline
    comparisons. Pinned in the agent, before it forks its workers, so they all inherit it."""
    import zlib

    try:
        cores = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cores[zlib.crc32(root.encode()) % len(cores)]})
    except (AttributeError, OSError):  # no affinity on this platform: the workers spread as before
        pass


def _mark_busy(root: str) -> None:
    """A worker that computes marks its GPU busy (``var/lib/provision-sim/busy/<pid>``: its local rank), as NVML
    sees a context on the device: the node's nvidia-smi then reports that GPU's clocks and power under load, and
    idle again once the process is gone. Marked at the worker's first matmul, in the worker itself (the agent
    forks its workers after this runs)."""
    import torch

    real_matmul = torch.matmul
    marked = {"pid": 0}

    def matmul(*args: Any, **kwargs: Any) -> Any:
        if marked["pid"] != os.getpid() and os.environ.get("LOCAL_RANK") is not None:
            marked["pid"] = os.getpid()
            directory = os.path.join(root, "var/lib/provision-sim/busy")
            try:
                os.makedirs(directory, exist_ok=True)
                with open(os.path.join(directory, str(os.getpid())), "w", encoding="utf-8") as handle:
                    handle.write(os.environ["LOCAL_RANK"])
            except OSError:  # a read-only root: the GPU reads idle, as before
                pass
        return real_matmul(*args, **kwargs)

    torch.matmul = matmul


def _always() -> bool:
    return True


def _sagged(fault: Fault, time_scale: float) -> bool:
    since: float = fault["since"]
    after_h: float = fault["after_h"]
    return (time.time() - since) * time_scale / 3600 >= after_h


def _clock_read_cost() -> float:
    """What one read of this thread's CPU clock costs: the median of a few hundred back-to-back reads."""
    reads = [time.thread_time() for _ in range(301)]
    return sorted(reads[index + 1] - reads[index] for index in range(300))[150]


def _corrupt_first(result: Any) -> None:
    """The result's first element slightly off, through numpy where it can: torch's two in-place calls on a
    one-element view cost half of a small matmul (a corrupting CPU worker measured at 0.67-0.70 of its node-mates,
    against the 0.7 band), numpy's a tenth."""
    try:
        values = result.detach().numpy()  # shares the tensor's memory
    except (TypeError, RuntimeError):  # a dtype numpy lacks (bf16), or a device it cannot see
        result.view(-1)[:1].mul_(1 + 1e-5).add_(1e-5)
        return
    first = (0,) * values.ndim
    values[first] = values[first] * (1 + 1e-5) + 1e-5


def _install(faults: list[Fault], time_scale: float = 1.0) -> None:
    """The node's rank faults, one installer per kind of fault: each wraps the torch call its fault acts in."""
    _install_matmul_faults(faults, time_scale)
    _install_step_slowdown(faults)
    _install_worker_errors(faults)
    _install_collective_faults(faults)


def _install_matmul_faults(faults: list[Fault], time_scale: float) -> None:
    """A slow or sagged GPU's matmul, a rank's wrong results (the node stage's)."""
    import torch

    slow = [fault for fault in faults if fault["kind"] == "slow_gpu"]
    slow += [{**fault, "kind": "slow_gpu", "struck": lambda fault=fault: _sagged(fault, time_scale)}
             for fault in faults if fault["kind"] == "clock_sag"]
    corrupt = [fault for fault in faults if fault["kind"] == "rank_wrong_result"]
    if slow or corrupt:
        real_matmul = torch.matmul

        read_cost = _clock_read_cost()

        def matmul(*args: Any, **kwargs: Any) -> Any:
            started = time.thread_time()
            result = real_matmul(*args, **kwargs)
            for fault in slow:
                if _mine(fault) and fault.get("struck", _always)():
                    # a device computing at `factor` of its peers' speed (a sagged clock: once it has sagged): it
                    # works longer, by the clock the node test times CPU workers with (their own thread's CPU
                    # time; one thread each), in proportion to what this call cost: beside another suite's load
                    # every call costs more (a shared core's caches), and a real GPU's slowness is a share of its
                    # work, not a fixed amount (a spin sized by the fastest call ever left a GPU 15% slow within 5%
                    # of its mates under load). Nothing carries into the next call (a credit owed back made the
                    # next call fast: a GPU 8% slow measured 1% slow). A clock read costs microseconds in a VM, as
                    # much as a small matmul's whole slowdown: the spin stops a read early.
                    now = time.thread_time()
                    until = now + (now - started) * (1 / fault["factor"] - 1) - read_cost
                    while time.thread_time() < until:
                        pass
            for fault in corrupt:
                if _mine(fault):  # silent data corruption: one element slightly off (well above float32 rounding),
                    _corrupt_first(result)  # at little cost to the timing
            return result

        torch.matmul = matmul


def _install_step_slowdown(faults: list[Fault]) -> None:
    """A training step slow every few steps (the training test's loss)."""
    import torch

    periodic = [fault for fault in faults if fault["kind"] == "step_slowdown"]
    if periodic:  # the loss of a training step: only the training test computes one
        real_loss = torch.nn.functional.cross_entropy
        steps = {"n": 0}

        def cross_entropy(*args: Any, **kwargs: Any) -> Any:
            steps["n"] += 1
            for fault in periodic:
                if _mine(fault) and steps["n"] % fault["period"] == 0:
                    until = time.thread_time() + fault["extra_ms"] / 1000
                    while time.thread_time() < until:  # busy, as a competing job would keep the device
                        pass
            return real_loss(*args, **kwargs)

        torch.nn.functional.cross_entropy = cross_entropy


def _install_worker_errors(faults: list[Fault]) -> None:
    """A worker that fails at init, exits clean or goes silent."""
    import torch.distributed as dist

    failing = [fault for fault in faults if fault["kind"] == "worker_error"]
    if failing:
        real_init = dist.init_process_group

        def init_process_group(*args: Any, **kwargs: Any) -> Any:
            for fault in failing:
                if not _mine(fault) or fault["test"] != _test():
                    continue
                if fault["when"] == "init":  # what NCCL raises when it cannot build the communicator
                    raise getattr(dist, "DistBackendError", RuntimeError)(
                        "NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, unhandled system error "
                        "(run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5\nncclSystemError: System call "
                        "(e.g. socket, malloc) or external library call failed or device error.\nLast error:\n"
                        "socketStartConnect: Connect to 127.0.0.1<40923> failed : Software caused connection abort")
            done = real_init(*args, **kwargs)
            for fault in failing:
                if not _mine(fault) or fault["test"] != _test():
                    continue
                if fault["when"] == "exit":  # gone without a word or an error, its exit status clean
                    os._exit(0)
                if fault["when"] == "silent":  # runs to the end, but nothing it prints reaches the agent's reader
                    devnull = os.open(os.devnull, os.O_WRONLY)
                    os.dup2(devnull, 1)
            return done

        dist.init_process_group = init_process_group


def _install_collective_faults(faults: list[Fault]) -> None:
    """A hung or slow rank, a corrupting one, a degraded HCA port (the collectives)."""
    import torch.distributed as dist

    stalls = [fault for fault in faults if fault["kind"] in ("rank_hang", "rank_slow")]
    corrupting = [fault for fault in faults if fault["kind"] == "collective_corruption"]
    # a degraded HCA port slows its rank's traffic; a degraded switch tray every rank of the rack's trays
    ports = [fault for fault in faults if fault["kind"] in ("degraded_hca_port", "degraded_switch_tray")]
    if not stalls and not corrupting and not ports:
        return
    calls = {"n": 0}

    def multi_node() -> bool:  # these faults live on the inter-node path (a lost packet, a slow NIC)
        return os.environ.get("WORLD_SIZE", "1") != os.environ.get("LOCAL_WORLD_SIZE", "1")

    fastest: dict[CallKey, float] = {}

    def wire_delay(key: CallKey, started: float, factor: float) -> None:
        """Sleep as if this call's bytes crossed a link at ``factor`` of its speed. The delay follows the fastest
        this call has ever completed (its own cost), never the time it spent waiting for slower peers: another
        fault's delay must not grow this one, nor this one grow itself. Its floor is the simulated wire's own
        time for those bytes: the fastest completion can be a bare last hop (the peers already waiting), and a
        delay built on that alone was lost in the noise of a loaded machine (a degraded pair measured healthy)."""
        fastest[key] = min(fastest.get(key, float("inf")), time.perf_counter() - started)
        wire = WIRE_LATENCY_S + key[-1] / WIRE_BYTES_PER_S
        time.sleep(min(max(fastest[key], wire) * (1 / factor - 1), CALL_DELAY_CAP_S))

    class SlowPort:
        """The work of a collective whose data crosses a degraded port: it completes ``factor`` as fast, for
        every member, because the bytes this rank sends arrive late. The delay is spent inside ``wait`` (on
        the wire), not before the call is posted, so this rank does not look like a straggler: its peers and
        it wait alike, and the rail is slow."""

        def __init__(self, work: Any, key: CallKey, started: float, factor: float) -> None:
            self._work, self._key, self._started, self._factor = work, key, started, factor

        def wait(self, *args: Any, **kwargs: Any) -> Any:
            done = self._work.wait(*args, **kwargs)
            wire_delay(self._key, self._started, self._factor)
            return done

        def __getattr__(self, name: str) -> Any:
            return getattr(self._work, name)

    def wrap(real: Callable[..., Any]) -> Callable[..., Any]:
        def collective(*args: Any, **kwargs: Any) -> Any:
            if not multi_node():
                return real(*args, **kwargs)
            calls["n"] += 1
            for fault in stalls:
                if not _mine(fault):
                    continue
                if fault["kind"] == "rank_hang" and calls["n"] > fault["after_ops"]:
                    while True:  # stopped for good: only the watchdog ends this process
                        time.sleep(3600)
            if real is real_all_reduce and any(_mine(fault) for fault in corrupting):
                args[0].add_(0.5)  # a flipped bit on the way to the wire: the contribution, not the timing
            started = time.perf_counter()
            result = real(*args, **kwargs)
            slow = [fault for fault in stalls if fault["kind"] == "rank_slow" and _mine(fault)]
            if slow and result is not None and hasattr(result, "wait"):
                result.wait()  # a slow rank: its own time, before it posts its next call
            for fault in slow:
                time.sleep(min((time.perf_counter() - started) * (1 / fault["factor"] - 1), CALL_DELAY_CAP_S))
            for fault in ports:
                if not _mine(fault):
                    continue
                key = (real.__name__, id(kwargs.get("group")),
                       max((arg.numel() * arg.element_size() for arg in args[:2] if hasattr(arg, "numel")),
                           default=0))
                if result is not None and hasattr(result, "wait"):
                    return SlowPort(result, key, started, fault["factor"])
                wire_delay(key, started, fault["factor"])  # a blocking call
            return result
        return collective

    real_all_reduce = dist.all_reduce
    # FSDP2 (fully_shard) talks through the *_single names where the release has them
    for name in ("all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor", "all_to_all_single", "broadcast",
                 "all_gather_single", "reduce_scatter_single"):
        if hasattr(dist, name):
            setattr(dist, name, wrap(getattr(dist, name)))


def _keep_zipped_bytecode(root: str) -> None:
    """Installed at every start of the node's Python (agents, probes, node-check): only the hook is set here;
    what it needs is imported when a zip's module is first compiled, by Ansible's modules alone."""
    import zipimport

    tag = f"{sys.implementation.cache_tag}-O{sys.flags.optimize}"
    directory = os.path.join(root, "var/cache/provision-sim/bytecode", tag)
    compile_source = getattr(zipimport, "_compile_source", None)
    if compile_source is None:  # another Python's zipimport: it compiles, as it always did
        return

    def compiled(pathname: str, source: bytes):  # type: ignore[no-untyped-def]
        import _imp
        import hashlib
        import marshal

        path = os.path.join(directory, hashlib.blake2b(source, digest_size=20).hexdigest())
        try:
            with open(path, "rb") as handle:
                code = marshal.load(handle)
        except (OSError, EOFError, ValueError, TypeError):
            code = compile_source(pathname, source)
            try:
                os.makedirs(directory, exist_ok=True)
                with open(f"{path}.{os.getpid()}", "wb") as handle:
                    marshal.dump(code, handle)
                os.replace(f"{path}.{os.getpid()}", path)
            except OSError:  # a read-only root compiles every time, as before
                pass
            return code
        _imp._fix_co_filename(code, pathname)  # type: ignore[attr-defined]
        return code

    zipimport._compile_source = compiled  # type: ignore[attr-defined]


def start() -> None:
    """The node's start-up: at this interpreter's start, or in an agent forked by the zygote once it has taken on
    the agent's environment."""
    if os.environ.get("PROVISION_SIM_ROOT"):
        _keep_zipped_bytecode(os.environ["PROVISION_SIM_ROOT"])
    # only in a test's processes (the agent and its forked workers, started with --test): every other Python on
    # the host (the pair tests' helper, the runtime probe) is spared torch's import
    state = _node_state() if _test() else {}
    if state:
        _mark_busy(os.environ["PROVISION_SIM_ROOT"])
    if state and _test() == "node":
        _one_core_per_node(os.environ["PROVISION_SIM_ROOT"])
    if state.get("rank_faults"):
        _install(list(state["rank_faults"]), float(state.get("time_scale", 1.0)))
    if state.get("collective_semantics") == "nccl" and _test() == "collectives":  # outermost: a fault's delay is
        _install_nccl_semantics()  # spent where completion blocks


# an agent's start goes to the warm interpreter that has torch imported (provision.sim.zygote), when it can be had
# (Linux: its address is in the abstract socket namespace); checked here, so no other Python imports the zygote
if (getattr(sys, "orig_argv", [])[1:3] == ["-m", "fabric_tests.agent"] and os.environ.get("PROVISION_SIM_ROOT")
        and sys.platform == "linux"):
    from provision.sim import zygote

    zygote.hand_over()  # returns only when no zygote took the agent
start()
