"""From a failed job's signatures to the node to drain before the requeue, or to why none can be named.

Strong: the node the job lost (Slurm's node failure), a GPU hardware Xid or an uncorrectable ECC error in a node's
own log. Likely: torchrun's first observed failure, a peer that refused connections, a peer many hosts' InfiniBand
completions failed against, the ranks the watchdog shows behind the others. A completion error between two hosts
named by one of them only is the link's, not a node's: the fabric (or the cloud's placement) is named instead.
Nothing recognised is "inconclusive", never "no culprit".
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provision.checks.preflight import HARDWARE_XIDS
from provision.triage.signals import Signal

STRONG, LIKELY = "strong", "likely"


@dataclass
class Culprit:
    who: str  # a host, or "rank N" where no host is known for the rank
    strength: str
    why: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"who": self.who, "strength": self.strength, "why": self.why}


@dataclass
class Triage:
    culprits: list[Culprit]
    links: list[str]  # failed links between two hosts, no node to blame
    unattributed: list[str]  # failures whose host the logs do not name (merged output with no host prefix)
    signals: int
    files: int
    lines: int
    unreadable: list[str]
    #: why no single node is to blame although the job failed (every rank stopped at one collective, none behind)
    nobody: list[str] = field(default_factory=list)

    @property
    def conclusive(self) -> bool:
        return bool(self.culprits or self.links or self.nobody)

    def as_dict(self) -> dict[str, Any]:
        return {"conclusive": self.conclusive, "culprits": [culprit.as_dict() for culprit in self.culprits],
                "links": self.links, "nobody": self.nobody, "unattributed": self.unattributed,
                "signals": self.signals, "files": self.files, "lines": self.lines,
                "unreadable": self.unreadable}


def judge(signals: list[Signal], addresses: dict[str, str], *, files: int = 0, lines: int = 0,
          unreadable: list[str] | None = None) -> Triage:
    """``addresses``: address -> host, to name the peers NCCL names by address."""
    blamed: dict[str, Culprit] = {}

    def blame(who: str, strength: str, why: str) -> None:
        culprit = blamed.setdefault(who, Culprit(who, strength))
        if strength == STRONG:
            culprit.strength = STRONG
        culprit.why.append(why)

    links: list[str] = []
    unattributed: list[str] = []
    for signal in signals:
        if signal.kind in ("cuda_error", "xid") and not signal.host:
            unattributed.append(f"{signal.text} ({signal.source})")
        if signal.kind == "node_failure" and signal.host:
            blame(signal.host, STRONG, f"Slurm lost the node ({signal.source}: {signal.text})")
        elif signal.kind == "xid" and signal.host and (signal.code in HARDWARE_XIDS or signal.code == 79):
            blame(signal.host, STRONG, f"{signal.text} ({signal.source})")
        elif signal.kind == "cuda_error" and signal.host:
            hardware = "ECC" in signal.text or "uncorrectable" in signal.text.lower()
            blame(signal.host, STRONG if hardware else LIKELY, f"CUDA error: {signal.text} ({signal.source})")
        elif signal.kind == "root_cause" and signal.host:
            blame(signal.host, LIKELY, f"torchrun's first observed failure: {signal.text} ({signal.source})")
        elif signal.kind in ("fr_missing", "fr_idle") and signal.rank is not None:
            blame(f"rank {signal.rank}", LIKELY, f"{signal.text} ({signal.source})")
        elif signal.kind == "peer_refused" and signal.peer:
            peer = addresses.get(signal.peer, signal.peer)
            blame(peer, LIKELY, f"refused {signal.reporter or 'a peer'}'s NCCL connection ({signal.source})")
    _ib_errors([signal for signal in signals if signal.kind == "ib_completion_error"], addresses, blame, links)
    timeouts = [signal for signal in signals if signal.kind == "watchdog_timeout"]
    _watchdog(timeouts, blame)
    nobody = [] if blamed or links or unattributed else _all_at_one_call(timeouts)
    order = sorted(blamed.values(), key=lambda culprit: (culprit.strength != STRONG, -len(culprit.why), culprit.who))
    return Triage(order, links, unattributed, len(signals), files, lines, unreadable or [], nobody)


def _last_collectives(signals: list[Signal]) -> dict[int, int]:
    """Each rank's newest collective its watchdog lines name."""
    last: dict[int, int] = {}
    for signal in signals:
        if signal.rank is not None and signal.seq is not None:
            last[signal.rank] = max(signal.seq, last.get(signal.rank, -1))
    return last


