"""Record the collectives stage's launches on the simulated cluster, one file per fault, for the replay tests.

    .venv/bin/python -m tests.record_launches [NAME ...]

Each scenario brings up four simulated hosts (four GPUs, two ranks a host, NCCL's completion semantics), strikes
its faults in service, runs the collectives stage through the real agents and workers with a recording launcher,
and writes ``tests/data/launches/<name>.json``: the launches in the order the stage made them, and the verdicts it
reached (what the replay must reach again). About a minute a scenario on two cores.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from provision.burnin import collectives
from provision.burnin.launch import launch
from provision.spec import load_spec
from tests.launches import HERE, Recorder, scenario_spec
from tests.simhelpers import provision

HOSTS = "sim[01-04]"
#: Scenarios on fewer hosts: a rail slow on four nodes times every collective out before it can be measured slow
#: (the stage then stops as FailedEverywhere); on two it is measured, and pairing finds it in every pair. A
#: corrupting node among three has a single healthy pair to be confirmed against.
SMALLER = {"rail_slow_everywhere": "sim[01-02]", "collective_corruption_three": "sim[01-03]"}
SCENARIOS: dict[str, list[dict]] = {
    "healthy": [],
    "rank_hang": [{"kind": "rank_hang", "node": "sim02", "params": {"local_rank": 1, "after_ops": 5}}],
    "rank_slow": [{"kind": "rank_slow", "node": "sim03", "params": {"factor": 0.2}}],
    "collective_corruption": [{"kind": "collective_corruption", "node": "sim04", "params": {"local_rank": 1}}],
    # three hosts, the corrupting one first: the group a first split would run alone (it passes alone)
    "collective_corruption_three": [{"kind": "collective_corruption", "node": "sim01", "params": {"local_rank": 1}}],
    "degraded_hca_port": [{"kind": "degraded_hca_port", "node": "sim02", "target": "mlx5_3"}],
    "rail_slow_everywhere": [{"kind": "degraded_hca_port", "node": f"sim0{index}", "target": "mlx5_3"}
                             for index in (1, 2)],
    "worker_error_init": [{"kind": "worker_error", "node": "sim03",
                           "params": {"when": "init", "test": "collectives"}}],
    "worker_error_exit": [{"kind": "worker_error", "node": "sim02",
                           "params": {"when": "exit", "test": "collectives", "local_rank": 1}}],
    "worker_error_silent": [{"kind": "worker_error", "node": "sim04",
                             "params": {"when": "silent", "test": "collectives", "local_rank": 0}}],
}


def record(name: str, faults: list[dict], directory: Path) -> dict:
    hosts = SMALLER.get(name, HOSTS)
    spec = scenario_spec(directory, faults, hosts)
    provision(spec)
    loaded = load_spec(spec)
    state_dir = directory / ".provision" / loaded.spec.cluster.name
    recorder = Recorder(launch)
    outcome: dict = {}
    try:
        verdicts = collectives.run_collectives_stage(loaded, loaded.nodes, state_dir, port=23000,
                                                   evidence_dir=directory / "workers", launcher=recorder)
        outcome["verdicts"] = {verdict.node: {"passed": verdict.passed, "check": verdict.check,
                                              "reason": verdict.reason} for verdict in verdicts}
    except collectives.SYSTEMIC as stopped:
        outcome["systemic"] = f"{type(stopped).__name__}: {stopped}"
    return {"scenario": name, "faults": faults, "hosts": hosts, "launches": recorder.launches, **outcome}


def main(names: list[str]) -> int:
    HERE.mkdir(parents=True, exist_ok=True)
    for name in names or list(SCENARIOS):
        with tempfile.TemporaryDirectory(prefix=f"record-{name}-") as directory:
            recording = record(name, SCENARIOS[name], Path(directory))
        (HERE / f"{name}.json").write_text(json.dumps(recording, separators=(",", ":")) + "\n")
        print(f"{name}: {len(recording['launches'])} launch(es); "
              f"{recording.get('systemic') or {node: v['passed'] for node, v in recording['verdicts'].items()}}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
