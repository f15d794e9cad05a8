"""Slurm's view of the nodes: ``scontrol -o show node`` (one line per node), its default multi-line form, and
``sinfo``'s default table, with their pure parsers.

Read on the controller (or wherever ``scontrol`` reaches slurmctld), not on a cluster host. Slurm 22.05's
scontrol has no JSON output, so the text is parsed: ``Key=value`` pairs separated by spaces, where two values may
hold spaces themselves — ``OS=Linux 6.1.0 #1 SMP ...`` and ``Reason=...``, which the one-line form writes last,
followed by `` [user@timestamp]`` (the multi-line form gives it a line of its own). The keys read here are taken by
name.

States are read as every Slurm release has written them: up to 20.11 the sinfo-style suffix on the base state
(``IDLE*``, ``DOWN*+DRAIN``, ``IDLE~``), from 21.08 flags (``IDLE+DRAIN+NOT_RESPONDING``); both become the same
flags, so a node that does not respond is never read as plain ``idle``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from provision.facts.fact import command
from topology import hostlist

_KEY = re.compile(r"(?:^|\s)(NodeName|State|AvailableFeatures|ActiveFeatures|Partitions)=(\S*)")
_REASON = re.compile(r"\sReason=(?P<reason>.*?)(?:\s\[(?P<user>[^@\]]+)@(?P<at>[^\]]+)\])?\s*$")


class SlurmOutputError(ValueError):
    """scontrol's output is not the node listing (an error message, a truncated line)."""


@dataclass(frozen=True)
class SlurmNode:
    name: str
    state: str  # the base state, lower case: idle, allocated, mixed, down, ...
    flags: frozenset[str]  # drain, not_responding, maint, reserved, ... (lower case)
    reason: str = ""
    reason_user: str = ""
    available_features: tuple[str, ...] = ()
    active_features: tuple[str, ...] = ()
    partitions: tuple[str, ...] = field(default=())

    @property
    def drained(self) -> bool:
        """Drained or draining: Slurm starts no new job on it."""
        return "drain" in self.flags or self.state in ("drained", "draining")

    def as_dict(self) -> dict[str, object]:
        return {"name": self.name, "state": self.state, "flags": sorted(self.flags), "reason": self.reason,
                "reason_user": self.reason_user, "available_features": list(self.available_features),
                "active_features": list(self.active_features), "partitions": list(self.partitions)}


#: sinfo's (and, up to Slurm 20.11, scontrol's) state suffixes, by sinfo(1): the flag each one stands for.
STATE_SUFFIXES = {"*": "not_responding", "~": "powered_down", "#": "powering_up", "%": "powering_down",
                  "!": "power_down", "$": "maintenance", "@": "reboot_requested", "^": "reboot_issued",
                  "-": "planned"}


#: sinfo's compact state names (%t) as scontrol writes the same states.
COMPACT_STATES = {"alloc": "allocated", "mix": "mixed", "drng": "draining", "drain": "drained", "comp": "completing",
                  "resv": "reserved", "maint": "maintenance", "plnd": "planned", "failg": "failing", "futr": "future",
                  "inval": "invalid", "unk": "unknown", "pow_up": "powering_up", "pow_dn": "powering_down"}


def parse_state(text: str) -> tuple[str, frozenset[str]]:
    """``DOWN*+DRAIN`` or ``IDLE+DRAIN+NOT_RESPONDING`` -> ("down", {"drain", "not_responding"})."""
    base, *flags = text.lower().split("+")
    found = set()
    for part in (base, *flags):
        found |= {STATE_SUFFIXES[char] for char in part[len(part.rstrip("*~#!%$@^-")):]}
    found |= {flag.rstrip("*~#!%$@^-") for flag in flags}
    return base.rstrip("*~#!%$@^-"), frozenset(found - {""})


def _features(value: str) -> tuple[str, ...]:
    return () if value in ("", "(null)") else tuple(item for item in value.split(",") if item)


def _records(text: str) -> list[tuple[int, str, str]]:
    """(line number, the node's keys as one line, its reason line or "") per node, from either layout: a
    multi-line record's indented lines join its ``NodeName=`` line, its ``Reason=`` line is kept apart."""
    if text.strip() and not text.endswith("\n"):
        raise SlurmOutputError(f"scontrol's output ends mid-line: cut short ({text.splitlines()[-1][:120]!r})")
    records: list[tuple[int, str, str]] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if line.startswith("NodeName="):
            records.append((number, line, ""))
        elif line[:1].isspace() and records:
            start, head, reason = records[-1]
            if line.strip().startswith("Reason="):
                records[-1] = (start, head, line.strip())
            elif reason and line.startswith("       "):  # a long reason goes on, indented by seven
                records[-1] = (start, head, f"{reason} {line.strip()}")
            else:
                records[-1] = (start, f"{head} {line.strip()}", reason)
        else:
            raise SlurmOutputError(f"line {number}: not a node: {line[:200]!r}")
    return records


def parse_nodes(text: str) -> list[SlurmNode]:
    """Every node of ``scontrol [-o] show node``; a line that is not a node is an error, never skipped."""
    nodes = []
    for number, line, reason_line in _records(text):
        head, reason, user = line, "", ""
        found = _REASON.search(" " + reason_line if reason_line else line)
        if found:
            head = line if reason_line else line[:found.start()]
            reason, user = found["reason"].strip(), found["user"] or ""
        keys = dict(_KEY.findall(head))
        if "State" not in keys:
            raise SlurmOutputError(f"line {number}: node {keys.get('NodeName', '?')} has no State=")
        base, flags = parse_state(keys["State"])
        nodes.append(SlurmNode(keys["NodeName"], base, flags, reason, user,
                               _features(keys.get("AvailableFeatures", "")),
                               _features(keys.get("ActiveFeatures", "")), _features(keys.get("Partitions", ""))))
    return nodes


