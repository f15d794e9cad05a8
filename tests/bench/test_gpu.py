"""bench.gpu's CPU-side logic: the catalog lookup, nccl-tests' busbw formulas, the side-by-side table, the
verdict against the catalog; and on a machine without CUDA, the clear "no CUDA device" answer."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bench import gpu
from provision.facts.nccl_tests import parse_nccl_tests
from tests.conftest import ROOT

pytestmark = pytest.mark.fast


def test_device_names_map_to_the_catalog() -> None:
    assert gpu.catalog_model("NVIDIA H100 80GB HBM3").name == "H100-SXM-80GB"
    assert gpu.catalog_model("NVIDIA A100-SXM4-80GB").name == "A100-SXM4-80GB"
    assert gpu.catalog_model("NVIDIA GeForce RTX 4090") is None


def test_busbw_follows_nccl_tests() -> None:
    # the superbench A100 row at 8 GiB: 63896 us, algbw 134.44, busbw 235.26 over 8 ranks
    assert gpu.busbw("all_reduce", 8 * 2**30, 63896e-6, 8) == pytest.approx(235.26, abs=0.01)
    assert gpu.busbw("all_gather", 8 * 2**30, 63896e-6, 8) == pytest.approx(117.63, abs=0.01)


def test_sizes_are_powers_of_four_from_32_kib() -> None:
    assert gpu.sizes(True) == [32 * 2**10, 128 * 2**10, 512 * 2**10, 2 * 2**20, 8 * 2**20, 32 * 2**20, 128 * 2**20]
    assert gpu.sizes(False)[-1] == 2 * 2**30


def test_side_by_side_with_nccl_tests() -> None:
    table = json.loads((ROOT / "tests" / "facts" / "nccl_all_reduce_perf" / "a100_public_points.json").read_text())
    reference = parse_nccl_tests(table["output"])
    rows = gpu.side_by_side({8 * 2**20: 104.5, 3 * 2**20: 50.0}, reference)
    assert rows == [{"bytes": 3 * 2**20, "ours_gbps": 50.0, "nccl_tests_gbps": None, "ratio": None},
                    {"bytes": 8 * 2**20, "ours_gbps": 104.5, "nccl_tests_gbps": 110.0, "ratio": 0.95}]


def test_verdict_against_the_catalog() -> None:
    model = gpu.catalog_model("NVIDIA H100 80GB HBM3")
    healthy = [{"tflops": 794.5, "memory_gbps": 3010.0}] * 8
    verdict = gpu.judge(model, healthy, {"all_reduce": {4 * 2**30: 369.0}}, 8)
    assert verdict["matmul_ok"] and verdict["copy_ok"] and verdict["allreduce_ok"]
    assert verdict["matmul_fraction_of_peak"] == pytest.approx(0.803, abs=0.001)
    half = gpu.judge(model, [*healthy[:7], {"tflops": 397.0, "memory_gbps": 3010.0}], {}, 8)
    assert not half["matmul_ok"] and "allreduce_ok" not in half


@pytest.mark.slow  # the bench as a process (torch's import): the module's pure tests stay fast
def test_without_cuda_it_says_so() -> None:
    done = subprocess.run([sys.executable, "-m", "bench.gpu", "--json"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0
    assert "no CUDA device" in done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == {"bench": "gpu", "cuda": False, "reason": "no CUDA device"}
