"""Secret references resolve at the moment of use; one that cannot names the reference, never a value."""

from __future__ import annotations

from pathlib import Path

import pytest

from provision.spec.model import SecretRef
from provision.spec.secrets import SecretUnavailable, resolve


def test_an_environment_reference_reads_the_variable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("BMC_PASSWORD_TEST", "s3cret-value")
    assert resolve(SecretRef(env="BMC_PASSWORD_TEST"), what="bmc password", spec_dir=tmp_path) == "s3cret-value"
    monkeypatch.delenv("BMC_PASSWORD_TEST")
    with pytest.raises(SecretUnavailable, match="bmc password: environment variable BMC_PASSWORD_TEST is not set"):
        resolve(SecretRef(env="BMC_PASSWORD_TEST"), what="bmc password", spec_dir=tmp_path)


def test_a_file_reference_is_read_beside_the_spec_without_its_last_newline(tmp_path: Path) -> None:
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "become").write_text("line one\n")
    assert resolve(SecretRef(file=Path("secrets/become")), what="become", spec_dir=tmp_path) == "line one"


def test_an_unreadable_file_names_the_path_and_never_a_value(tmp_path: Path) -> None:
    with pytest.raises(SecretUnavailable) as refused:
        resolve(SecretRef(file=Path("absent")), what="become password", spec_dir=tmp_path)
    assert str(tmp_path / "absent") in str(refused.value) and "become password" in str(refused.value)
