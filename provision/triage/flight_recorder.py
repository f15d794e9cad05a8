"""torch's NCCL flight recorder dumps (``TORCH_NCCL_DUMP_ON_TIMEOUT``): which ranks the others waited for.

Each rank's dump (one file per rank, the rank in the name: ``..._dump_<rank>``) is a pickle of builtin types: the
process groups (``pg_config``: name -> description and member ranks) and the last collectives this rank recorded
(``entries``: process group, ``collective_seq_id``, ``profiling_name``, ``state`` scheduled / started / completed).
When a job hangs, every healthy member of a group has an entry, not completed, for the collective it is stuck in; a
member whose last collective in that group is older never reached it: the rank the others waited for. A rank with
no collective left in flight at all (its host stopped issuing any) is named too.

A pickle can run code when loaded: these are read with an unpickler that refuses every global, so only dicts,
lists, tuples, strings and numbers can come out of one; a dump that needs anything else is refused, not run.
"""

from __future__ import annotations

import ast
import io
import pickle
import re
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

#: A dump larger than this is not read (the flight recorder keeps a bounded ring: megabytes, not gigabytes).
MAX_DUMP_BYTES = 256 << 20
_RANK = re.compile(r"dump_?(\d+)$")


class _BuiltinsOnly(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refused {module}.{name}: a flight recorder dump holds builtin types only")


def rank_of(name: str) -> int | None:
    """The rank a dump's file name carries (``_dump_12``, ``nccl_trace_rank_dump12``)."""
    match = _RANK.search(name)
    return int(match.group(1)) if match else None


def load_dump(raw: bytes) -> dict[str, Any]:
    """One dump, or ValueError: not a pickle, a pickle of something else, or one that asks for any global."""
    if len(raw) > MAX_DUMP_BYTES:
        raise ValueError(f"{len(raw)} bytes: larger than a flight recorder dump")
    try:
        loaded = _BuiltinsOnly(io.BytesIO(raw)).load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError, KeyError) as error:
        raise ValueError(f"not a flight recorder dump: {error}") from None
    if not isinstance(loaded, dict) or not isinstance(loaded.get("entries"), list) \
            or not isinstance(loaded.get("pg_config"), dict):
        raise ValueError("a pickle, but not a flight recorder dump (no entries and pg_config)")
    return loaded


@dataclass(frozen=True)
class Missing:
    """A rank that never reached the collective the other members of its group are stuck in."""

    rank: int
    group: str
    description: str
    seq: int
    operation: str
    waiting: tuple[int, ...]


def _members(config: Any) -> list[int]:
    ranks = config.get("ranks") if isinstance(config, dict) else None
    if isinstance(ranks, str):
        ranks = ast.literal_eval(ranks)
    return [int(rank) for rank in ranks] if isinstance(ranks, list | tuple) else []


def missing_ranks(dumps: dict[int, dict[str, Any]]) -> tuple[list[Missing], list[int]]:
    """The ranks the others waited for (the first collective of each group they never reached), and the ranks
    with no collective in flight at all while others have one."""
    last: dict[str, dict[int, int]] = defaultdict(dict)
    waiting: dict[tuple[str, int], set[int]] = defaultdict(set)
    operation: dict[tuple[str, int], str] = {}
    members: dict[str, list[int]] = {}
    descriptions: dict[str, str] = {}
    for rank, dump in dumps.items():
        for name, config in dump["pg_config"].items():
            members[str(name)] = _members(config)
            descriptions[str(name)] = str(config.get("desc", "")) if isinstance(config, dict) else ""
        for entry in dump["entries"]:
            if not isinstance(entry, dict) or entry.get("is_p2p") or not isinstance(entry.get("process_group"),
                                                                                     list | tuple):
                continue
            group, seq = str(entry["process_group"][0]), int(entry.get("collective_seq_id", -1))
            last[group][rank] = max(last[group].get(rank, -1), seq)
            if entry.get("state") != "completed":
                waiting[(group, seq)].add(rank)
                operation[(group, seq)] = str(entry.get("profiling_name", "?"))
    found: dict[tuple[int, str], Missing] = {}
    for (group, seq), stuck in sorted(waiting.items()):
        for rank in sorted(set(members.get(group, [])) & set(dumps)):
            if last[group].get(rank, -1) < seq and (rank, group) not in found:
                found[(rank, group)] = Missing(rank, group, descriptions.get(group, ""), seq,
                                               operation[(group, seq)], tuple(sorted(stuck)))
    in_flight = {rank for (_group, _seq), stuck in waiting.items() for rank in stuck}
    idle = sorted(rank for rank in dumps if rank not in in_flight) if in_flight else []
    return sorted(found.values(), key=lambda item: (item.rank, item.seq)), idle
