"""Resolving the spec's secret references (``{env: NAME}`` / ``{file: PATH}``) at the moment of use.

Values are never stored: they are read when a phase needs them and handed straight to the consumer (Ansible's
private data directory, deleted after the run). A reference that cannot be resolved is a usage error naming the
reference, never the value.
"""

from __future__ import annotations

import os
from pathlib import Path

from provision.errors import Refusal
from provision.spec.model import SecretRef


class SecretUnavailable(Refusal, ValueError):
    pass


def resolve(reference: SecretRef, *, what: str, spec_dir: Path) -> str:
    if reference.env is not None:
        value = os.environ.get(reference.env)
        if value is None:
            raise SecretUnavailable(f"{what}: environment variable {reference.env} is not set")
        return value
    assert reference.file is not None
    path = (spec_dir / reference.file).expanduser()
    try:
        return path.read_text().rstrip("\n")
    except OSError as error:
        raise SecretUnavailable(f"{what}: cannot read {path}: {error.strerror or error}") from None
