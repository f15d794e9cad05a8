"""How node-side test processes talk to the controller: one JSON object per stdout line, with a marker.

Lines are short (well under the 4 KiB a pipe writes atomically), so the workers of one node can share the
agent's stdout without interleaving, and whatever else a library prints is ignored.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

MARKER = "@@provision "
#: Set by an agent started by srun: every record then names its node, because srun merges the nodes' lines into
#: one stream (and its ``--label`` would cut lines longer than 1 KiB into labelled pieces).
NODE_VARIABLE = "PROVISION_AGENT_NODE"


def emit(kind: str, **fields: Any) -> None:
    node = os.environ.get(NODE_VARIABLE)
    record = {"type": kind, "t": round(time.time(), 4), **({"node": node} if node else {}), **fields}
    sys.stdout.write(MARKER + json.dumps(record, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def parse(text: str) -> list[dict[str, Any]]:
    """Every protocol record in ``text``; a torn or foreign line is skipped (the agent's summary says if a
    worker died mid-line)."""
    records = []
    for line in text.splitlines():
        index = line.find(MARKER)
        if index < 0:
            continue
        try:
            records.append(json.loads(line[index + len(MARKER):]))
        except ValueError:
            continue
    return records
