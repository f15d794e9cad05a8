"""The per-node launcher: one per node, forks one worker per GPU, and is the watchdog on that node.

``python3 -m fabric_tests.agent --test NAME --nproc N --nnodes M --node-rank R --master HOST:PORT
--deadline SECONDS [--env K=V ...] [--params JSON]``

Why not torchrun: torchrun starts every worker as a fresh interpreter (each importing torch, seconds of CPU)
and has no notion of a test deadline. Here torch is imported once and the workers are forked from it (before
any CUDA context exists), rendezvous is torch.distributed's own c10d TCPStore at ``--master``, and the agent
enforces the deadline: when it passes, each surviving worker dumps its Python stack (faulthandler, and py-spy
when installed), is killed, and is confirmed gone before the agent reports. A worker that was still alive at
the deadline is how a hang shows up in the summary; the ranks that never *posted* an operation others
posted are the ones that stopped (see ``fabric_tests.collectives``).
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import importlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import traceback
import warnings
from typing import Any

from fabric_tests.protocol import NODE_VARIABLE, emit

STUCK_GRACE_S = 5.0
ORPHANED_EXIT = 129  # as if hung up on: the controller that launched the agent is gone
TESTS = {"node": "fabric_tests.node_test", "collectives": "fabric_tests.collectives",
         "training": "fabric_tests.training", "busbw_reference": "fabric_tests.busbw_reference"}


def _arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="fabric_tests.agent")
    parser.add_argument("--test", required=True, choices=sorted(TESTS))
    parser.add_argument("--nproc", type=int, required=True)
    parser.add_argument("--nnodes", type=int, default=1)
    parser.add_argument("--node-rank", type=int, default=0)
    parser.add_argument("--node-ranks", default="", metavar="JSON",
                        help="host -> node rank, for a launcher that starts the same command on every node (srun): "
                             "this node's rank is its entry, found by SLURMD_NODENAME or else the hostname")
    parser.add_argument("--master", required=True, help="HOST:PORT of the c10d store (node rank 0 serves it); "
                        "'local' for a single-node world whose store this agent serves on a free port")
    parser.add_argument("--deadline", type=float, required=True)
    parser.add_argument("--env", action="append", default=[], metavar="K=V")
    parser.add_argument("--params", default="{}")
    args = parser.parse_args(argv)
    if args.node_ranks:
        ranks = json.loads(args.node_ranks)
        name = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
        if name not in ranks:
            parser.error(f"--node-ranks names no rank for this node ({name})")
        args.node_rank = int(ranks[name])
        os.environ[NODE_VARIABLE] = name  # every record of this node, its workers' too, names it
    return args


SIOCGIFADDR = 0x8915  # linux/sockios.h: an interface's IPv4 address


def _address_of(interface: str) -> str | None:
    import fcntl
    import struct

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            packed = fcntl.ioctl(probe.fileno(), SIOCGIFADDR, struct.pack("256s", interface[:15].encode()))
        except OSError:
            return None
    return socket.inet_ntoa(packed[20:24])


def interface_toward(host: str) -> str | None:
    """The network interface this node reaches ``host`` (the rendezvous store) through: NCCL's bootstrap must use
    it, not the first interface NCCL finds (on HGX nodes often a BMC's USB NIC or a link-local address)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((socket.gethostbyname(host), 9))  # no packet leaves: a UDP connect only picks the route
            local = probe.getsockname()[0]
    except OSError:
        return None
    return next((name for _, name in socket.if_nameindex() if _address_of(name) == local), None)


def _nccl_bootstrap(master: str) -> dict[str, str]:
    """``NCCL_SOCKET_IFNAME`` set to the interface toward the master (exact match), unless the spec set it."""
    if master == "local" or "NCCL_SOCKET_IFNAME" in os.environ:
        return {}
    interface = interface_toward(master.rsplit(":", 1)[0])
    if interface is None:
        return {}
    os.environ["NCCL_SOCKET_IFNAME"] = f"={interface}"
    return {"NCCL_SOCKET_IFNAME": f"={interface}"}


def _worker(module: Any, args: argparse.Namespace, local_rank: int, params: dict[str, Any]) -> None:
    """Runs in the forked child; never returns."""
    code = 1
    try:
        faulthandler.register(signal.SIGUSR1, all_threads=True)
        rank = args.node_rank * args.nproc + local_rank
        os.environ.update(LOCAL_RANK=str(local_rank), RANK=str(rank), WORLD_SIZE=str(args.nproc * args.nnodes),
                          LOCAL_WORLD_SIZE=str(args.nproc))
        host, port = args.master.rsplit(":", 1)
        context = {"rank": rank, "local_rank": local_rank, "node_rank": args.node_rank, "nproc": args.nproc,
                   "nnodes": args.nnodes, "master_addr": host, "master_port": int(port), "params": params}
        result = module.run(context)
        emit("result", rank=rank, local_rank=local_rank, **result)
        code = 0
    except BaseException as error:
        emit("error", rank=args.node_rank * args.nproc + local_rank, local_rank=local_rank,
             error=f"{type(error).__name__}: {str(error)[:500]}", where=where(error))
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


#: The innermost frames an error record keeps: enough to tell a checkpoint's load from a barrier.
WHERE_FRAMES = 6


def where(error: BaseException) -> list[str]:
    """The innermost frames of ``error``'s traceback, ``file:line in function``: when every rank fails at once, the
    rank that failed first (a timeout) and the step it was in (the checkpoint's load, a barrier) are the only clue
    to the cause, and the message alone names neither."""
    frames = traceback.extract_tb(error.__traceback__)[-WHERE_FRAMES:]
    return [f"{frame.filename}:{frame.lineno} in {frame.name}" for frame in frames]


def _dump_stacks(pid: int) -> None:
    py_spy = shutil.which("py-spy")
    if py_spy:
        subprocess.run([py_spy, "dump", "--pid", str(pid)], timeout=20, check=False,
                       stdout=sys.stderr, stderr=subprocess.DEVNULL)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGUSR1)  # faulthandler prints every thread's stack to stderr


