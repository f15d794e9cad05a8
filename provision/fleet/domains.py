"""Each NVLink domain's standing (issue 53, items 4-5): its trays and their states, and what its policy lets run
jobs of it.

A GB200/GB300 domain is one NVLink fabric over its compute trays; a tray that is not admitted takes the domain to
degraded, and the spec's ``on_tray_failure`` says what remains: ``hold``, nothing until the domain is whole again;
``shrink``, the admitted trays as a smaller domain, when at least ``min_trays`` remain. Slurm's topology.conf
(``provision topology slurm --admitted``), the report and the metrics all read it from here, so they say one size.
Pure: the spec and the trays' states in, the standing out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from provision.spec import LoadedSpec
from topology.hostlist import expand

WHOLE, DEGRADED, HELD = "whole", "degraded", "held"


@dataclass(frozen=True)
class DomainStanding:
    name: str
    trays: tuple[str, ...]
    states: dict[str, str]  # tray -> its lifecycle state
    usable: tuple[str, ...]  # the trays jobs may use as one domain: all, the admitted ones, or none
    gpus_per_tray: int
    policy: str
    standing: str  # whole, degraded (shrunk to the usable trays) or held
    note: str

    @property
    def usable_gpus(self) -> int:
        return len(self.usable) * self.gpus_per_tray

    def as_dict(self) -> dict[str, object]:
        return {"name": self.name, "trays": list(self.trays), "states": self.states, "usable": list(self.usable),
                "usable_gpus": self.usable_gpus, "size_gpus": len(self.trays) * self.gpus_per_tray,
                "policy": self.policy, "standing": self.standing, "note": self.note}


def standings(loaded: LoadedSpec, states: Mapping[str, str] | None) -> list[DomainStanding]:
    """Every domain of the spec; ``states``: each tray's lifecycle state (None: as designed, every tray usable)."""
    gpus = {name: profile.gpu.count for name, profile in loaded.spec.hardware.items()}
    profile_of = {node.name: node.hardware for node in loaded.nodes}
    found = []
    for domain in loaded.spec.nvlink_domains:
        trays = tuple(expand(domain.hosts))
        per_tray = gpus[profile_of[trays[0]]]
        seen = {tray: (states.get(tray, "unknown") if states is not None else "designed") for tray in trays}
        if states is None:
            found.append(DomainStanding(domain.name, trays, seen, trays, per_tray, domain.on_tray_failure, WHOLE,
                                        f"{len(trays)} trays, {len(trays) * per_tray} GPUs"))
            continue
        admitted = tuple(tray for tray in trays if seen[tray] == "admitted")
        if len(admitted) == len(trays):
            found.append(DomainStanding(domain.name, trays, seen, trays, per_tray, domain.on_tray_failure, WHOLE,
                                        f"{len(trays)} trays, {len(trays) * per_tray} GPUs"))
            continue
        floor = (domain.min_trays or 1) if domain.on_tray_failure == "shrink" else len(trays)
        if len(admitted) < floor:
            found.append(DomainStanding(domain.name, trays, seen, (), per_tray, domain.on_tray_failure, HELD,
                                        f"{len(admitted)} of {len(trays)} trays admitted, under the {floor} its "
                                        f"policy ({domain.on_tray_failure}) needs: no block"))
        else:
            found.append(DomainStanding(domain.name, trays, seen, admitted, per_tray, domain.on_tray_failure,
                                        DEGRADED, f"degraded: {len(admitted)} of {len(trays)} trays admitted, a "
                                        f"domain of {len(admitted) * per_tray} GPUs"))
    return found


def held_trays(loaded: LoadedSpec, states: Mapping[str, str], passing: list[str]) -> dict[str, str]:
    """Which of the trays that have just passed every stage (``passing``) their domain's policy keeps out, and why:
    each domain's standing (:func:`standings`) with the passing trays counted as admitted; a domain it holds
    admits none of them (``hold``: not whole; ``shrink``: under ``min_trays``)."""
    chosen = set(passing)
    held = {}
    assumed = {**states, **dict.fromkeys(passing, "admitted")}
    for domain, standing in zip(loaded.spec.nvlink_domains, standings(loaded, assumed), strict=True):
        mine = [tray for tray in standing.trays if tray in chosen]
        if not mine or standing.standing != HELD:
            continue
        missing = [tray for tray in standing.trays if standing.states[tray] != "admitted"]
        usable = len(standing.trays) - len(missing)
        out = ", ".join(f"{tray} ({states.get(tray, 'unknown')})" for tray in missing)
        if domain.on_tray_failure == "hold":
            why = (f"domain {domain.name} is not whole ({usable} of {len(standing.trays)} trays; not: {out}) and its "
                   "policy on_tray_failure: hold keeps it out until it is")
        else:
            why = (f"domain {domain.name} would shrink to {usable} trays (not: {out}), under its min_trays "
                   f"{domain.min_trays}")
        held.update(dict.fromkeys(mine, why))
    return held
