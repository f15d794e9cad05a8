"""After every mutating run the sinks the spec names follow the store; a sink that fails is an event of the run,
never its failure, and a spec that cannot be read names no sink."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from provision.run.record import RunRecord
from provision.sinks.dispatch import after_run
from provision.state import StateStore
from tests.conftest import example_text

pytestmark = pytest.mark.fast


def _events(record: RunRecord) -> list[dict]:
    record.finish("succeeded", 0)
    return [json.loads(line) for line in (record.path / "events.jsonl").read_text().splitlines()]


def _spec(tmp_path: Path, textfile_dir: str) -> Path:
    data = yaml.safe_load(example_text())
    data["metrics"] = {"textfile_dir": textfile_dir}
    data.pop("slurm", None)
    spec = tmp_path / "cluster.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    return spec


def test_the_textfile_is_written_after_a_run(tmp_path: Path) -> None:
    spec = _spec(tmp_path, "metrics")
    with StateStore(tmp_path / "state") as store:
        record = RunRecord(tmp_path / "runs", "apply", ["apply"])
        after_run(store, spec, record)
    written = [event for event in _events(record) if event["event"] == "sink.written"]
    assert written and Path(written[0]["path"]).parent == tmp_path / "metrics"
    assert "provision_nodes" in Path(written[0]["path"]).read_text()


def test_a_sink_that_fails_is_an_event_and_an_unreadable_spec_names_none(tmp_path: Path) -> None:
    (tmp_path / "blocked").write_text("a file where the folder should be")
    spec = _spec(tmp_path, "blocked/metrics")
    with StateStore(tmp_path / "state") as store:
        record = RunRecord(tmp_path / "runs", "apply", ["apply"])
        after_run(store, spec, record)  # never raises
        quiet = RunRecord(tmp_path / "runs", "drain", ["drain"])
        after_run(store, tmp_path / "moved-away.yaml", quiet)
    failed = [event for event in _events(record) if event["event"] == "sink.failed"]
    assert failed and failed[0]["sink"] == "metrics"
    assert not [event for event in _events(quiet) if event["event"].startswith("sink.")]
