"""Run records: what the manifest captures, and what it must never capture."""

from __future__ import annotations

import json
from pathlib import Path

from provision.run.record import RunRecord, relevant_environment
from tests.conftest import EXAMPLES


def test_environment_capture_keeps_tuning_and_drops_secrets() -> None:
    captured = relevant_environment({
        "NCCL_IB_HCA": "=mlx5_0", "NCCL_DEBUG": "INFO", "CUDA_VISIBLE_DEVICES": "0,1",
        "PROVISION_BECOME_PASSWORD": "canary", "NCCL_IB_SECRET_TOKEN": "canary", "ANSIBLE_VAULT_PASSWORD_FILE": "x",
        "AWS_SECRET_ACCESS_KEY": "canary", "HOME": "/root", "BMC_PASSWORD": "canary",
    })
    assert captured == {"NCCL_IB_HCA": "=mlx5_0", "NCCL_DEBUG": "INFO", "CUDA_VISIBLE_DEVICES": "0,1"}


def test_manifest_says_what_ran(tmp_path: Path) -> None:
    run = RunRecord(tmp_path / "runs", "apply", ["apply", "x.yaml"])
    spec = EXAMPLES / "sim-cluster.yaml"
    run.describe_spec(spec, "ab" * 32, hosts=["sim01", "sim02"], rank_order=["sim02", "sim01"], seeds={"run": 5})
    run.event("phase.started", phase="register")
    run.finish("succeeded", 0)
    manifest = json.loads((run.path / "manifest.json").read_text())
    assert manifest["spec"]["sha256"] == "ab" * 32
    assert (run.path / "spec.yaml").read_text() == spec.read_text()
    assert manifest["rank_order"] == ["sim02", "sim01"] and manifest["seeds"] == {"run": 5}
    assert manifest["dependencies"]["pydantic"] and manifest["python"]
    assert (manifest["status"], manifest["exit_code"]) == ("succeeded", 0)
    events = [json.loads(line) for line in (run.path / "events.jsonl").read_text().splitlines()]
    assert [event["event"] for event in events] == ["phase.started", "run.finished"]
    assert run.path.name.startswith(manifest["started_at"][:4])
