"""The check file ``provision node-check`` reads on a node: the controller's own preflight expectations for that
node, written once per node for the node_check role to copy (``/etc/provision/node-check.json``).

Written here, on the controller, from the spec; read by :mod:`provision.node_check.on_node` on the node, where
there is no spec: the file carries everything the checks compare against.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from provision.checks.spec_expectations import expectations
from provision.node_check.on_node import FORMAT
from provision.spec import LoadedSpec


def check_file(loaded: LoadedSpec, node_name: str) -> dict[str, Any]:
    """The check file of one node: what it must be, no timestamp (an unchanged spec rewrites nothing)."""
    node = next(node for node in loaded.nodes if node.name == node_name)
    expect = expectations(loaded, node)
    fields = asdict(expect)
    fields["gpu_pcie"], fields["hca_pcie"] = list(expect.gpu_pcie), list(expect.hca_pcie)
    fields["rail_hcas"] = list(expect.rail_hcas)
    fields["rails"] = [list(pair) for pair in expect.rails]
    fields["uuid_blocklist"] = sorted(expect.uuid_blocklist)
    fields["allowlist"] = [pattern.pattern for pattern in expect.allowlist]
    fields["imex_peers"] = list(expect.imex_peers)
    return {"format": FORMAT, "node": node_name, "cluster": loaded.spec.cluster.name, "spec_sha256": loaded.sha256,
            "expectations": fields}


def write_check_files(loaded: LoadedSpec, directory: Path) -> Path:
    """One check file per node under ``directory`` (``<node>.json``): what the node_check role copies."""
    directory.mkdir(parents=True, exist_ok=True)
    for node in loaded.nodes:
        (directory / f"{node.name}.json").write_text(json.dumps(check_file(loaded, node.name), indent=1,
                                                                sort_keys=True) + "\n")
    return directory
