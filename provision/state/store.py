"""The state store: one SQLite file (WAL) that knows every node's lifecycle.

It holds the current state of each node, every transition with its time, run and
evidence, every run, and per-run per-host results. It is the only place a phase
reads "what happened before" from, which is what makes runs resumable.

The schema is versioned with ``PRAGMA user_version`` and upgraded by an ordered
list of migrations, each applied in its own transaction; a store written by a
newer release is refused rather than guessed at. Files are created 0600: the
store holds host names, addresses and evidence, not for other local users.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

from provision.errors import Refusal
from provision.state.lifecycle import OPERATOR_COMMANDS, WATCH, NodeState, TransitionError, check_move
from provision.state.migrations import MIGRATIONS, statements

DB_NAME = "state.db"

class StoreError(Refusal, RuntimeError):
    """The state store cannot be used as it is (newer schema, unreadable file)."""


@dataclass(frozen=True)
class NodeRecord:
    name: str
    group: str
    state: NodeState
    stage: str | None
    reason: str
    in_spec: bool
    position: int
    updated_at: str
    run_id: str | None
    by_operator: bool = False  # whether the node's last move was an operator's (a quarantine the operator holds)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "group": self.group,
            "state": str(self.state),
            "stage": self.stage,
            "reason": self.reason,
            "in_spec": self.in_spec,
            "updated_at": self.updated_at,
            "run_id": self.run_id,
            "by_operator": self.by_operator,
        }


@dataclass(frozen=True)
class BaselineSample:
    """One figure of one admitted node in one campaign: ``item`` is what on the node measured it (``GPU 3``)."""

    profile: str
    hardware: str  # what the profile is (GPU model and count, HCAs): a baseline is used only on the same hardware
    figure: str
    campaign: str
    node: str
    item: str
    value: float
    source: str = ""
    at: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"profile": self.profile, "hardware": self.hardware, "figure": self.figure, "campaign": self.campaign,
                "node": self.node, "item": self.item, "value": self.value, "source": self.source, "at": self.at}


@dataclass(frozen=True)
class Registration:
    """How the spec's node list differs from the store's."""

    added: list[str]
    returning: list[str]  # were removed from the spec before, now back
    removed: list[str]  # in the store, no longer in the spec


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


class StateStore:
    def __init__(self, state_dir: Path, *, migrations: Sequence[str] = MIGRATIONS) -> None:
        self.state_dir = state_dir
        self.path = state_dir / DB_NAME
        state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        old_umask = os.umask(0o077)  # the -wal and -shm files inherit it too
        try:
            self.db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA foreign_keys=ON")
            self.db.execute("PRAGMA busy_timeout=30000")
            self._migrate(migrations)
        except sqlite3.DatabaseError as error:
            raise StoreError(f"{self.path}: not a usable state store ({error})") from None
        finally:
            os.umask(old_umask)
        for suffix in ("", "-wal", "-shm"):
            candidate = Path(f"{self.path}{suffix}")
            if candidate.exists():
                candidate.chmod(0o600)
        self.db.row_factory = sqlite3.Row

    @classmethod
    def open_readonly(cls, state_dir: Path) -> StateStore | None:
        """Open an existing store for reading only (``plan``, ``status``); ``None`` if there is none.

        Read-only commands must not create folders, migrate schemas or take locks. A store an older release
        wrote is read through a copy in memory, upgraded there: the file stays as it is until a mutating
        command upgrades it, and ``plan`` and ``status`` still work the day after an upgrade.
        """
        path = state_dir / DB_NAME
        if not path.exists():
            return None
        store = cls.__new__(cls)
        store.state_dir = state_dir
        store.path = path
        try:
            store.db = sqlite3.connect(
                f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=30.0, isolation_level=None
            )
            store.db.execute("PRAGMA busy_timeout=30000")
            version = store.schema_version
        except sqlite3.DatabaseError as error:
            raise StoreError(f"{path}: not a usable state store ({error})") from None
        if version < len(MIGRATIONS):
            upgraded = sqlite3.connect(":memory:", isolation_level=None)
            store.db.backup(upgraded)
            store.db.close()
            store.db = upgraded
        try:
            store._migrate(MIGRATIONS)
        except (StoreError, sqlite3.DatabaseError) as error:
            store.db.close()
            raise StoreError(str(error)) from None
        store.db.row_factory = sqlite3.Row
        return store

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> StateStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- schema -----------------------------------------------------------------

    @property
    def schema_version(self) -> int:
        return int(self.db.execute("PRAGMA user_version").fetchone()[0])

    def _migrate(self, migrations: Sequence[str]) -> None:
        version = self.schema_version
        if version > len(migrations):
            raise StoreError(
                f"{self.path} has schema version {version} but this provision knows {len(migrations)}; "
                "it was written by a newer release"
            )
        for target in range(version + 1, len(migrations) + 1):
            with self.transaction():
                for statement in statements(migrations[target - 1]):
                    self.db.execute(statement)
                self.db.execute(f"PRAGMA user_version = {target}")

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One atomic unit; inside an open one it joins it, so callers can group several changes."""
        if self.db.in_transaction:
            yield self.db
            return
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield self.db
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    # -- nodes --------------------------------------------------------------------

    #: A node's row with whether its last move was an operator's (the table of moves tells a quarantine the
    #: provision phase made from one an operator holds).
    _NODE_ROW = ("SELECT nodes.*, (SELECT by_operator FROM transitions WHERE transitions.node = nodes.name "
                 "ORDER BY id DESC LIMIT 1) AS last_by_operator FROM nodes")

    def nodes(self) -> list[NodeRecord]:
        rows = self.db.execute(f"{self._NODE_ROW} ORDER BY in_spec DESC, position, name").fetchall()
        return [_node(row) for row in rows]

    def node(self, name: str) -> NodeRecord | None:
        row = self.db.execute(f"{self._NODE_ROW} WHERE name = ?", (name,)).fetchone()
        return _node(row) if row else None

    def compare(self, spec_nodes: Iterable[tuple[str, str]]) -> Registration:
        """What :meth:`register` would change, without changing it (for ``plan``)."""
        wanted = [name for name, _group in spec_nodes]
        known = {row["name"]: bool(row["in_spec"]) for row in self.db.execute("SELECT name, in_spec FROM nodes")}
        wanted_set = set(wanted)
        return Registration(
            added=[name for name in wanted if name not in known],
            returning=[name for name in wanted if name in known and not known[name]],
            removed=sorted(name for name, in_spec in known.items() if in_spec and name not in wanted_set),
        )

    def register(self, spec_nodes: Sequence[tuple[str, str]], run_id: str) -> Registration:
        """Bring the node table in line with the spec; history of removed nodes is kept."""
        change = self.compare(spec_nodes)
        stamp = now()
        with self.transaction():
            for position, (name, group) in enumerate(spec_nodes):
                self.db.execute(
                    "INSERT INTO nodes (name, node_group, state, position, updated_at, run_id) "
                    "VALUES (?, ?, ?, ?, ?, ?) "
                    "ON CONFLICT(name) DO UPDATE SET node_group = excluded.node_group, "
                    "position = excluded.position, in_spec = 1",
                    (name, group, NodeState.NEW.value, position, stamp, run_id),
                )
            for name in change.added:
                self._log(name, None, NodeState.NEW, None, "registered from the spec", {}, False, run_id, stamp)
            for name in change.removed:
                self.db.execute("UPDATE nodes SET in_spec = 0 WHERE name = ?", (name,))
        return change

    def transition(
        self,
        name: str,
        target: NodeState,
        *,
        run_id: str,
        stage: str | None = None,
        reason: str = "",
        evidence: dict[str, Any] | None = None,
        seen_operator: str | None = None,
    ) -> None:
        """Move one node, atomically with its history row; refuse moves the lifecycle forbids.

        The move is made by the run ``run_id``: its command (as the store recorded it when the run started) is
        what the table of moves is asked about, and an operator's command is recorded as the operator's move. A
        run the store does not know makes no move. ``seen_operator``: the watch recording what an administrator
        did in Slurm (an operator's command: ``drain``, ``admit``), asked of the table as that command and kept as
        the operator's move; only a watch's run may."""
        stamp = now()
        with self.transaction():
            run = self.db.execute("SELECT command FROM runs WHERE id = ?", (run_id,)).fetchone()
            if run is None:
                raise TransitionError(f"no recorded run {run_id!r}: a node is moved only by a run of the store")
            record = self.node(name)
            if record is None:
                raise KeyError(f"unknown node {name!r}")
            command = run["command"]
            if seen_operator is not None:
                if command != WATCH or seen_operator not in OPERATOR_COMMANDS:
                    raise TransitionError(f"only `provision watch` records an operator's move seen in Slurm, as "
                                          f"one of {', '.join(sorted(OPERATOR_COMMANDS))}")
                command = seen_operator
            check_move(record.state, target, command=command, stage=stage, reason=reason,
                       current_stage=record.stage, current_by_operator=record.by_operator)
            self.db.execute(
                "UPDATE nodes SET state = ?, stage = ?, reason = ?, updated_at = ?, run_id = ? WHERE name = ?",
                (target.value, stage, reason, stamp, run_id, name),
            )
            self._log(name, record.state, target, stage, reason, evidence or {}, command in OPERATOR_COMMANDS,
                      run_id, stamp)

    def history(self, name: str) -> list[dict[str, Any]]:
        rows = self.db.execute("SELECT * FROM transitions WHERE node = ? ORDER BY id", (name,)).fetchall()
        return [{**dict(row), "evidence": json.loads(row["evidence"])} for row in rows]

    def counts(self) -> dict[str, int]:
        rows = self.db.execute("SELECT state, COUNT(*) AS n FROM nodes WHERE in_spec = 1 GROUP BY state")
        found = {row["state"]: row["n"] for row in rows}
        return {state.value: found.get(state.value, 0) for state in NodeState}

    def _log(self, name: str, current: NodeState | None, target: NodeState, stage: str | None, reason: str,
             evidence: dict[str, Any], by_operator: bool, run_id: str, stamp: str) -> None:
        self.db.execute(
            "INSERT INTO transitions (node, from_state, to_state, stage, reason, evidence, by_operator, run_id, at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                name,
                current.value if current else None,
                target.value,
                stage,
                reason,
                json.dumps(evidence, sort_keys=True),
                int(by_operator),
                run_id,
                stamp,
            ),
        )

    # -- runs and results -----------------------------------------------------------

    def start_run(self, run_id: str, command: str, run_dir: Path, spec_path: Path, spec_sha256: str) -> None:
        with self.transaction():
            self.db.execute(
                "INSERT INTO runs (id, command, status, pid, run_dir, spec_path, spec_sha256, started_at) "
                "VALUES (?, ?, 'running', ?, ?, ?, ?, ?)",
                (run_id, command, os.getpid(), str(run_dir), str(spec_path), spec_sha256, now()),
            )

    def finish_run(self, run_id: str, status: str, exit_code: int) -> None:
        with self.transaction():
            self.db.execute(
                "UPDATE runs SET status = ?, exit_code = ?, finished_at = ? WHERE id = ?",
                (status, exit_code, now(), run_id),
            )

    def close_abandoned_runs(self) -> list[str]:
        """Mark runs still 'running' as interrupted. Call only while holding the cluster lock:
        then no other live process can own a running run."""
        with self.transaction():
            rows = self.db.execute("SELECT id FROM runs WHERE status = 'running'").fetchall()
            self.db.execute(
                "UPDATE runs SET status = 'interrupted', finished_at = ? WHERE status = 'running'", (now(),)
            )
        return [row["id"] for row in rows]

    def runs(self, limit: int = 20) -> list[dict[str, Any]]:
        rows = self.db.execute("SELECT * FROM runs ORDER BY started_at DESC LIMIT ?", (limit,)).fetchall()
        return [dict(row) for row in rows]

    def record_results(self, run_id: str, phase: str, rows: Iterable[tuple[str, str, str, dict[str, Any]]]) -> None:
        """Store ``(node, check, outcome, detail)`` rows of one phase in a single transaction."""
        stamp = now()
        with self.transaction():
            self.db.executemany(
                "INSERT INTO results (run_id, node, phase, check_name, outcome, detail, at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                [(run_id, node, phase, check, outcome, json.dumps(detail, sort_keys=True), stamp)
                 for node, check, outcome, detail in rows],
            )

    def results(self, run_id: str) -> list[dict[str, Any]]:
        rows = self.db.execute("SELECT * FROM results WHERE run_id = ? ORDER BY id", (run_id,)).fetchall()
        return [{**dict(row), "detail": json.loads(row["detail"])} for row in rows]


    # -- burn-in campaigns ------------------------------------------------------------

    def open_campaign(self, run_id: str, stages: Sequence[str], spec_sha256: str) -> tuple[str, bool]:
        """The unfinished campaign with these stages and this spec (resumed), or a new one."""
        wanted = json.dumps(list(stages))
        with self.transaction():
            row = self.db.execute(
                "SELECT id FROM burnin_campaigns WHERE finished_at IS NULL AND stages = ? AND spec_sha256 = ? "
                "ORDER BY started_at DESC LIMIT 1", (wanted, spec_sha256)).fetchone()
            if row is not None:
                return row["id"], True
            self.db.execute("UPDATE burnin_campaigns SET finished_at = ? WHERE finished_at IS NULL", (now(),))
            self.db.execute("INSERT INTO burnin_campaigns (id, stages, spec_sha256, started_at) VALUES (?, ?, ?, ?)",
                            (run_id, wanted, spec_sha256, now()))
        return run_id, False

    def record_pass(self, campaign: str, node: str, stage: str, run_id: str, detail: dict[str, Any]) -> None:
        with self.transaction():
            self.db.execute(
                "INSERT OR REPLACE INTO burnin_passes (campaign, node, stage, run_id, detail, at) "
                "VALUES (?, ?, ?, ?, ?, ?)", (campaign, node, stage, run_id, json.dumps(detail, sort_keys=True), now()))

    def forget_passes(self, campaign: str, node: str) -> None:
        """A node that fails, or re-enters, in a campaign keeps none of that campaign's earlier passes."""
        with self.transaction():
            self.db.execute("DELETE FROM burnin_passes WHERE campaign = ? AND node = ?", (campaign, node))

    def passes(self, campaign: str) -> dict[str, set[str]]:
        rows = self.db.execute("SELECT node, stage FROM burnin_passes WHERE campaign = ?", (campaign,)).fetchall()
        passed: dict[str, set[str]] = {}
        for row in rows:
            passed.setdefault(row["node"], set()).add(row["stage"])
        return passed

    def pass_figures(self, campaign: str) -> dict[str, dict[str, tuple[str, dict[str, list[tuple[str, float]]]]]]:
        """node -> stage -> (the device measured on, the figures) its pass recorded (``measured_on`` and
        ``figures`` of the pass's detail)."""
        rows = self.db.execute("SELECT node, stage, detail FROM burnin_passes WHERE campaign = ?",
                               (campaign,)).fetchall()
        found: dict[str, dict[str, tuple[str, dict[str, list[tuple[str, float]]]]]] = {}
        for row in rows:
            detail = json.loads(row["detail"])
            if detail.get("figures"):
                found.setdefault(row["node"], {})[row["stage"]] = (str(detail.get("measured_on", "")), {
                    name: [(str(item), float(value)) for item, value in items]
                    for name, items in detail["figures"].items()})
        return found

    def finish_campaign(self, campaign: str) -> None:
        with self.transaction():
            self.db.execute("UPDATE burnin_campaigns SET finished_at = ? WHERE id = ?", (now(), campaign))

    def record_soak(self, campaign: str, node: str, at_s: float, values: dict[str, float]) -> None:
        """One poll of one node: every series' value at ``at_s`` seconds into the soak."""
        with self.transaction():
            self.db.executemany("INSERT INTO soak_samples (campaign, node, series, at_s, value) VALUES (?, ?, ?, ?, ?)",
                                [(campaign, node, series, at_s, value) for series, value in values.items()])

    def soak_elapsed_s(self, campaign: str) -> float:
        """How far the campaign's soak had got (its last poll), 0 before it began."""
        row = self.db.execute("SELECT MAX(at_s) AS at FROM soak_samples WHERE campaign = ?", (campaign,)).fetchone()
        return float(row["at"] or 0.0)

    def soak_latest(self) -> tuple[str | None, list[tuple[str, str, float, float]]]:
        """The newest soak's campaign and, per node and series, its latest sample: (node, series, at_s, value)."""
        newest = self.db.execute("SELECT campaign FROM soak_samples ORDER BY rowid DESC LIMIT 1").fetchone()
        if newest is None:
            return None, []
        rows = self.db.execute("SELECT node, series, MAX(at_s) AS at_s, value FROM soak_samples WHERE campaign = ? "
                               "GROUP BY node, series ORDER BY node, series", (newest["campaign"],)).fetchall()
        return newest["campaign"], [(row["node"], row["series"], row["at_s"], row["value"]) for row in rows]

    def record_forecasts(self, source: str, judged: Iterable[ForecastRecord], *, run_id: str | None,
                         nodes: Iterable[str] | None = None) -> None:
        """Each component's newest forecast from ``source``, which judged them all (or all of ``nodes``'): a
        component it no longer forecasts (its series left the window) is dropped, never left flagged; the hour each
        first flagged its node is kept."""
        scope = set(nodes) if nodes is not None else None
        rows = [(source, one.node, one.component, now(), one.at_h, one.hours, one.low, one.high, one.rate, one.counted,
                 one.threshold, int(one.flagged), one.at_h if one.flagged else None, one.why, run_id)
                for one in judged]
        with self.transaction():
            kept = {(row[1], row[2]) for row in rows}
            stale = [(source, node, component) for node, component in self.db.execute(
                "SELECT node, component FROM forecasts WHERE source = ?", (source,))
                if (node, component) not in kept and (scope is None or node in scope)]
            self.db.executemany("DELETE FROM forecasts WHERE source = ? AND node = ? AND component = ?", stale)
            self.db.executemany(
                "INSERT INTO forecasts (source, node, component, made_at, at_h, hours, low, high, rate, count, "
                "threshold, flagged, first_flagged_h, why, run_id) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (source, node, component) DO UPDATE SET made_at = excluded.made_at, "
                "at_h = excluded.at_h, "
                "hours = excluded.hours, low = excluded.low, high = excluded.high, rate = excluded.rate, "
                "count = excluded.count, threshold = excluded.threshold, flagged = excluded.flagged, "
                "first_flagged_h = COALESCE(forecasts.first_flagged_h, excluded.first_flagged_h), "
                "why = excluded.why, run_id = excluded.run_id", rows)

    def forecasts(self) -> list[dict[str, Any]]:
        """Every component's newest forecast, per node: a soak's only from the node's newest soak campaign (an older
        campaign's projection is history, not a warning)."""
        rows = [dict(row) for row in self.db.execute("SELECT * FROM forecasts ORDER BY node, component, source")]
        newest: dict[str, str] = {}
        for campaign in reversed(self.soak_campaigns()):  # oldest first: the newest campaign ends up kept
            for node in self.soak_nodes(campaign):
                newest[node] = f"soak:{campaign}"
        return [row for row in rows
                if not row["source"].startswith("soak:") or newest.get(row["node"]) == row["source"]]

    def add_revalidation(self, node: str, job_id: str, *, at: float, run_id: str | None) -> None:
        """A revalidation job the watch submitted for ``node`` (its verdict still to be read)."""
        with self.transaction():
            self.db.execute("INSERT INTO revalidation_jobs (job_id, node, submitted_at, run_id) VALUES (?, ?, ?, ?)",
                            (job_id, node, at, run_id))

    def revalidations_underway(self) -> dict[str, str]:
        """Job id -> node, for every revalidation job whose end the watch has not read yet."""
        rows = self.db.execute("SELECT job_id, node FROM revalidation_jobs WHERE ended_at IS NULL ORDER BY job_id")
        return {row["job_id"]: row["node"] for row in rows}

    def end_revalidation(self, job_id: str, verdict: str, detail: str, *, at: float) -> None:
        with self.transaction():
            self.db.execute("UPDATE revalidation_jobs SET ended_at = ?, verdict = ?, detail = ? WHERE job_id = ?",
                            (at, verdict, detail, job_id))

    def last_revalidated(self) -> dict[str, float]:
        """Per node, when its newest revalidation that passed was submitted (the moment it was last known good)."""
        rows = self.db.execute("SELECT node, MAX(submitted_at) AS at FROM revalidation_jobs WHERE verdict = 'passed' "
                               "GROUP BY node")
        return {row["node"]: float(row["at"]) for row in rows}

    def revalidations(self, node: str) -> list[dict[str, Any]]:
        return [dict(row) for row in self.db.execute(
            "SELECT * FROM revalidation_jobs WHERE node = ? ORDER BY submitted_at", (node,))]

    def soak_series(self, campaign: str, node: str,
                    names: Sequence[str] | None = None) -> dict[str, list[tuple[float, float]]]:
        """The node's series in the campaign's soak (``names``: only those)."""
        only = f" AND series IN ({', '.join('?' * len(names))})" if names is not None else ""
        rows = self.db.execute(f"SELECT series, at_s, value FROM soak_samples WHERE campaign = ? AND node = ?{only} "
                               "ORDER BY series, at_s", (campaign, node, *(names or ()))).fetchall()
        series: dict[str, list[tuple[float, float]]] = {}
        for row in rows:
            series.setdefault(row["series"], []).append((row["at_s"], row["value"]))
        return series

    # -- the fleet's baseline -------------------------------------------------------------

    def add_baseline(self, rows: Iterable[BaselineSample], *, source: str) -> int:
        """Keep samples (a sample already kept, by profile, figure, campaign, node and item, is kept once: an
        import repeated adds nothing); how many were new."""
        stamp = now()
        with self.transaction():
            before = self.db.total_changes
            self.db.executemany(
                "INSERT OR IGNORE INTO baseline_samples (profile, hardware, figure, campaign, node, item, value, "
                "source, at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(row.profile, row.hardware, row.figure, row.campaign, row.node, row.item, row.value,
                  row.source or source, row.at or stamp) for row in rows])
            return self.db.total_changes - before

    def baseline_samples(self, profile: str | None = None) -> list[BaselineSample]:
        query = "SELECT * FROM baseline_samples" + (" WHERE profile = ?" if profile is not None else "")
        try:
            rows = self.db.execute(query + " ORDER BY profile, figure, at, campaign, node, item",
                                   (profile,) if profile is not None else ()).fetchall()
        except sqlite3.OperationalError:  # an old store read-only: no baseline kept yet
            return []
        return [BaselineSample(row["profile"], row["hardware"], row["figure"], row["campaign"], row["node"],
                               row["item"], row["value"], row["source"], row["at"]) for row in rows]

    def record_cable(self, cable: str, kind: str, detail: dict[str, Any], *, at: str | None = None,
                     run_id: str | None = None) -> None:
        with self.transaction():
            self.db.execute("INSERT INTO cable_history (cable, kind, at, detail, run_id) VALUES (?, ?, ?, ?, ?)",
                       (cable, kind, at or now(), json.dumps(detail, sort_keys=True), run_id))

    def cables_found(self, run_id: str) -> list[str]:
        """Cables a run recorded findings about, in the order found."""
        rows = self.db.execute("SELECT cable FROM cable_history WHERE run_id = ? AND kind = 'finding' "
                               "GROUP BY cable ORDER BY MIN(id)", (run_id,)).fetchall()
        return [row["cable"] for row in rows]

    # -- sinks: the outside systems that follow the store ------------------------------

    def set_sink_status(self, sink: str, *, pending: bool, detail: dict[str, Any], run_id: str | None) -> None:
        with self.transaction():
            self.db.execute("INSERT OR REPLACE INTO sink_status (sink, pending, detail, at, run_id) "
                            "VALUES (?, ?, ?, ?, ?)", (sink, int(pending), json.dumps(detail, sort_keys=True),
                                                       now(), run_id))

    def campaign_runs(self, campaign: str) -> set[str] | None:
        """The runs that passed nodes in a burn-in campaign (its own first run among them); None: no such one."""
        if self.db.execute("SELECT 1 FROM burnin_campaigns WHERE id = ?", (campaign,)).fetchone() is None:
            return None
        rows = self.db.execute("SELECT DISTINCT run_id FROM burnin_passes WHERE campaign = ?", (campaign,))
        return {row["run_id"] for row in rows.fetchall()} | {campaign}

    def campaigns_of(self, run_ids: Sequence[str]) -> set[str]:
        """The campaigns the given runs passed nodes in."""
        marks = ",".join("?" * len(run_ids))
        rows = self.db.execute(f"SELECT DISTINCT campaign FROM burnin_passes WHERE run_id IN ({marks})", list(run_ids))
        return {row["campaign"] for row in rows.fetchall()}

    def soak_campaigns(self) -> list[str]:
        """The campaigns whose soak recorded telemetry, the newest sample's first."""
        rows = self.db.execute("SELECT campaign, MAX(rowid) AS last FROM soak_samples GROUP BY campaign "
                               "ORDER BY last DESC")
        return [row["campaign"] for row in rows.fetchall()]

    def soak_nodes(self, campaign: str) -> list[str]:
        rows = self.db.execute("SELECT DISTINCT node FROM soak_samples WHERE campaign = ? ORDER BY node", (campaign,))
        return [row["node"] for row in rows.fetchall()]

    def sink_status(self) -> dict[str, dict[str, Any]]:
        """sink -> {pending, detail, at, run_id} (empty before any sink has run, or in an old store read-only)."""
        try:
            rows = self.db.execute("SELECT * FROM sink_status ORDER BY sink").fetchall()
        except sqlite3.OperationalError:
            return {}
        return {row["sink"]: {"pending": bool(row["pending"]), "detail": json.loads(row["detail"]), "at": row["at"],
                              "run_id": row["run_id"]} for row in rows}

    def set_breaker(self, *, tripped: bool, detail: dict[str, Any], run_id: str | None) -> None:
        with self.transaction():
            self.db.execute("INSERT OR REPLACE INTO watch_breaker (id, tripped, detail, at, run_id) "
                            "VALUES (1, ?, ?, ?, ?)", (int(tripped), json.dumps(detail, sort_keys=True), now(), run_id))

    def breaker(self) -> dict[str, Any] | None:
        """The watch's breaker, {tripped, detail, at, run_id}; None before a watch ever judged it (or an old store
        read-only)."""
        try:
            row = self.db.execute("SELECT * FROM watch_breaker WHERE id = 1").fetchone()
        except sqlite3.OperationalError:
            return None
        return None if row is None else {"tripped": bool(row["tripped"]), "detail": json.loads(row["detail"]),
                                         "at": row["at"], "run_id": row["run_id"]}

    def moves_since(self, to_state: NodeState, stage: str, since: str) -> list[str]:
        """The nodes moved to ``to_state`` at ``stage`` at or after ``since`` (an ISO time, as ``at`` is kept)."""
        rows = self.db.execute("SELECT node FROM transitions WHERE to_state = ? AND stage = ? AND at >= ? "
                               "ORDER BY id", (to_state.value, stage, since)).fetchall()
        return [row["node"] for row in rows]

    # -- the watch's passive signals ----------------------------------------------------------------------------

    def watch_cursor(self, source: str) -> dict[str, Any] | None:
        """Where the watch stopped reading ``source`` (``ufm:<path>``, ``syslog:<path>``, ``counters:<dir>``)."""
        row = self.db.execute("SELECT detail FROM watch_cursors WHERE source = ?", (source,)).fetchone()
        return None if row is None else dict(json.loads(row["detail"]))

    def set_watch_cursor(self, source: str, detail: dict[str, Any], *, run_id: str | None) -> None:
        with self.transaction():
            self.db.execute("INSERT OR REPLACE INTO watch_cursors (source, detail, at, run_id) VALUES (?, ?, ?, ?)",
                            (source, json.dumps(detail, sort_keys=True), now(), run_id))

    def add_watch_signals(self, *, observations: Iterable[WatchObservation] = (),
                          device_events: Iterable[tuple[float, str, bool]] = (),
                          counter_deltas: Iterable[WatchCounterDelta] = (), run_id: str | None) -> None:
        """What one pass read, kept until it leaves the window (:meth:`prune_watch_signals`)."""
        with self.transaction():
            self.db.executemany(
                "INSERT INTO watch_observations (time, cable_node, cable_port, kind, source, end_node, end_port, "
                "text, weight, code, run_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(*row, run_id) for row in observations])
            self.db.executemany("INSERT INTO watch_device_events (time, device, up, run_id) VALUES (?, ?, ?, ?)",
                                [(time, device, int(up), run_id) for time, device, up in device_events])
            self.db.executemany(
                "INSERT INTO watch_counter_deltas (cable_node, cable_port, port_node, port, start_time, end_time, "
                "counter, delta, value_before, value_after, reset, saturated, run_id) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(*row[:10], int(row[10]), int(row[11]), run_id) for row in counter_deltas])

    def watch_signals_since(self, since: float) -> tuple[list[WatchObservation], list[tuple[float, str, bool]],
                                                          list[WatchCounterDelta]]:
        """Every kept observation, device event and counter delta at or after ``since`` (the evidence's clock),
        in time order."""
        observations = [WatchObservation(*row) for row in self.db.execute(
            "SELECT time, cable_node, cable_port, kind, source, end_node, end_port, text, weight, code "
            "FROM watch_observations WHERE time >= ? ORDER BY time, id", (since,))]
        devices = [(row[0], row[1], bool(row[2])) for row in self.db.execute(
            "SELECT time, device, up FROM watch_device_events WHERE time >= ? ORDER BY time, id", (since,))]
        deltas = [WatchCounterDelta(row[0], row[1], row[2], row[3], row[4], row[5], row[6], row[7], row[8], row[9],
                                    bool(row[10]), bool(row[11])) for row in self.db.execute(
            "SELECT cable_node, cable_port, port_node, port, start_time, end_time, counter, delta, value_before, "
            "value_after, reset, saturated FROM watch_counter_deltas WHERE end_time >= ? ORDER BY end_time, id",
            (since,))]
        return observations, devices, deltas

    def watch_actions(self) -> dict[str, int]:
        """How often the watch has acted, by kind, over the store's life: its quarantines by stage
        (``quarantine_node-check``, ``quarantine_fabric``), the operators' moves it read back from Slurm
        (``operator_seen``), the cables it ticketed (``ticket``) and the ports it disabled (``port_disabled``)."""
        found: dict[str, int] = {}
        for row in self.db.execute(
                "SELECT transitions.stage AS stage, transitions.by_operator AS by_operator, COUNT(*) AS n "
                "FROM transitions JOIN runs ON transitions.run_id = runs.id WHERE runs.command = ? "
                "GROUP BY transitions.stage, transitions.by_operator", (WATCH,)):
            kind = "operator_seen" if row["by_operator"] else f"quarantine_{row['stage']}"
            found[kind] = found.get(kind, 0) + int(row["n"])
        for row in self.db.execute(
                "SELECT kind, COUNT(*) AS n FROM cable_history WHERE json_extract(detail, '$.source') = 'watch' "
                "GROUP BY kind"):
            found["ticket" if row["kind"] == "finding" else "port_disabled"] = int(row["n"])
        return found

    # -- the watch's repair ladder -------------------------------------------------------------------------------

    def watch_episode(self, node: str) -> int | None:
        """The node's current episode: the id of the watch's quarantine that began it (the latest move of the node
        into a quarantine of the watch's, at node-check or fabric), None when the watch never quarantined it."""
        row = self.db.execute(
            "SELECT transitions.id FROM transitions JOIN runs ON transitions.run_id = runs.id WHERE "
            "transitions.node = ? AND runs.command = ? AND transitions.to_state = ? AND transitions.from_state = ? "
            "ORDER BY transitions.id DESC LIMIT 1",
            (node, WATCH, NodeState.QUARANTINED.value, NodeState.ADMITTED.value)).fetchone()
        return None if row is None else int(row[0])

    def watch_quarantines_since(self, node: str, since: str) -> int:
        """How often the watch took the node out of service at or after ``since`` (an ISO time)."""
        row = self.db.execute(
            "SELECT COUNT(*) FROM transitions JOIN runs ON transitions.run_id = runs.id WHERE transitions.node = ? "
            "AND runs.command = ? AND transitions.to_state = ? AND transitions.from_state = ? AND transitions.at >= ?",
            (node, WATCH, NodeState.QUARANTINED.value, NodeState.ADMITTED.value, since)).fetchone()
        return int(row[0])

    def start_attempt(self, node: str, episode: int, step: str, *, run_id: str) -> int:
        """A rung of the ladder, recorded before anything is done to the node: a watch killed during it knows."""
        with self.transaction():
            cursor = self.db.execute(
                "INSERT INTO repair_attempts (node, episode, step, outcome, started_at, run_id) "
                "VALUES (?, ?, ?, 'started', ?, ?)", (node, episode, step, now(), run_id))
        return int(cursor.lastrowid or 0)

    def finish_attempt(self, attempt: int, outcome: str, detail: dict[str, Any]) -> None:
        with self.transaction():
            self.db.execute("UPDATE repair_attempts SET outcome = ?, finished_at = ?, detail = ? WHERE id = ?",
                            (outcome, now(), json.dumps(detail, sort_keys=True), attempt))

    def attempts(self, node: str, episode: int) -> list[dict[str, Any]]:
        """The rungs tried in one episode, in order: {id, step, outcome, started_at, finished_at, detail}."""
        rows = self.db.execute("SELECT * FROM repair_attempts WHERE node = ? AND episode = ? ORDER BY id",
                               (node, episode)).fetchall()
        return [{"id": row["id"], "step": row["step"], "outcome": row["outcome"], "started_at": row["started_at"],
                 "finished_at": row["finished_at"], "detail": json.loads(row["detail"])} for row in rows]

    def prune_watch_signals(self, before: float) -> int:
        """Forget what is older than ``before`` (outside every window the watch judges): the store stays bounded
        however long the watch runs."""
        with self.transaction():
            removed = self.db.execute("DELETE FROM watch_observations WHERE time < ?", (before,)).rowcount
            removed += self.db.execute("DELETE FROM watch_device_events WHERE time < ?", (before,)).rowcount
            removed += self.db.execute("DELETE FROM watch_counter_deltas WHERE end_time < ?", (before,)).rowcount
        return int(removed)

    def cable_history(self, cable: str) -> list[dict[str, Any]]:
        rows = self.db.execute("SELECT kind, at, detail, run_id FROM cable_history WHERE cable = ? ORDER BY at, id",
                               (cable,)).fetchall()
        return [{"kind": row["kind"], "at": row["at"], "detail": json.loads(row["detail"]), "run_id": row["run_id"]}
                for row in rows]


class WatchObservation(NamedTuple):
    """One thing a passive source said about a cable (``topology.linkhealth.Observation``, flattened for the
    store: the cable by its first end)."""

    time: float
    cable_node: str
    cable_port: int
    kind: str
    source: str
    end_node: str | None
    end_port: int | None
    text: str
    weight: int
    code: str


class ForecastRecord(NamedTuple):
    """One component's forecast as the store keeps it (``provision.forecast.components.ComponentForecast``):
    ``hours`` to its threshold (None: no trend) on the series' clock at ``at_h``."""

    node: str
    component: str
    at_h: float
    hours: float | None
    low: float | None
    high: float | None
    rate: float
    counted: float
    threshold: float
    flagged: bool
    why: str


class WatchCounterDelta(NamedTuple):
    """One error counter's change on one port between two snapshots (``topology.counters.CounterDelta``)."""

    cable_node: str
    cable_port: int
    port_node: str
    port: int
    start: float
    end: float
    counter: str
    delta: int
    before: int
    after: int
    reset: bool
    saturated: bool


def _node(row: sqlite3.Row) -> NodeRecord:
    return NodeRecord(
        name=row["name"],
        group=row["node_group"],
        state=NodeState(row["state"]),
        stage=row["stage"],
        reason=row["reason"],
        in_spec=bool(row["in_spec"]),
        position=row["position"],
        updated_at=row["updated_at"],
        run_id=row["run_id"],
        by_operator=bool(row["last_by_operator"]),
    )
