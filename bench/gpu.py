"""The GPU path on this machine's GPUs: the node stage's measurements and an NCCL collective sweep, judged.

Per GPU: bf16 matmul over the node stage's MAMF-style shape sweep (``fabric_tests.node_test``) and the device
copy, each against the GPU model's catalog figure. All GPUs: ``all_reduce`` and ``all_gather`` over NCCL from
32 KiB up (powers of 4), busbw by nccl-tests' formulas, against the catalog's 8-GPU ring figure; where
nccl-tests' ``all_reduce_perf`` is on PATH (or in ``$NCCL_TESTS_DIR``), it runs on the same GPUs in the same
run and each size is shown side by side with ours.

On a machine without CUDA it says so ("no CUDA device") and exits 0 with ``"cuda": false`` in its JSON: the
figures in docs/benchmarks.md then stay "not measured".

Run: python -m bench.gpu [--quick] --json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from provision.burnin.launch import free_port
from provision.burnin.records import BUS_FACTOR  # nccl-tests' factors, as the collectives stage uses them
from provision.catalog import GPU_MODELS, GpuModel
from provision.facts.nccl_tests import NcclTestReport, busbw_at, parse_nccl_tests
from provision.spec.thresholds import DEFAULT_INTRANODE_FRACTION, DEFAULT_MATMUL_EFFICIENCY, DEFAULT_MEMORY_EFFICIENCY


def catalog_model(device_name: str) -> GpuModel | None:
    """The catalog entry for what ``torch.cuda.get_device_name`` says (``NVIDIA H100 80GB HBM3`` -> H100)."""
    name = device_name.upper()
    for key, model in GPU_MODELS.items():
        family = key.split("-")[0]  # H100, H200, A100, B200
        if family in name:
            return model
    return None


def busbw(op: str, nbytes: int, seconds: float, ranks: int) -> float:
    """GB/s as nccl-tests prints it: algbw = bytes / time, busbw = algbw x factor(n)."""
    return nbytes / seconds / 1e9 * BUS_FACTOR[op](ranks)


def sizes(quick: bool) -> list[int]:
    top = 256 * 2**20 if quick else 4 * 2**30
    found, size = [], 32 * 2**10
    while size <= top:
        found.append(size)
        size *= 4
    return found


def side_by_side(ours: dict[int, float], reference: NcclTestReport | None) -> list[dict[str, Any]]:
    """One row per size: our all_reduce busbw, nccl-tests' at the same size, and ours / theirs."""
    rows = []
    for size, value in sorted(ours.items()):
        theirs = busbw_at(reference, size) if reference is not None else None
        rows.append({"bytes": size, "ours_gbps": round(value, 2), "nccl_tests_gbps": theirs,
                     "ratio": round(value / theirs, 3) if theirs else None})
    return rows


def judge(model: GpuModel | None, per_gpu: list[dict[str, Any]], sweep: dict[str, dict[int, float]],
          ranks: int) -> dict[str, Any]:
    """The node stage's figures against the catalog: the fraction of each figure reached, and pass/fail at the
    default efficiencies (provision/spec/thresholds.py)."""
    if model is None:
        return {"model": None, "note": "GPU model not in the catalog: figures recorded, not judged"}
    worst_tflops = min(gpu["tflops"] for gpu in per_gpu)
    worst_copy = min(gpu["memory_gbps"] for gpu in per_gpu)
    largest = max(sweep["all_reduce"]) if sweep.get("all_reduce") else None
    ring = sweep["all_reduce"][largest] if largest else None
    verdict = {
        "model": model.name,
        "matmul_fraction_of_peak": round(worst_tflops / model.bf16_dense_tflops, 3),
        "matmul_ok": worst_tflops >= model.bf16_dense_tflops * DEFAULT_MATMUL_EFFICIENCY,
        "copy_fraction_of_hbm": round(worst_copy / model.hbm_gbps, 3),
        "copy_ok": worst_copy >= model.hbm_gbps * DEFAULT_MEMORY_EFFICIENCY,
    }
    if ring is not None and ranks == 8:  # the catalog's ring figure is for 8 GPUs
        verdict.update(allreduce_fraction_of_ring=round(ring / model.ring_allreduce_busbw, 3),
                       allreduce_ok=ring >= model.ring_allreduce_busbw * DEFAULT_INTRANODE_FRACTION)
    return verdict


