"""The state store's schema, as the ordered migrations that build it: index i upgrades ``PRAGMA user_version`` i
to i + 1, each applied by the store in its own transaction. Kept apart from the store's queries so a change of
schema reads as one, and is appended, never edited: a store written by an older release is upgraded in order."""

from __future__ import annotations

#: Ordered schema migrations; index i upgrades user_version i to i + 1.
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE nodes (
        name        TEXT PRIMARY KEY,
        node_group  TEXT NOT NULL,
        state       TEXT NOT NULL,
        stage       TEXT,
        reason      TEXT NOT NULL DEFAULT '',
        in_spec     INTEGER NOT NULL DEFAULT 1,
        position    INTEGER NOT NULL,
        updated_at  TEXT NOT NULL,
        run_id      TEXT
    );
    CREATE TABLE transitions (
        id          INTEGER PRIMARY KEY AUTOINCREMENT,
        node        TEXT NOT NULL REFERENCES nodes(name),
        from_state  TEXT,
        to_state    TEXT NOT NULL,
        stage       TEXT,
        reason      TEXT NOT NULL DEFAULT '',
        evidence    TEXT NOT NULL DEFAULT '{}',
        by_operator INTEGER NOT NULL DEFAULT 0,
        run_id      TEXT,
        at          TEXT NOT NULL
    );
    CREATE INDEX transitions_node ON transitions(node, id);
    CREATE TABLE runs (
        id          TEXT PRIMARY KEY,
        command     TEXT NOT NULL,
        status      TEXT NOT NULL,
        exit_code   INTEGER,
        pid         INTEGER NOT NULL,
        run_dir     TEXT NOT NULL,
        spec_path   TEXT NOT NULL,
        spec_sha256 TEXT NOT NULL,
        started_at  TEXT NOT NULL,
        finished_at TEXT
    );
    CREATE TABLE results (
        id          INTEGER PRIMARY KEY AUTOINCREMENT,
        run_id      TEXT NOT NULL REFERENCES runs(id),
        node        TEXT NOT NULL,
        phase       TEXT NOT NULL,
        check_name  TEXT NOT NULL,
        outcome     TEXT NOT NULL,
        detail      TEXT NOT NULL DEFAULT '{}',
        at          TEXT NOT NULL
    );
    CREATE INDEX results_run_node ON results(run_id, node);
    """,
    # 1 -> 2: burn-in campaigns, so an interrupted burn-in continues instead of starting over
    """
    CREATE TABLE burnin_campaigns (
        id          TEXT PRIMARY KEY,
        stages      TEXT NOT NULL,
        spec_sha256 TEXT NOT NULL,
        started_at  TEXT NOT NULL,
        finished_at TEXT
    );
    CREATE TABLE burnin_passes (
        campaign    TEXT NOT NULL REFERENCES burnin_campaigns(id),
        node        TEXT NOT NULL,
        stage       TEXT NOT NULL,
        run_id      TEXT NOT NULL,
        detail      TEXT NOT NULL DEFAULT '{}',
        at          TEXT NOT NULL,
        PRIMARY KEY (campaign, node, stage)
    );
    """,
    # 2 -> 3: a cable's record (findings and repairs) outlives a reseat, so a repeat offender is seen as one
    """
    CREATE TABLE cable_history (
        id      INTEGER PRIMARY KEY AUTOINCREMENT,
        cable   TEXT NOT NULL,
        kind    TEXT NOT NULL CHECK (kind IN ('finding', 'repair')),
        at      TEXT NOT NULL,
        detail  TEXT NOT NULL DEFAULT '{}',
        run_id  TEXT
    );
    CREATE INDEX cable_history_cable ON cable_history(cable, at);
    """,
    # 3 -> 4: a cable's record also keeps the targeted re-tests after a repair (SQLite cannot widen a CHECK in
    # place: the table is rebuilt, every row kept)
    """
    CREATE TABLE cable_history_v4 (
        id      INTEGER PRIMARY KEY AUTOINCREMENT,
        cable   TEXT NOT NULL,
        kind    TEXT NOT NULL CHECK (kind IN ('finding', 'repair', 'recheck')),
        at      TEXT NOT NULL,
        detail  TEXT NOT NULL DEFAULT '{}',
        run_id  TEXT
    );
    INSERT INTO cable_history_v4 (id, cable, kind, at, detail, run_id)
        SELECT id, cable, kind, at, detail, run_id FROM cable_history;
    DROP TABLE cable_history;
    ALTER TABLE cable_history_v4 RENAME TO cable_history;
    CREATE INDEX cable_history_cable ON cable_history(cable, at);
    """,
    # 4 -> 5: whether each outside system (Slurm) has caught up with the store, so a sync that could not reach it
    # is shown as pending and retried by the next run
    """
    CREATE TABLE sink_status (
        sink    TEXT PRIMARY KEY,
        pending INTEGER NOT NULL,
        detail  TEXT NOT NULL DEFAULT '{}',
        at      TEXT NOT NULL,
        run_id  TEXT
    );
    """,
    # 5 -> 6: a soak's telemetry, one row per polled value, so its trends are judged on the whole series and an
    # interrupted soak continues from the time it had reached
    """
    CREATE TABLE soak_samples (
        campaign TEXT NOT NULL REFERENCES burnin_campaigns(id),
        node     TEXT NOT NULL,
        series   TEXT NOT NULL,
        at_s     REAL NOT NULL,
        value    REAL NOT NULL
    );
    CREATE INDEX soak_samples_node ON soak_samples(campaign, node, series, at_s);
    """,
    # 6 -> 7: the fleet's baseline: every figure of every admitted node, per hardware profile, so a new delivery is
    # held against what the same hardware measured before (and a site's baseline can travel to a new cluster)
    """
    CREATE TABLE baseline_samples (
        profile  TEXT NOT NULL,
        hardware TEXT NOT NULL,
        figure   TEXT NOT NULL,
        campaign TEXT NOT NULL,
        node     TEXT NOT NULL,
        item     TEXT NOT NULL,
        value    REAL NOT NULL,
        source   TEXT NOT NULL,
        at       TEXT NOT NULL,
        PRIMARY KEY (profile, figure, campaign, node, item)
    );
    """,
    # 7 -> 8: the watch's circuit breaker: tripped, it acts on no node until an operator clears it (one row)
    """
    CREATE TABLE watch_breaker (
        id      INTEGER PRIMARY KEY CHECK (id = 1),
        tripped INTEGER NOT NULL,
        detail  TEXT NOT NULL DEFAULT '{}',
        at      TEXT NOT NULL,
        run_id  TEXT
    );
    """,
    # 8 -> 9: the watch's passive signals: where it stopped reading each source, and what it read there that is
    # still inside the link-health window (a cable by one of its ends; times on the evidence's own clock); and a
    # cable's record keeps the ports the watch disabled (the CHECK widened: the table rebuilt, every row kept); and
    # the repair ladder's attempts, each in the episode (the watch's quarantine, by its transition) it belongs to
    """
    CREATE TABLE cable_history_v9 (
        id      INTEGER PRIMARY KEY AUTOINCREMENT,
        cable   TEXT NOT NULL,
        kind    TEXT NOT NULL CHECK (kind IN ('finding', 'repair', 'recheck', 'disabled')),
        at      TEXT NOT NULL,
        detail  TEXT NOT NULL DEFAULT '{}',
        run_id  TEXT
    );
    INSERT INTO cable_history_v9 (id, cable, kind, at, detail, run_id)
        SELECT id, cable, kind, at, detail, run_id FROM cable_history;
    DROP TABLE cable_history;
    ALTER TABLE cable_history_v9 RENAME TO cable_history;
    CREATE INDEX cable_history_cable ON cable_history(cable, at);
    CREATE TABLE watch_cursors (
        source  TEXT PRIMARY KEY,
        detail  TEXT NOT NULL,
        at      TEXT NOT NULL,
        run_id  TEXT
    );
    CREATE TABLE watch_observations (
        id          INTEGER PRIMARY KEY AUTOINCREMENT,
        time        REAL NOT NULL,
        cable_node  TEXT NOT NULL,
        cable_port  INTEGER NOT NULL,
        kind        TEXT NOT NULL,
        source      TEXT NOT NULL,
        end_node    TEXT,
        end_port    INTEGER,
        text        TEXT NOT NULL,
        weight      INTEGER NOT NULL,
        code        TEXT NOT NULL,
        run_id      TEXT
    );
    CREATE INDEX watch_observations_time ON watch_observations(time);
    CREATE TABLE watch_device_events (
        id      INTEGER PRIMARY KEY AUTOINCREMENT,
        time    REAL NOT NULL,
        device  TEXT NOT NULL,
        up      INTEGER NOT NULL,
        run_id  TEXT
    );
    CREATE INDEX watch_device_events_time ON watch_device_events(time);
    CREATE TABLE watch_counter_deltas (
        id          INTEGER PRIMARY KEY AUTOINCREMENT,
        cable_node  TEXT NOT NULL,
        cable_port  INTEGER NOT NULL,
        port_node   TEXT NOT NULL,
        port        INTEGER NOT NULL,
        start_time  REAL NOT NULL,
        end_time    REAL NOT NULL,
        counter     TEXT NOT NULL,
        delta       INTEGER NOT NULL,
        value_before INTEGER NOT NULL,
        value_after INTEGER NOT NULL,
        reset       INTEGER NOT NULL,
        saturated   INTEGER NOT NULL,
        run_id      TEXT
    );
    CREATE INDEX watch_counter_deltas_end ON watch_counter_deltas(end_time);
    CREATE TABLE repair_attempts (
        id          INTEGER PRIMARY KEY AUTOINCREMENT,
        node        TEXT NOT NULL REFERENCES nodes(name),
        episode     INTEGER NOT NULL,
        step        TEXT NOT NULL,
        outcome     TEXT NOT NULL CHECK (outcome IN ('started', 'passed', 'failed')),
        started_at  TEXT NOT NULL,
        finished_at TEXT,
        detail      TEXT NOT NULL DEFAULT '{}',
        run_id      TEXT
    );
    CREATE INDEX repair_attempts_node ON repair_attempts(node, episode, id);
    """,
    # 10: forecasts (issue 54): each component's latest projection to its threshold, per source (a soak campaign,
    # the watch), and when it first flagged its node; status, the report and the metrics read it from here
    """
    CREATE TABLE forecasts (
        source      TEXT NOT NULL,
        node        TEXT NOT NULL,
        component   TEXT NOT NULL,
        made_at     TEXT NOT NULL,
        at_h        REAL NOT NULL,
        hours       REAL,
        low         REAL,
        high        REAL,
        rate        REAL NOT NULL,
        count       REAL NOT NULL,
        threshold   REAL NOT NULL,
        flagged     INTEGER NOT NULL,
        first_flagged_h REAL,
        why         TEXT NOT NULL,
        run_id      TEXT,
        PRIMARY KEY (source, node, component)
    );
    """,
    # 11: the watch's revalidation jobs (issue 56, item 4): which job re-validates which node, and how it ended
    """
    CREATE TABLE revalidation_jobs (
        job_id      TEXT PRIMARY KEY,
        node        TEXT NOT NULL REFERENCES nodes(name),
        submitted_at REAL NOT NULL,
        ended_at    REAL,
        verdict     TEXT,
        detail      TEXT NOT NULL DEFAULT '',
        run_id      TEXT
    );
    CREATE INDEX revalidation_jobs_node ON revalidation_jobs(node, submitted_at);
    """,
)


def statements(script: str) -> list[str]:
    """Split a migration script; ``executescript`` would commit the open transaction."""
    return [statement.strip() for statement in script.split(";") if statement.strip()]

