"""Starting a test on many nodes at once and reading back what each rank said.

One agent per node (``fabric_tests.agent``) over that node's session, all in parallel; node rank 0 serves the
c10d store. The agent enforces the deadline on its node; the session timeout (deadline plus a margin) is the
backstop if the agent itself wedges, and kills the agent's whole process group. What comes back is parsed from
the protocol lines only.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
import secrets
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from fabric_tests.protocol import parse
from provision.hosts.remote import CommandResult, open_session
from provision.hosts.runtime import node_python
from provision.sinks import slurm
from provision.spec import LoadedSpec
from provision.spec.semantics import ResolvedNode
from topology import hostlist

AGENT_MARGIN_S = 30.0
#: Launches of one test when our connection to a node dropped under its agent (the session opens anew).
LAUNCH_ATTEMPTS = 2


@dataclass
class NodeRun:
    node: str
    node_rank: int
    command: CommandResult | None = None
    records: list[dict[str, Any]] = field(default_factory=list)
    connect_error: str = ""

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [record for record in self.records if record.get("type") == kind]

    @property
    def agent(self) -> dict[str, Any] | None:
        found = self.of("agent")
        return found[-1] if found else None

    @property
    def connection_lost(self) -> bool:
        """Our connection to the node dropped under its agent: nothing it said could be read, and that is ours."""
        return self.command is not None and self.command.lost

    @property
    def unfinished(self) -> bool:
        """The node never ran the test, or its agent never reported: nothing it said can be judged."""
        return bool(self.connect_error) or self.agent is None

    @property
    def output(self) -> str:
        """Everything the node's agent and workers printed (NCCL's INFO lines among it); empty: nothing came back."""
        return (self.command.stdout + "\n" + self.command.stderr) if self.command else ""

    def stderr_tail(self, lines: int = 30) -> list[str]:
        return (self.command.stderr.splitlines()[-lines:]) if self.command else []


@dataclass
class LaunchResult:
    test: str
    nodes: list[NodeRun]
    nproc: int

    def ranks(self) -> dict[int, str]:
        """Global rank -> host."""
        return {run.node_rank * self.nproc + local: run.node for run in self.nodes for local in range(self.nproc)}


def run_seed(run_id: str) -> int:
    """The seed a run draws its pairings, ports and data from: fixed by its id, different from run to run."""
    return int(hashlib.sha256(run_id.encode()).hexdigest()[:8], 16)


def free_port(seed: int | None = None) -> int:
    """A port for the multi-node c10d store: below Linux's ephemeral range (32768 up), where the workers'
    own connections take their ports, and above the usual services."""
    return random.Random(seed).randrange(20000, 32000)


def nccl_environment(loaded: LoadedSpec, nodes: list[ResolvedNode]) -> dict[str, str]:
    """What NCCL and CUDA are told on every node; the spec's ``burnin.nccl_env`` wins over each.

    NCCL says which transport it chose at INFO level (the collectives check it); ``NCCL_IB_HCA`` names exactly the
    rail HCAs of the profile (``=`` is NCCL's exact match: ``mlx5_1`` must not also select ``mlx5_10``), so a
    front-end or storage HCA never carries the collectives. ``NCCL_SOCKET_IFNAME`` is chosen on each node by the
    agent: the interface toward the rendezvous address."""
    rails = loaded.spec.hardware[nodes[0].hardware].rails if nodes else {}
    # CUDA numbers GPUs fastest first unless told otherwise: local rank N must be the GPU nvidia-smi calls N
    chosen = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    if rails:
        chosen["NCCL_IB_HCA"] = "=" + ",".join(hca for hca, _ in sorted(rails.items(), key=lambda item: item[1]))
    return {**chosen, **loaded.spec.burnin.nccl_env}


class Launcher(Protocol):
    """What starts a test's agents on nodes and brings back what they said: :func:`launch` on the cluster; a
    replay of recorded launches in the tests of the stages' judgements (``tests/data/launches``)."""

    def __call__(self, loaded: LoadedSpec, state_dir: Path, nodes: list[ResolvedNode], *, test: str, nproc: int,
                 params: dict[str, Any], deadline_s: float, port: int | None = None,
                 separate: bool = False) -> LaunchResult: ...


def launch(loaded: LoadedSpec, state_dir: Path, nodes: list[ResolvedNode], *, test: str, nproc: int,
           params: dict[str, Any], deadline_s: float, port: int | None = None,
           separate: bool = False) -> LaunchResult:
    """Run ``test`` on ``nodes``. ``separate``: each node is its own world (single-node tests), its store
    served by its agent on a port the OS picks."""
    burnin = loaded.spec.burnin
    base_port = port or free_port()
    env = [f"--env={name}={value}" for name, value in sorted(nccl_environment(loaded, nodes).items())]
    if burnin.launcher == "slurm":
        return launch_srun(loaded, nodes, test=test, nproc=nproc, params=params, deadline_s=deadline_s,
                           master="local" if separate else f"{nodes[0].address}:{base_port}", env=env,
                           separate=separate)

    def one(index_node: tuple[int, ResolvedNode]) -> NodeRun:
        index, node = index_node
        run = NodeRun(node.name, 0 if separate else index)
        if separate:
            where, nnodes = "local", 1
        else:
            where, nnodes = f"{nodes[0].address}:{base_port}", len(nodes)
        argv = [node_python(loaded.spec), "-m", "fabric_tests.agent", "--test", test, "--nproc", str(nproc),
                "--nnodes", str(nnodes), "--node-rank", str(run.node_rank), "--master", where,
                "--deadline", f"{deadline_s:g}", *env, "--params", json.dumps(params, separators=(",", ":"))]
        try:
            session = open_session(loaded, node, state_dir)
        except Exception as error:
            run.connect_error = f"{type(error).__name__}: {error}"
            return run
        try:
            run.command = session.run(argv, deadline_s + AGENT_MARGIN_S)
            run.records = parse(run.command.stdout)
        finally:
            session.close()
        return run

    for attempt in range(1, LAUNCH_ATTEMPTS + 1):
        with ThreadPoolExecutor(max_workers=max(1, len(nodes))) as pool:
            runs = list(pool.map(one, enumerate(nodes)))
        # a connection that dropped under an agent broke the whole world: ours, so the launch runs again
        if not any(run.connection_lost for run in runs) or attempt == LAUNCH_ATTEMPTS:
            break
    return LaunchResult(test, runs, nproc)


def launch_srun(loaded: LoadedSpec, nodes: list[ResolvedNode], *, test: str, nproc: int, params: dict[str, Any],
                deadline_s: float, master: str, env: list[str], separate: bool) -> LaunchResult:
    """The same agents started by one ``srun`` (one task per node, inside the burn-in's reservation): slurmd fans
    out instead of one session per node held here. srun's output is labelled by task and put back together
    (``srun_lines``); every record the agent and its workers write names its node (``PROVISION_AGENT_NODE``).
    Slurm's time limit and the agent's own deadline bound it; ``scancel`` takes the job down if srun itself
    outlives them."""
    names = [node.name for node in nodes]
    ranks = {name: 0 if separate else index for index, name in enumerate(names)}
    agent = [node_python(loaded.spec), "-m", "fabric_tests.agent", "--test", test, "--nproc", str(nproc),
             "--nnodes", "1" if separate else str(len(nodes)), "--node-ranks", json.dumps(ranks), "--master", master,
             "--deadline", f"{deadline_s:g}", *env, "--params", json.dumps(params, separators=(",", ":"))]
    job = f"provision-{test}-{secrets.token_hex(3)}"
    reservation = slurm.active_reservation()
    argv = ["srun", f"--job-name={job}", f"--nodelist={hostlist.compress(names)}", f"--nodes={len(names)}",
            f"--ntasks={len(names)}", "--ntasks-per-node=1", f"--time={math.ceil((deadline_s + AGENT_MARGIN_S) / 60)}",
            "--kill-on-bad-exit=0", "--label", "--quiet",
            *([f"--reservation={reservation}"] if reservation else []), "--", *agent]
    client = slurm.client_for(loaded)
    started = time.monotonic()
    process = subprocess.Popen(argv, env=client.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    timed_out = False
    try:
        stdout, stderr = process.communicate(timeout=deadline_s + AGENT_MARGIN_S + 30)
    except subprocess.TimeoutExpired:
        timed_out = True
        subprocess.run(["scancel", f"--name={job}"], env=client.env, capture_output=True, timeout=30)
        process.kill()
        stdout, stderr = process.communicate()
    took = time.monotonic() - started
    out_by_task, err_by_task = srun_lines(stdout), srun_lines(stderr)
    node_of_task: dict[str, str] = {}
    by_node: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    for task, text in out_by_task.items():
        for record in parse(text):  # every record the agent and its workers write names its node
            if record.get("node") in by_node:
                by_node[record["node"]].append(record)
                node_of_task[task] = record["node"]
    task_of_node = {node: task for task, node in node_of_task.items()}
    runs = []
    for name in names:
        run = NodeRun(name, ranks[name], records=by_node[name])
        label = task_of_node.get(name)
        out = out_by_task.get(label, "") if label is not None else ""
        err = err_by_task.get(label, "") if label is not None else "".join(err_by_task.values())
        run.command = CommandResult(tuple(argv), process.returncode, out, err, took, timed_out=timed_out)
        if not by_node[name] and not timed_out and process.returncode != 0:
            run.connect_error = f"srun: {stderr.strip().splitlines()[-1] if stderr.strip() else process.returncode}"
        runs.append(run)
    return LaunchResult(test, runs, nproc)


SRUN_CHUNK = 1024  # srun forwards a task's output in pieces of at most this many bytes, each labelled
_LABEL = re.compile(r"^ *(\d+): ")


def srun_lines(text: str) -> dict[str, str]:
    """``srun --label`` output back to each task's own text, whole lines again.

    Unlabelled, srun interleaves the tasks' output in pieces, so two nodes' long lines can cut into each other
    (seen: one of two 1.4 KiB training records per node lost). Labelled, every piece says its task, but a line
    longer than 1024 bytes arrives as several labelled pieces: a piece of exactly 1024 bytes continues in the
    task's next piece (for a line of exactly 1024 bytes, that next piece is empty)."""
    tasks: dict[str, list[str]] = {}
    pending: dict[str, str] = {}
    for line in text.splitlines():
        found = _LABEL.match(line)
        if not found:
            continue  # srun's own messages
        task, piece = found[1], line[found.end():]
        joined = pending.pop(task, "") + piece
        if len(piece.encode()) == SRUN_CHUNK:
            pending[task] = joined
        else:
            tasks.setdefault(task, []).append(joined)
    for task, rest in pending.items():
        tasks.setdefault(task, []).append(rest)
    return {task: "\n".join(lines) + "\n" for task, lines in tasks.items()}