def _sweep_worker(rank: int, world: int, port: int, sizes_: list[int], iters: int, queue: Any) -> None:
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    results: dict[str, dict[int, float]] = {"all_reduce": {}, "all_gather": {}}
    for size in sizes_:
        tensor = torch.ones(size // 2, dtype=torch.bfloat16, device="cuda")
        gathered = torch.empty(size // 2 * world, dtype=torch.bfloat16, device="cuda")
        for op in ("all_reduce", "all_gather"):
            def call(op: str = op, tensor: Any = tensor, gathered: Any = gathered) -> None:
                if op == "all_reduce":
                    dist.all_reduce(tensor)
                else:
                    dist.all_gather_into_tensor(gathered, tensor)

            for _ in range(5):
                call()
            torch.cuda.synchronize()
            dist.barrier()
            started = time.perf_counter()
            for _ in range(iters):
                call()
            torch.cuda.synchronize()
            seconds = (time.perf_counter() - started) / iters
            # nccl-tests counts all_gather's bytes as the gathered buffer
            results[op][size] = busbw(op, size * (world if op == "all_gather" else 1), seconds, world)
    if rank == 0:
        queue.put(results)
    dist.destroy_process_group()


def _collective_sweep(world: int, sizes_: list[int], iters: int) -> dict[str, dict[int, float]]:
    import torch.multiprocessing as mp

    context = mp.get_context("spawn")
    queue = context.Queue()
    port = free_port()
    processes = [context.Process(target=_sweep_worker, args=(rank, world, port, sizes_, iters, queue))
                 for rank in range(world)]
    for process in processes:
        process.start()
    results = queue.get(timeout=600)
    for process in processes:
        process.join(timeout=60)
    return results


def _nccl_tests(world: int, sizes_: list[int]) -> NcclTestReport | None:
    directory = os.environ.get("NCCL_TESTS_DIR")
    binary = shutil.which("all_reduce_perf") or (str(Path(directory) / "all_reduce_perf") if directory else None)
    if not binary or not Path(binary).exists():
        return None
    command = [binary, "-b", str(sizes_[0]), "-e", str(sizes_[-1]), "-f", "4", "-g", str(world), "-n", "20"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    return parse_nccl_tests(done.stdout)


def run(quick: bool) -> dict[str, Any]:
    import torch

    if not torch.cuda.is_available():
        return {"bench": "gpu", "cuda": False, "reason": "no CUDA device"}
    from fabric_tests.node_test import _matmul, _memory_bandwidth

    world = torch.cuda.device_count()
    name = torch.cuda.get_device_name(0)
    per_gpu = []
    for index in range(world):
        device = torch.device("cuda", index)
        torch.cuda.set_device(device)
        matmul = _matmul(device, 4096 if quick else 8192, 10 if quick else 50, 3 if quick else 10, seed=1)
        per_gpu.append({"gpu": index, **{key: matmul[key] for key in ("tflops", "dtype", "shapes", "best_n",
                                                                      "tflops_by_n")},
                        "memory_gbps": _memory_bandwidth(device, 2**30 if quick else 4 * 2**30, 5)})
    sweep_sizes = sizes(quick)
    sweep = _collective_sweep(world, sweep_sizes, 10 if quick else 20) if world > 1 else {}
    reference = _nccl_tests(world, sweep_sizes) if world > 1 else None
    return {"bench": "gpu", "cuda": True, "device": name, "gpus": world, "torch": torch.__version__,
            "nccl": ".".join(map(str, torch.cuda.nccl.version())), "per_gpu": per_gpu,
            "sweep": {op: {str(size): round(value, 2) for size, value in values.items()}
                      for op, values in sweep.items()},
            "all_reduce_vs_nccl_tests": side_by_side(sweep.get("all_reduce", {}), reference),
            "nccl_tests": "ran" if reference is not None else "all_reduce_perf not found (PATH, $NCCL_TESTS_DIR)",
            "verdict": judge(catalog_model(name), per_gpu, sweep, world)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller shapes and sizes (about a minute)")
    parser.add_argument("--json", action="store_true", help="print one JSON object last")
    args = parser.parse_args(argv)
    result = run(args.quick)
    if not result["cuda"]:
        print("bench.gpu: no CUDA device on this machine; nothing measured (docs/benchmarks.md keeps "
              "'not measured')", file=sys.stderr)
    elif not args.json:
        for gpu in result["per_gpu"]:
            print(f"GPU {gpu['gpu']}: {gpu['tflops']:.0f} TFLOPS {gpu['dtype']} (n={gpu['best_n']}), "
                  f"copy {gpu['memory_gbps']:.0f} GB/s")
        for row in result["all_reduce_vs_nccl_tests"]:
            print(f"all_reduce {row['bytes']:>12} B: ours {row['ours_gbps']} GB/s, nccl-tests "
                  f"{row['nccl_tests_gbps']}, ratio {row['ratio']}")
    if args.json:
        print(json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
