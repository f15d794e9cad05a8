"""What ``provision validate`` says about a spec that loads: its size, its fabric, its effective thresholds."""

from __future__ import annotations

from typing import Any

from provision.spec.loader import LoadedSpec
from provision.spec.thresholds import effective_thresholds
from topology import hostlist


def summarize(loaded: LoadedSpec) -> dict[str, Any]:
    """Cluster, node and GPU counts, the fabric the parameters build, and every threshold with its reason."""
    spec = loaded.spec
    gpus = sum(spec.hardware[node.hardware].gpu.count for node in loaded.nodes)
    fabric = loaded.fabric
    thresholds = {
        name: {key: {"value": value.value, "reason": value.reason}
               for key, value in effective_thresholds(profile, spec.fabric, spec.burnin.thresholds).items()}
        for name, profile in spec.hardware.items()
    }
    return {
        "cluster": spec.cluster.name,
        "nodes": len(loaded.nodes),
        "hosts": hostlist.compress(loaded.node_names),
        "gpus": gpus,
        "sha256": loaded.sha256,
        "fabric": None if fabric is None else {
            "tiers": fabric.tiers, "scalable_units": fabric.scalable_units, "leaves": fabric.leaves,
            "spines": fabric.spines, "cores": fabric.cores, "cables": fabric.cables,
            "spine_grouping": fabric.spine_grouping,
        },
        "thresholds": thresholds,
        "nvlink_domains": [{"name": domain.name, "trays": len(hostlist.expand(domain.hosts)), "size": domain.size,
                            "hosts": domain.hosts, "on_tray_failure": domain.on_tray_failure}
                           for domain in spec.nvlink_domains],
    }
