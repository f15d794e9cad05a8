"""HGX B200/B300 need NVLSM: their fabric manager manages the NVSwitches through it and exits without it (CUDA
then fails with error 802; field guide 8.1). The spec pins it exactly where a board needs it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from provision.spec import SpecError, load_spec
from tests.simhelpers import write_spec

pytestmark = pytest.mark.fast


def _b200(tmp_path: Path, nvlsm: str | None, model: str = "B200-SXM-180GB") -> Path:
    spec = write_spec(tmp_path, [])
    data = yaml.safe_load(spec.read_text())
    data["hardware"]["hgx-h100"]["gpu"]["model"] = model
    data["software"].update(gpu_driver="570.172.08", cuda="12.8")
    if nvlsm:
        data["software"]["nvlsm"] = nvlsm
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    return spec


def test_a_b200_board_without_nvlsm_is_refused_and_with_it_accepted(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"HGX B200/B300 profiles \(hgx-h100\) need NVLSM"):
        load_spec(_b200(tmp_path, None))
    loaded = load_spec(_b200(tmp_path, "2025.06.5"))
    assert loaded.spec.software.nvlsm == "2025.06.5"


def test_nvlsm_where_no_board_needs_it_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="no profile here is one") as refused:
        load_spec(_b200(tmp_path, "2025.06.5", model="H100-SXM-80GB"))
    assert "software.nvlsm" in str(refused.value)
