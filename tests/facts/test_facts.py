"""Facts the pyinfra way: one JSON file per case under ``tests/facts/<fact>/``, written in the tool's real
format — the command (or path) the fact declares, the output, and the expected parse. A new case is a new file.

Preflight's judgements are tested the same way, as pure functions over those outputs, with no host at all:
``tests/facts/checks/<check>/<case>.json`` names the fact cases a host "returned" (or the probes that failed),
the spec's expectations that differ from a healthy H100 node's, and the outcome and message expected.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from provision.checks import kernel_allowlist, preflight
from provision.checks.outcome import Outcome
from provision.facts.registry import FACTS

pytestmark = pytest.mark.fast

HERE = Path(__file__).parents[1] / "facts"
FACT_CASES = sorted(path for path in HERE.glob("*/*.json") if path.parent.name != "checks")
CHECK_CASES = sorted((HERE / "checks").glob("*/*.json"))


def plain(value: Any) -> Any:
    """A parse result as JSON would hold it: dataclasses as dicts, tuples as lists, dict keys as strings."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {field.name: plain(getattr(value, field.name)) for field in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [plain(item) for item in value]
    if isinstance(value, set | frozenset):
        return sorted(plain(item) for item in value)
    return value


def test_every_fact_has_a_case() -> None:
    assert {path.parent.name for path in FACT_CASES} == set(FACTS)


@pytest.mark.parametrize("path", FACT_CASES, ids=lambda path: f"{path.parent.name}/{path.stem}")
def test_fact(path: Path) -> None:
    case = json.loads(path.read_text())
    fact = FACTS[case["fact"]]
    if fact.source == "command":
        assert case["command"] == fact.argv, "the case was recorded from another command"
    else:
        assert case["path"] == fact.path
    expected = case["expected"]
    if isinstance(expected, dict) and set(expected) == {"error", "message"}:
        with pytest.raises(ValueError, match=expected["message"][:40].replace("(", r"\(").replace("[", r"\[")):
            fact.parse(case["output"])
        return
    assert plain(fact.parse(case["output"])) == expected


HEALTHY_H100 = {
    "gpu_count": 2, "gpu_model": "H100-SXM-80GB", "driver": "535.183.01", "gpu_pcie": [5, 16], "hca_pcie": [5, 16],
    "rail_hcas": ["mlx5_0"], "link_gbps": 400, "nvlink_links": 3, "gpudirect": "peermem", "acs_disable": True,
    "acs_scope": "all_bridges", "nvswitch": True,
    "thresholds": {"corrected_ecc": 10, "gpu_temperature_c": 85, "disk_usage_percent": 95, "nvlink_errors": 100},
}


def _output(reference: str) -> Any:
    return json.loads((HERE / f"{reference}.json").read_text())["output"]


def _expectations(overrides: dict[str, Any]) -> preflight.Expectations:
    values = {**HEALTHY_H100, **overrides}
    if values.get("allowlist") == "builtin":  # the kernel-log allowlist the tool ships
        values["allowlist"] = tuple(kernel_allowlist.load(None))
    for key in ("gpu_pcie", "hca_pcie", "rail_hcas"):
        values[key] = tuple(values[key])
    values["rails"] = tuple(tuple(pair) for pair in values.get("rails", [["mlx5_0", 0]]))
    return preflight.Expectations(**values)


@pytest.mark.parametrize("path", CHECK_CASES, ids=lambda path: f"{path.parent.name}/{path.stem}")
def test_check(path: Path) -> None:
    case = json.loads(path.read_text())
    gathered = preflight.Gathered(
        outputs={name: _output(reference) for name, reference in case.get("outputs", {}).items()},
        files={name: None if reference is None else _output(reference)
               for name, reference in case.get("files", {}).items()},
        links={name: _output(reference) for name, reference in case.get("links", {}).items()},
        problems=case.get("problems", {}), missing=set(case.get("missing", [])))
    results = {result.check: result for result in preflight.evaluate(gathered, _expectations(case.get("expect", {})))}
    result = results[path.parent.name]
    assert result.outcome is Outcome(case["outcome"]), result
    assert case["message"] in result.message, result.message
    for line in case.get("evidence", []):  # what the result must also say (a partial listing's other findings)
        assert any(line in said for said in result.evidence), (line, result.evidence)