def supervise(pids: dict[int, int], deadline: float, parent: int | None = None) -> dict[int, dict[str, Any]]:
    """Wait for the workers until the deadline; then dump, kill and reap the rest. local rank -> outcome.

    ``parent``: the process that started the agent (the controller, or the SSH session's shell). If it goes
    away (kill -9 of the controller, a dropped connection) nobody will read the results: the workers are
    killed at once instead of running on until the deadline."""
    outcome: dict[int, dict[str, Any]] = {}
    while len(outcome) < len(pids) and time.monotonic() < deadline:
        if parent is not None and os.getppid() != parent:
            for pid in (pid for local_rank, pid in pids.items() if local_rank not in outcome):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            os._exit(ORPHANED_EXIT)
        for local_rank, pid in pids.items():
            if local_rank in outcome:
                continue
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                outcome[local_rank] = {"exit": os.waitstatus_to_exitcode(status), "killed": False}
                if outcome[local_rank]["exit"] != 0:
                    # a worker gave up (its collective timed out): the test is over, so whoever is still
                    # running after a short grace is stuck, not slow
                    deadline = min(deadline, time.monotonic() + STUCK_GRACE_S)
        time.sleep(0.05)
    stuck = {local_rank: pid for local_rank, pid in pids.items() if local_rank not in outcome}
    for pid in stuck.values():
        _dump_stacks(pid)
    if stuck:
        time.sleep(1.0)  # let faulthandler finish writing
    for local_rank, pid in stuck.items():
        os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        outcome[local_rank] = {"exit": os.waitstatus_to_exitcode(status), "killed": True}
    return outcome


def main(argv: list[str]) -> int:
    args = _arguments(argv)
    for pair in args.env:
        name, _, value = pair.partition("=")
        os.environ[name] = value
    params = json.loads(args.params)
    # torch 2.13 renames the tensor collectives; the old names work from 2.4 on, which the nodes may run
    warnings.filterwarnings("ignore", category=FutureWarning, module="torch.distributed")
    module = importlib.import_module(TESTS[args.test])
    import torch  # noqa: F401 - imported once here, inherited by every forked worker

    parent = os.getppid()
    started = time.monotonic()
    deadline = started + args.deadline
    pids: dict[int, int] = {}

    def stop(signum: int, frame: Any) -> None:  # the controller gave up: take the workers down too
        for pid in pids.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    if args.master == "local":  # a single-node world: no port to agree on, the OS picks a free one
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind(("127.0.0.1", 0))
            args.master = f"127.0.0.1:{probe.getsockname()[1]}"
    chosen = _nccl_bootstrap(args.master)
    # what this agent was told and chose, by name: never the whole environment, which may carry a secret
    told = {pair.partition("=")[0] for pair in args.env} | set(chosen)
    nccl_env = {name: os.environ[name] for name in sorted(told) if name in os.environ}
    sys.stdout.flush()
    # SIGTERM waits while the workers are forked: Python runs a handler after the call it arrived in, so one that
    # came during a fork ran before the new worker's pid was kept, and that worker outlived the agent (holding the
    # controller's pipe open, waiting at a rendezvous nobody else would reach)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        for local_rank in range(args.nproc):
            pid = os.fork()
            if pid == 0:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
                _worker(module, args, local_rank, params)
            pids[local_rank] = pid
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})  # one that came meanwhile is handled here
    outcome = supervise(pids, deadline, parent)
    alive = [pid for pid in pids.values() if _alive(pid)]
    emit("agent", node=os.environ.get("SLURMD_NODENAME") or socket.gethostname(), node_rank=args.node_rank,
         workers={str(k): v for k, v in sorted(outcome.items())},
         seconds=round(time.monotonic() - started, 3), left_alive=len(alive), nccl_env=nccl_env,
         nccl_env_chosen=sorted(chosen))
    return 0 if all(v["exit"] == 0 for v in outcome.values()) else 1


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
