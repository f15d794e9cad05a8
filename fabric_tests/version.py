"""What this node's burn-in runtime is: ``python -m fabric_tests.version`` prints one JSON line.

The controller compares it with what it would install (its own fabric_tests build, the pinned torch) before a
stage starts workers, so a node with a missing or stale runtime fails with that reason instead of a traceback.
"""

from __future__ import annotations

import json
import sys
from importlib import metadata

DISTRIBUTION = "provision-fabric-tests"


def describe() -> dict[str, str | None]:
    try:
        ours: str | None = metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        ours = None  # run from a source tree, not from the installed runtime
    try:
        import torch

        torch_version: str | None = str(torch.__version__)
    except ImportError:
        torch_version = None
    try:  # torch hands tensors to numpy when it is there; the metadata says whether it is, without importing it
        numpy_version: str | None = metadata.version("numpy")
    except metadata.PackageNotFoundError:
        numpy_version = None
    return {"fabric_tests": ours, "torch": torch_version, "numpy": numpy_version, "python": sys.executable}


if __name__ == "__main__":
    print(json.dumps(describe(), sort_keys=True))
