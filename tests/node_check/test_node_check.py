"""``provision node-check``: the check file carries exactly the controller's expectations; the Nagios verdict."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from provision.checks import spec_expectations
from provision.checks.outcome import CheckResult, Outcome
from provision.node_check import check_file as node_check_file
from provision.node_check import on_node as node_check
from provision.spec import load_spec
from tests.conftest import EXAMPLES

pytestmark = pytest.mark.fast


@pytest.mark.parametrize("example", ["sim-cluster.yaml", "h100-511.yaml"])
def test_the_check_file_round_trips_to_the_controllers_expectations(example: str, tmp_path: Path) -> None:
    loaded = load_spec(EXAMPLES / example)
    node = loaded.nodes[-1]
    path = tmp_path / f"{node.name}.json"
    path.write_text(json.dumps(node_check_file.check_file(loaded, node.name)))
    name, expect = node_check.read_check_file(path)
    wanted = spec_expectations.expectations(loaded, node)
    assert name == node.name
    assert expect.allowlist and [p.pattern for p in expect.allowlist] == [p.pattern for p in wanted.allowlist]
    assert {**vars(expect), "allowlist": None} == {**vars(wanted), "allowlist": None}


def test_no_or_a_damaged_check_file_is_unknown_never_ok(tmp_path: Path) -> None:
    missing = node_check.run(tmp_path / "absent.json")
    assert (missing.status, missing.exit_code) == ("UNKNOWN", 3) and "provision this node first" in missing.summary
    (tmp_path / "damaged.json").write_text('{"format": 1, "node": "gpu001"}')
    damaged = node_check.run(tmp_path / "damaged.json")
    assert damaged.status == "UNKNOWN" and "damaged" in damaged.summary


@pytest.mark.parametrize(("outcomes", "status", "code"), [
    ([Outcome.OK, Outcome.SILENCED], "OK", 0),
    ([Outcome.OK, Outcome.WARNING], "WARNING", 1),
    ([Outcome.UNKNOWN, Outcome.WARNING], "UNKNOWN", 3),
    ([Outcome.UNKNOWN, Outcome.FAILED, Outcome.FAILED], "CRITICAL", 2),
])
def test_nagios_status_from_outcomes(outcomes: list[Outcome], status: str, code: int) -> None:
    results = [CheckResult(f"check{index}", outcome, f"message {index}") for index, outcome in enumerate(outcomes)]
    check = node_check.verdict("gpu001", results)
    assert (check.status, check.exit_code) == (status, code)
    if status == "CRITICAL":
        assert check.summary == "gpu001: check1: message 1 (+1 more)"
        assert node_check.drain_reason(check) == "provision node-check: gpu001: check1: message 1 (+1 more)"
        assert not node_check.drain_reason(check).startswith("provision:"), "a sync would resume it"


def test_a_node_drained_already_is_read_with_its_reason_whoever_drained_it() -> None:
    """``scontrol -o show node`` as this Slurm printed it (tests/facts/slurm_nodes, recorded here): node-check
    --drain, run every HealthCheckInterval, leaves a drained node as it is, so it must see the drain and its reason;
    an idle node or a down one without the drain flag is not drained."""
    recorded = json.loads((Path(__file__).parents[1] / "facts" / "slurm_nodes" /
                           "drained_ours_admins_and_down.json").read_text())["output"]
    found = {line.split()[0].removeprefix("NodeName="): node_check.drain_reason_of(line)
             for line in recorded.splitlines()}
    assert found == {"gpu01": None, "gpu04": None, "gpu03": "fan failure, ticket 4711",
                     "gpu02": "provision: node/matmul: GPU 5 at 48% of its node-mates' matmul throughput "
                              "(run 20261123T211445Z-81182076)"}
