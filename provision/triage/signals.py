"""The failure signatures of a dead multi-node job, read from its logs as the tools print them (pure functions).

Each line a launcher, torch, NCCL, CUDA or the kernel prints when a job dies says something about *where*; most of
them are printed by the victims, not the culprit. So each signature records who printed it and whom it points at:

- Slurm: ``srun: error: Node failure on <host>`` names the node (the ``slurmstepd ... CANCELLED ... ON <host>``
  line that follows names where the step's own daemon ran, not the failed node: it is no signature);
- torchrun/elastic: the ``ChildFailedError`` table, its "Root Cause (first observed failure)" with host and rank;
- torch's NCCL watchdog: ``[Rank R] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=N, OpType=OP,
  ...)``: every rank times out, and the ranks whose last collective is the *oldest* are the ones behind;
- NCCL: ``<host>:<pid>:<tid> [dev] ... NCCL WARN Connect to <ip><port> failed : Connection refused`` (the peer
  refused: the peer is suspect) and ``NCCL WARN NET/IB : Got completion from peer <ip><port> with error <n>`` (the
  link between the two failed: the fabric, unless one peer is named by many);
- CUDA: ``CUDA error: <what>`` and ``cudaErrorECCUncorrectable`` lines (on the host whose log it is, where known);
- the kernel: ``NVRM: Xid`` lines (``provision.facts.kernel_log``).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from provision.facts import kernel_log


@dataclass(frozen=True)
class Signal:
    """One failure signature: its kind, the host it points at (``None``: not known from the line), who printed it
    and where, and the line itself."""

    kind: str
    host: str | None
    source: str  # file:line
    text: str
    rank: int | None = None
    peer: str | None = None  # the other end (an address), for the signatures between two hosts
    reporter: str | None = None  # the host that printed it
    seq: int | None = None  # a watchdog's collective sequence number
    code: int | None = None  # an Xid, an IB completion error


_NODE_FAILURE = re.compile(r"srun: error: Node failure on (\S+)")
_NCCL_PREFIX = re.compile(r"^(?:\[\d+\]:\s*)?([A-Za-z0-9][\w.-]*):(\d+):(\d+) \[(\d+)\] ")
_REFUSED = re.compile(r"NCCL WARN .*?Connect to ([0-9a-fA-F.:]+)<\d+> failed : Connection refused")
_IB_ERROR = re.compile(r"NCCL WARN NET/IB : Got completion from peer ([0-9a-fA-F.:]+)<\d+> with error (\d+)")
_WATCHDOG = re.compile(r"\[Rank (\d+)\] Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=(\d+), "
                       r"OpType=(\w+)")
_CUDA = re.compile(r"CUDA error: ([^\n]+?)\s*$|(cudaErrorECCUncorrectable|uncorrectable ECC error encountered)")
_TABLE_FIELD = re.compile(r"^\s*(time|host|rank|exitcode|error_file|traceback)\s*:\s*(.*)$")
_HOSTNAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.-]*$")


def _failure_table(lines: list[str], name: str) -> list[Signal]:
    """torchrun's ChildFailedError table: the root cause entry (host and rank), and the other failures."""
    found = []
    section = ""
    entry: dict[str, str] = {}
    start = 0

    def close() -> None:
        if entry.get("host") and section:
            rank = re.match(r"(\d+)", entry.get("rank", ""))
            found.append(Signal("root_cause" if section == "root" else "child_failed", entry["host"],
                                f"{name}:{start + 1}", f"rank {entry.get('rank', '?')} exitcode "
                                f"{entry.get('exitcode', '?')}: {entry.get('traceback', '')}".strip(),
                                rank=int(rank.group(1)) if rank else None))

    for number, line in enumerate(lines):
        stripped = line.strip()
        if stripped.startswith("Failures:"):
            close()
            section, entry = "failures", {}
        elif stripped.startswith("Root Cause"):
            close()
            section, entry = "root", {}
        elif re.match(r"^\[\d+\]:$", stripped) and section:
            close()
            entry, start = {}, number
        elif section and (field := _TABLE_FIELD.match(line)):
            entry[field.group(1)] = field.group(2).strip()
        elif stripped.startswith("====") and section == "root":
            close()
            section, entry = "", {}
    close()
    return found


def read_log(text: str, name: str, host: str | None = None) -> tuple[list[Signal], int]:
    """Every signature in one log file, and how many lines were read. ``host``: whose log it is, where the file
    says (a per-node output file, a node's dmesg); lines that name their own host say so themselves."""
    lines = text.replace("\r\n", "\n").split("\n")
    signals: list[Signal] = []
    for number, line in enumerate(lines):
        where = f"{name}:{number + 1}"
        prefix = _NCCL_PREFIX.match(line)
        reporter = prefix.group(1) if prefix else None
        if match := _NODE_FAILURE.search(line):
            signals.append(Signal("node_failure", match.group(1), where, line.strip()))
        elif match := _REFUSED.search(line):
            signals.append(Signal("peer_refused", None, where, line.strip(), peer=match.group(1), reporter=reporter))
        elif match := _IB_ERROR.search(line):
            signals.append(Signal("ib_completion_error", None, where, line.strip(), peer=match.group(1),
                                  reporter=reporter, code=int(match.group(2))))
        elif match := _WATCHDOG.search(line):
            signals.append(Signal("watchdog_timeout", None, where, line.strip(), rank=int(match.group(1)),
                                  seq=int(match.group(2))))
        elif match := _CUDA.search(line):
            signals.append(Signal("cuda_error", reporter, where, (match.group(1) or match.group(2)).strip()))
    for xid in kernel_log.find_xids(kernel_log.parse_kernel_log(text)):
        signals.append(Signal("xid", None, name, f"Xid {xid.code} on GPU {xid.pci}: {xid.detail}", code=xid.code))
    signals += _failure_table(lines, name)
    return attributed(signals, host), len([line for line in lines if line.strip()])


#: The signatures whose line does not name its host: a file's host is theirs (``host`` for these, ``reporter``
#: for those between two hosts). The others name the host they point at in the line itself.
_OWN_HOST = frozenset({"watchdog_timeout", "cuda_error", "xid"})
_OWN_REPORTER = frozenset({"peer_refused", "ib_completion_error"})


def attributed(signals: list[Signal], host: str | None) -> list[Signal]:
    """The signatures of a file whose host is known, given that host where their lines did not name one."""
    if host is None:
        return signals
    return [dataclasses.replace(signal, host=host) if signal.kind in _OWN_HOST and signal.host is None
            else dataclasses.replace(signal, reporter=host) if signal.kind in _OWN_REPORTER and signal.reporter is None
            else signal for signal in signals]


def host_of_file(name: str, known: set[str]) -> str | None:
    """The host a file belongs to, when its name carries one of the known hosts (``dmesg_<host>.txt``,
    ``<host>.out``): the longest known host name the file name contains."""
    matches = [host for host in known if host and host in name]
    return max(matches, key=len) if matches else None


def is_hostname(value: str) -> bool:
    return bool(_HOSTNAME.match(value))
