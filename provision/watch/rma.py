"""The evidence bundle a node goes to RMA with (issue 56, item 5): one archive a vendor's support can read
without our tool, holding why the node is being returned.

- ``history.json``: every move of the node (state, stage, reason, evidence, who, when) from delivery to now;
- ``attempts.json``: every rung of the repair ladder tried, per episode, with its re-validation's outcome;
- ``checks.json``: the node's result cards of every burn-in and re-validation run that judged it (each check with
  its outcome, message and evidence);
- ``dcgm/<run>.json``: DCGM's own diagnostic report of the node, from each run that ran it;
- ``soak.json``: the node's telemetry series of its latest soak (GPU temperature, clocks, power, ECC, port
  counters);
- ``bmc.json``: the BMC's log entries where it serves them, or why they are not there;
- ``README.txt``: what the files are, the node, the cluster, and why it is returned.

Secrets never enter it: the run records it copies from are written without them (:mod:`provision.run.record`),
and nothing here reads the spec's credentials.
"""

from __future__ import annotations

import io
import json
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provision.state.store import StateStore

#: What the bundle's README says each file is.
CONTENTS = {
    "history.json": "every move of the node in the lifecycle, with its reason and evidence",
    "attempts.json": "the repair ladder's rungs tried, per episode, and each re-validation's outcome",
    "checks.json": "the node's result cards from every run that judged it (burn-in stages, re-validations)",
    "dcgm/": "DCGM's diagnostic report of the node, per run",
    "soak.json": "the node's telemetry series from its latest soak",
    "bmc.json": "the BMC's log entries, or why they are not included",
}


@dataclass(frozen=True)
class Bundle:
    path: Path
    files: list[str]


def write_bundle(store: StateStore, node: str, directory: Path, *, cluster: str, why: str,
                 bmc: list[dict[str, Any]] | str) -> Bundle:
    """``<directory>/rma-<node>-<time>.tar.gz``; ``bmc``: the BMC's entries, or why there are none."""
    files: dict[str, Any] = {"history.json": store.history(node)}
    episodes = sorted({row["id"] for row in store.history(node)})
    files["attempts.json"] = {str(episode): attempts for episode in episodes
                              if (attempts := store.attempts(node, episode))}
    cards, dcgm = [], {}
    run_ids = {row["run_id"] for row in store.history(node) if row.get("run_id")}
    for run in store.runs(limit=100_000):
        if run["id"] not in run_ids:
            continue
        run_dir = Path(run["run_dir"])
        for stage_file in sorted(run_dir.glob("burnin-*.json")):
            for card in _load(stage_file) or []:
                if isinstance(card, dict) and card.get("node") == node:
                    cards.append({"run": run["id"], "command": run["command"], **card})
        report = _load(run_dir / "dcgm" / f"{node}.json")
        if report is not None:
            dcgm[f"dcgm/{run['id']}.json"] = report
    files["checks.json"] = cards
    files.update(dcgm)
    campaigns = store.soak_campaigns()
    files["soak.json"] = ({"campaign": campaigns[-1], "series": store.soak_series(campaigns[-1], node)}
                          if campaigns and node in store.soak_nodes(campaigns[-1]) else
                          {"campaign": None, "why": "the node was never soaked"})
    files["bmc.json"] = {"entries": bmc} if isinstance(bmc, list) else {"entries": [], "why": bmc}
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    readme = "\n".join([f"RMA evidence for node {node} of cluster {cluster}, written {stamp}.", "",
                        f"Why it is returned: {why}", "",
                        *[f"{name:<15} {text}" for name, text in CONTENTS.items()], ""])
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"rma-{node}-{stamp}.tar.gz"
    with tarfile.open(path, "w:gz") as archive:
        _add(archive, f"rma-{node}/README.txt", readme.encode())
        for name, content in files.items():
            _add(archive, f"rma-{node}/{name}", (json.dumps(content, indent=2, sort_keys=True) + "\n").encode())
    return Bundle(path, ["README.txt", *files])


def _add(archive: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = int(time.time())
    info.mode = 0o644
    archive.addfile(info, io.BytesIO(data))


def _load(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
