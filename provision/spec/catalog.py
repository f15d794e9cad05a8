"""Names the spec accepts: GPU models (from :mod:`provision.catalog`), burn-in stages."""

from provision.catalog import GPU_MODELS, GpuModel

__all__ = ["BURNIN_STAGES", "GPU_MODELS", "GpuModel"]

#: The stages of the burn-in, cheapest first (see the burn-in issue).
BURNIN_STAGES = ("preflight", "node", "pairs", "collectives", "training")