@dataclass(frozen=True)
class SinfoRow:
    partition: str
    default: bool  # the partition sinfo marks with '*'
    available: str
    time_limit: str
    state: str
    flags: frozenset[str]
    nodes: tuple[str, ...]


def parse_sinfo(text: str) -> list[SinfoRow]:
    """``sinfo``'s default table (PARTITION AVAIL TIMELIMIT NODES STATE NODELIST), node lists expanded; its
    columns found by the header's names. No header, or a row whose node count disagrees with its list, is an
    error: a table that did not say what it holds is not an empty cluster."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines or lines[0].split()[:1] != ["PARTITION"]:
        raise SlurmOutputError(f"not sinfo's default table: {(lines[0] if lines else '')[:200]!r}")
    header = lines[0].split()
    needed = ["PARTITION", "AVAIL", "TIMELIMIT", "NODES", "STATE", "NODELIST"]
    if header != needed:
        raise SlurmOutputError(f"sinfo's header is {' '.join(header)!r}, not {' '.join(needed)!r}")
    rows = []
    for number, line in enumerate(lines[1:], 2):
        cells = line.split()
        if len(cells) == 5 and cells[3] == "0":  # a partition with no node: "debug* up 8:00:00 0 n/a"
            continue
        if len(cells) != 6 or not cells[3].isdigit():
            raise SlurmOutputError(f"line {number}: not a sinfo row: {line[:200]!r}")
        names = tuple(hostlist.expand(cells[5]))
        if len(names) != int(cells[3]):
            raise SlurmOutputError(f"line {number}: {cells[3]} node(s) said, {len(names)} listed: {line[:200]!r}")
        state, flags = parse_state(cells[4])
        state = COMPACT_STATES.get(state, state)
        rows.append(SinfoRow(cells[0].rstrip("*"), cells[0].endswith("*"), cells[1], cells[2], state, flags, names))
    return rows


def parse_listing(text: str) -> list[dict[str, object]]:
    """The fact's JSON-friendly form (what the data-driven fact tests compare)."""
    return [node.as_dict() for node in parse_nodes(text)]


#: The fields of a job the watch reads (``scontrol -o show job``: one line per job, ``Key=value`` separated by
#: spaces; only ``Command=`` and a few paths could hold a space, and none of these follows one).
_JOB_KEY = re.compile(r"(?:^|\s)(JobId|JobName|JobState|Reason|ExitCode|Partition|NodeList|Restarts|SubmitTime|"
                      r"StartTime|EndTime|StdOut|StdErr)=(\S*)")
#: What slurmctld says when it holds no job (a completed one is kept only ``MinJobAge``, 300 s by default).
NO_JOBS = "No jobs in the system"


@dataclass(frozen=True)
class SlurmJob:
    """One job as slurmctld holds it: its state (lower case: ``running``, ``pending``, ``completed``, ``failed``,
    ``preempted``, ``cancelled``, ``timeout``, ``node_fail``, ...), why, and how it ended (exit code and signal)."""

    job_id: str
    name: str
    state: str
    reason: str
    exit_code: int
    signal: int
    partition: str
    nodes: tuple[str, ...]
    restarts: int
    submitted: str
    started: str  # "" until it starts
    ended: str  # "" until it ends
    stdout: str
    stderr: str = ""

    def as_dict(self) -> dict[str, object]:
        return {"job_id": self.job_id, "name": self.name, "state": self.state, "reason": self.reason,
                "exit_code": self.exit_code, "signal": self.signal, "partition": self.partition,
                "nodes": list(self.nodes), "restarts": self.restarts, "submitted": self.submitted,
                "started": self.started, "ended": self.ended, "stdout": self.stdout, "stderr": self.stderr}


def _time(value: str) -> str:
    return "" if value in ("", "Unknown", "None", "N/A") else value


def parse_jobs(text: str) -> list[SlurmJob]:
    """Every job of ``scontrol -o show job``; ``No jobs in the system`` is none; a line that is not a job, or a job
    without its id, state or exit code, is an error (never a job that silently passed)."""
    jobs = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.strip() == NO_JOBS:
            continue
        keys = dict(_JOB_KEY.findall(line))
        missing = [key for key in ("JobId", "JobState", "ExitCode") if key not in keys]
        if missing or not line.startswith("JobId="):  # -o prints each job on one line, its id first
            raise SlurmOutputError(f"line {number}: not a job of scontrol -o show job (no {', '.join(missing)}): "
                                   f"{line[:200]!r}")
        code, _, signal = keys["ExitCode"].partition(":")
        nodes = keys.get("NodeList", "")
        jobs.append(SlurmJob(keys["JobId"], keys.get("JobName", ""), keys["JobState"].lower(),
                             keys.get("Reason", "None"), int(code), int(signal or 0), keys.get("Partition", ""),
                             tuple(hostlist.expand(nodes)) if nodes and nodes != "(null)" else (),
                             int(keys.get("Restarts", "0")), _time(keys.get("SubmitTime", "")),
                             _time(keys.get("StartTime", "")), _time(keys.get("EndTime", "")),
                             keys.get("StdOut", ""), keys.get("StdErr", "")))
    return jobs


def parse_job_listing(text: str) -> list[dict[str, object]]:
    return [job.as_dict() for job in parse_jobs(text)]


SLURM_NODES = command("slurm_nodes", ["scontrol", "-o", "show", "node"], parse_listing)
SLURM_JOBS = command("slurm_jobs", ["scontrol", "-o", "show", "job"], parse_job_listing)
SINFO = command("sinfo", ["sinfo"], parse_sinfo)
