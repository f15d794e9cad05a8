"""Reading a spec file: the document and where each value was written, the loaded cluster, and its summary."""

from __future__ import annotations

from pathlib import Path

import pytest

from provision.spec import SpecError
from provision.spec.loader import load_fabric_spec, load_spec
from provision.spec.source import MAX_SPEC_BYTES, read_document
from provision.spec.summary import summarize
from tests.conftest import EXAMPLES

pytestmark = pytest.mark.fast


def test_each_value_is_located_where_it_was_written() -> None:
    data, source = read_document(b"cluster:\n  name: c1\nnodes:\n  groups:\n    - {name: g, hosts: 'h[1-2]'}\n",
                                 "c.yaml")
    assert data["nodes"]["groups"][0]["hosts"] == "h[1-2]"
    where = source.locate(("nodes", "groups", 0, "hosts"))
    assert (where.file, where.line) == ("c.yaml", 5)
    assert source.locate(("nodes", "nothing", "here")).line == 4, "an unknown path: its closest parent's value"


@pytest.mark.parametrize(("raw", "says"), [
    (b"a: 1\na: 2\n", "a"), (b"key: [unclosed\n", "c.yaml"), (b"\xff\xfe\x00junk", "c.yaml"),
], ids=["a repeated key", "broken YAML", "not text"])
def test_a_document_that_cannot_be_read_is_refused_with_where(raw: bytes, says: str) -> None:
    with pytest.raises(SpecError) as refused:
        read_document(raw, "c.yaml")
    assert says in str(refused.value)


def test_a_spec_past_the_size_limit_is_refused_before_it_is_parsed() -> None:
    with pytest.raises(SpecError, match=r"c\.yaml"):
        read_document(b"a: 1\n", "c.yaml", size=MAX_SPEC_BYTES + 1)


def test_the_example_loads_and_summarises() -> None:
    loaded = load_spec(EXAMPLES / "sim-cluster.yaml")
    summary = summarize(loaded)
    assert (summary["cluster"], summary["nodes"], summary["hosts"]) == ("sim16", 16, "sim[01-16]")
    assert summary["gpus"] == 16 * 8 and summary["fabric"]["tiers"] in (2, 3)
    assert all("reason" in value for profile in summary["thresholds"].values() for value in profile.values())
    assert len(summary["sha256"]) == 64 and loaded.node_names[0] == "sim01"


def test_a_fabric_only_spec_loads_with_its_plan_and_is_refused_without(tmp_path: Path) -> None:
    plan = Path(__file__).parents[1] / "data" / "plans" / "spreadsheet_export.csv"
    spec = tmp_path / "fabric.yaml"
    spec.write_text(f"cluster: {{name: f1}}\nfabric: {{cabling_file: {plan}}}\n")
    assert load_fabric_spec(spec).cabling_file == plan
    with pytest.raises(SpecError):
        load_spec(spec)  # a cluster spec needs its nodes
    spec.write_text("cluster: {name: f1}\nfabric: {rails: 8, hosts_per_su: 32, switch_radix: 64}\n")
    with pytest.raises(SpecError, match=r"fabric.yaml:2:9: fabric: a spec without nodes needs fabric.cabling_file"):
        load_fabric_spec(spec)