def _all_at_one_call(signals: list[Signal]) -> list[str]:
    """Every rank's watchdog at the same collective, none behind, and nothing else pointing anywhere: no late rank
    to blame; what stopped them all at once is the network or the job itself."""
    last = _last_collectives(signals)
    if len(last) < 2 or len(set(last.values())) != 1:
        return []
    seq = next(iter(last.values()))
    return [f"all {len(last)} ranks the logs show timed out at the same collective ({seq}) with none behind: the "
            "network or the job itself, not one node"]


def _ib_errors(signals: list[Signal], addresses: dict[str, str], blame: Any, links: list[str]) -> None:
    """A peer many hosts' completions failed against is suspect; a pair named by one side only is a link."""
    reporters: dict[str, set[str]] = defaultdict(set)
    for signal in signals:
        reporters[addresses.get(signal.peer or "", signal.peer or "?")].add(signal.reporter or "?")
    for peer, seen_by in sorted(reporters.items()):
        if len(seen_by) >= 2:
            blame(peer, LIKELY, f"InfiniBand completions failed against it from {len(seen_by)} hosts "
                                f"({', '.join(sorted(seen_by))})")
        else:
            codes = sorted({signal.code for signal in signals if signal.code is not None
                            and addresses.get(signal.peer or "", signal.peer) == peer})
            links.append(f"the InfiniBand path between {next(iter(seen_by))} and {peer} (completion error "
                         f"{', '.join(map(str, codes))}: retries exhausted on the link; neither host is to blame "
                         "on this alone: check the cable, the switch ports, or that both hosts are on one fabric)")


def _watchdog(signals: list[Signal], blame: Any) -> None:
    """Every rank times out at the collective it waits in; the ranks whose last collective is the oldest are the
    ones the others waited for."""
    last = _last_collectives(signals)
    if len(set(last.values())) < 2:
        return
    oldest = min(last.values())
    newest = max(last.values())
    for rank, seq in sorted(last.items()):
        if seq == oldest:
            blame(f"rank {rank}", LIKELY, f"the NCCL watchdog shows it at collective {seq} while others reached "
                                          f"{newest}: the ranks waited for it")


#: Files larger than this are read from their end: a job's failure is at the end of its output.
TAIL_BYTES = 8 << 20


def triage_directory(directory: Path, addresses: dict[str, str]) -> Triage:
    """Every file under ``directory`` (bounded: its last 8 MiB), its signatures and the verdict. A file that is not
    text is listed as unreadable, never read as "nothing failed there"."""
    from provision.triage import flight_recorder
    from provision.triage.signals import attributed, host_of_file, read_log

    known = set(addresses.values())
    paths = sorted(path for path in directory.rglob("*") if path.is_file())
    texts: list[tuple[str, str]] = []
    unreadable: list[str] = []
    dumps: dict[int, dict[str, Any]] = {}
    for path in paths:
        name = str(path.relative_to(directory))
        with path.open("rb") as handle:
            head = handle.read(2)
            if head[:1] == b"\x80" and (rank := flight_recorder.rank_of(path.name)) is not None:
                handle.seek(0)  # a flight recorder dump: read whole, builtins only
                try:
                    dumps[rank] = flight_recorder.load_dump(handle.read(flight_recorder.MAX_DUMP_BYTES + 1))
                except ValueError as error:
                    unreadable.append(f"{name}: {error}")
                continue
            handle.seek(max(0, path.stat().st_size - TAIL_BYTES))
            raw = handle.read()
        if b"\0" in raw[:4096]:
            unreadable.append(f"{name}: binary")
            continue
        texts.append((name, raw.decode("utf-8", errors="replace")))
    read = {}
    lines = 0
    for name, text in texts:  # each file read once; hosts named anywhere help attribute the files named after them
        found, count = read_log(text, name)
        known.update(signal.host for signal in found if signal.host)
        read[name] = found
        lines += count
    signals: list[Signal] = [signal for name, found in read.items()
                             for signal in attributed(found, host_of_file(name, known))]
    if dumps:
        missing, idle = flight_recorder.missing_ranks(dumps)
        signals += [Signal("fr_missing", None, f"flight recorder, group {item.group}", f"never reached "
                           f"{item.operation} #{item.seq} of {item.description or 'group ' + item.group} that ranks "
                           f"{', '.join(map(str, item.waiting))} wait in", rank=item.rank) for item in missing]
        signals += [Signal("fr_idle", None, "flight recorder", "no collective in flight while the others wait in "
                           "theirs (its host stopped issuing work)", rank=rank) for rank in idle]
    return judge(signals, addresses, files=len(texts) + len(dumps), lines=lines, unreadable=unreadable)
