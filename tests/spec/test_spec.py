"""The spec loader: every example validates; every broken spec gives located errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from provision.spec import SpecError, load_spec
from provision.spec.thresholds import effective_thresholds
from tests.conftest import BROKEN, EXAMPLES, example_text

pytestmark = pytest.mark.fast  # pure: part of make test-fast

EXAMPLE_FILES = sorted(EXAMPLES.glob("*.yaml"))
BROKEN_FILES = sorted(BROKEN.glob("*.yaml"))


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.name)
def test_examples_validate(path: Path) -> None:
    loaded = load_spec(path)
    assert loaded.nodes
    assert loaded.fabric is not None


def test_reference_build_matches_the_4088_gpu_cluster() -> None:
    loaded = load_spec(EXAMPLES / "h100-511.yaml")
    gpus = sum(loaded.spec.hardware[node.hardware].gpu.count for node in loaded.nodes)
    assert (len(loaded.nodes), gpus) == (511, 4088)
    assert (loaded.fabric.leaves, loaded.fabric.spines, loaded.fabric.cores) == (128, 128, 64)
    assert loaded.nodes[-1].scalable_unit == 16
    # overrides win over allocation; allocation continues in host order
    assert loaded.nodes[0].address == "10.10.9.1"
    assert loaded.nodes[1].address == "10.10.0.2"
    assert loaded.nodes[256].address == "10.10.1.1"


def test_simulated_example_has_at_least_sixteen_nodes_and_five_fault_kinds() -> None:
    loaded = load_spec(EXAMPLES / "sim-cluster.yaml")
    assert len(loaded.nodes) >= 16
    assert loaded.spec.simulation is not None
    assert len({fault.kind for fault in loaded.spec.simulation.faults}) >= 5


@pytest.mark.parametrize("path", BROKEN_FILES, ids=lambda p: p.name)
def test_broken_specs_report_every_expected_error(path: Path) -> None:
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    got = [str(issue).replace(f"{path}:", "", 1) for issue in caught.value.issues]
    expected = path.with_suffix(".expected").read_text().splitlines()
    assert got == expected


def test_secret_values_never_appear_in_errors() -> None:
    with pytest.raises(SpecError) as caught:
        load_spec(BROKEN / "inline_password.yaml")
    text = str(caught.value)
    assert "hunter2-canary" not in text and "also-a-canary" not in text


def _write(tmp_path: Path, text: str | bytes, name: str = "spec.yaml") -> Path:
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


def test_a_50_megabyte_file_is_refused_without_reading_it(tmp_path: Path) -> None:
    path = tmp_path / "huge.yaml"
    with path.open("wb") as handle:
        handle.write(b"cluster: {name: x}\n")
        handle.seek(50 * 10**6)
        handle.write(b"\n")
    with pytest.raises(SpecError, match=r"huge.yaml:1:1: file is 50.0 MB"):
        load_spec(path)


def test_alias_bombs_are_bounded(tmp_path: Path) -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for level in range(1, 9):
        lines.append(f"a{level}: &a{level} [" + ", ".join([f"*a{level - 1}"] * 10) + "]")
    with pytest.raises(SpecError, match="alias bomb"):
        load_spec(_write(tmp_path, "\n".join(lines) + "\n"))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("- just\n- a list\n", "a spec is a mapping of sections, not a list"),
        ("42\n", "not a number"),
        ("? [a, b]\n: value\n", "keys must be plain names"),
        ("cluster: {name: x}\n\t bad: tab\n", "invalid YAML"),
        ("--- \n...\n", "the document is empty"),
        ("a: 1\n---\nb: 2\n", "invalid YAML"),
    ],
)
def test_malformed_documents(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(SpecError) as caught:
        load_spec(_write(tmp_path, text))
    assert message in str(caught.value)


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="cannot read"):
        load_spec(tmp_path / "absent.yaml")
    with pytest.raises(SpecError, match="is a directory"):
        load_spec(tmp_path)


def test_thresholds_derive_from_gpu_model_and_link_rate() -> None:
    loaded = load_spec(EXAMPLES / "h100-511.yaml")
    spec = loaded.spec
    profile = spec.hardware["dell-xe9680"]
    thresholds = effective_thresholds(profile, spec.fabric, spec.burnin.thresholds)
    assert thresholds["matmul_tflops"].value == pytest.approx(0.72 * 989, abs=0.1)  # efficiency overridden
    assert thresholds["ib_write_bw_gbps"].value == 360  # 0.9 x NDR 400
    assert thresholds["rail_busbw_gbps"].value == 40  # 0.8 x 50 GB/s
    assert thresholds["matmul_tflops"].reason == "spec efficiency x catalog peak"
    hdr = spec.fabric.model_copy(update={"link_rate": "HDR"})
    assert effective_thresholds(profile, hdr, spec.burnin.thresholds)["ib_write_bw_gbps"].value == 180


def test_swap_off_may_be_written_bare(tmp_path: Path) -> None:
    text = example_text().replace(
        "host:\n  gpudirect: peermem", "host:\n  tuning: {swap: off}\n  gpudirect: peermem")
    loaded = load_spec(_write(tmp_path, text))
    assert loaded.spec.host.tuning.swap == "off"


def test_a_rank_fault_on_a_rail_no_rank_uses_is_refused(tmp_path: Path) -> None:
    import yaml

    data = yaml.safe_load(example_text())  # two ranks a node: GPUs 0 and 1 only
    gpu_of = data["hardware"]["hgx-h100"]["rails"]
    far = next(hca for hca, gpu in gpu_of.items() if gpu >= 2)
    near = next(hca for hca, gpu in gpu_of.items() if gpu == 1)
    data["simulation"]["faults"] = [{"kind": "degraded_hca_port", "node": "sim02", "target": far}]
    path = _write(tmp_path, yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    expected = f"sim02: {far} is the rail of GPU {gpu_of[far]}, but the burn-in starts 2 rank(s) a node"
    assert expected in str(caught.value)
    data["simulation"]["faults"][0]["target"] = near
    load_spec(_write(tmp_path, yaml.safe_dump(data, sort_keys=False)))


def test_repositories_are_refused_with_their_place_and_reason(tmp_path: Path) -> None:
    import yaml

    (tmp_path / "saved-error-page.asc").write_text("<html><body>404 Not Found</body></html>\n")
    data = yaml.safe_load(example_text())
    cuda, doca = data["software"]["repositories"]
    data["software"]["repositories"] = [
        {**cuda, "key": "keys/absent.asc"},
        {**doca, "name": "nvidia-doca", "key": "saved-error-page.asc"},
    ]
    with pytest.raises(SpecError) as caught:
        load_spec(_write(tmp_path, yaml.safe_dump(data, sort_keys=False)))
    messages = [str(issue) for issue in caught.value.issues]
    assert any("software.repositories[0].key" in text and "'keys/absent.asc' not found" in text
               for text in messages), messages
    assert any("software.repositories[1].key" in text and "is not an OpenPGP public key" in text
               for text in messages), messages
    cases = (([{**cuda, "components": ["main"]}], "a flat repository (suite '/') has no components"),
             ([{**cuda, "suite": "jammy"}], "suite 'jammy' needs components (e.g. [main])"),
             ([cuda, {**doca, "name": "nvidia-cuda"}], "repository names must be unique: nvidia-cuda repeated"))
    for repositories, expected in cases:
        data["software"]["repositories"] = repositories
        with pytest.raises(SpecError) as caught:
            load_spec(_write(tmp_path, yaml.safe_dump(data, sort_keys=False)))
        assert [expected in str(issue) for issue in caught.value.issues] == [True], caught.value.issues


def test_a_key_is_read_by_its_form() -> None:
    from provision.spec.keys import key_form

    assert key_form(b"\n-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nmQINBGJ...\n") == "armored"
    assert key_form(bytes([0x99, 0x02, 0x0D, 0x04])) == "binary"  # old format, tag 6, two-byte length
    assert key_form(bytes([0xC6, 0xC1, 0x4D, 0x04])) == "binary"  # new format, tag 6
    assert key_form(bytes([0x95, 0x03])) is None  # tag 5: a secret key
    assert key_form(b"<html>404</html>") is None and key_form(b"") is None


def test_dcgm_settings_act_or_are_refused_where_they_are_written(tmp_path: Path) -> None:
    """burnin.dcgm only through the dcgm stage; a skip allowed only for a test its level runs; a pinned DCGM no
    older than the first whose diagnostic knows the GPU (H100 SXM: 3.1.6)."""
    import yaml

    from provision.hosts.inventory import dcgm_packages

    data = yaml.safe_load(example_text())
    data["burnin"]["stages"] = ["preflight", "node"]
    del data["burnin"]["soak"]  # refused without its stage too (tests/checks/test_soak.py)
    data["burnin"]["dcgm"] = {"level": 2, "allowed_skips": ["pcie", "memtest", "eud"]}
    data["software"]["dcgm"] = "3.1.3"
    with pytest.raises(SpecError) as caught:
        load_spec(_write(tmp_path, yaml.safe_dump(data, sort_keys=False)))
    messages = sorted(str(issue).split(": ", 1)[1] for issue in caught.value.issues)
    assert messages == sorted([
        "burnin.dcgm: the burn-in has no dcgm stage: these settings would be read by nothing (hint: add dcgm to "
        "burnin.stages (after node) or remove burnin.dcgm)",
        "burnin.dcgm.allowed_skips[1]: memtest runs from level 4, not at level 2: there is no skip of it to allow "
        "(hint: remove it, or set burnin.dcgm.level to 4)",
        "burnin.dcgm.allowed_skips[2]: eud runs from level 3, not at level 2: there is no skip of it to allow "
        "(hint: remove it, or set burnin.dcgm.level to 3 or more)",
        "software.dcgm: DCGM 3.1.3 predates H100-SXM-80GB (hardware.hgx-h100): its diagnostic knows the GPU from "
        "3.1.6 (hint: pin DCGM 3.1.6 or later)"]), messages
    data["burnin"]["stages"] = ["preflight", "node", "dcgm"]
    data["burnin"]["dcgm"] = {"level": 4, "allowed_skips": ["memtest", "eud"]}
    data["software"]["dcgm"] = "3.1.6"
    loaded = load_spec(_write(tmp_path, yaml.safe_dump(data, sort_keys=False)))
    assert dcgm_packages(loaded) == {"datacenter-gpu-manager": "1:3.1.6"}
    assert "dcgm" in type(loaded.spec.burnin)().stages, "the default burn-in runs DCGM's diagnostic"
