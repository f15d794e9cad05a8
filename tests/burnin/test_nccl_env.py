"""What NCCL is told on the nodes: the rail HCAs exactly, the bootstrap interface toward the rendezvous address, and
the spec's own settings over both."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from fabric_tests.agent import interface_toward
from provision.burnin.launch import nccl_environment
from provision.spec import load_spec
from tests.simhelpers import write_spec

pytestmark = pytest.mark.fast


def test_the_rail_hcas_are_named_exactly_in_gpu_order(tmp_path: Path) -> None:
    loaded = load_spec(write_spec(tmp_path, [], hosts="sim[01-02]"))
    env = nccl_environment(loaded, loaded.nodes)
    # '=' is NCCL's exact match: mlx5_1 would otherwise also pick mlx5_10 and mlx5_11
    assert env["NCCL_IB_HCA"] == "=mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11"
    assert env["NCCL_DEBUG"] == "INFO" and env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"


def test_the_spec_wins_over_every_chosen_variable(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, [], hosts="sim[01-02]")
    data = yaml.safe_load(spec.read_text())
    data["burnin"]["nccl_env"] = {**data["burnin"]["nccl_env"], "NCCL_IB_HCA": "mlx5", "NCCL_SOCKET_IFNAME": "ib0"}
    spec.write_text(yaml.safe_dump(data))
    loaded = load_spec(spec)
    env = nccl_environment(loaded, loaded.nodes)
    assert env["NCCL_IB_HCA"] == "mlx5" and env["NCCL_SOCKET_IFNAME"] == "ib0"


def test_the_bootstrap_interface_is_the_one_toward_the_master() -> None:
    assert interface_toward("127.0.0.11") == "lo"


def test_perftest_counts_gpus_in_pci_order(tmp_path: Path) -> None:
    """ib_write_bw --use_cuda=N picks CUDA's GPU N: it must run with PCI bus order, as nvidia-smi numbers GPUs."""
    from fabric_tests.perftest import _Running

    tool = tmp_path / "ib_write_bw"
    tool.write_text('#!/bin/sh\necho "order=$CUDA_DEVICE_ORDER"\n')
    tool.chmod(0o755)
    _, stdout, _ = _Running(str(tool), {"device": "mlx5_0", "port": 18515, "args": ["--use_cuda=3"]}, 1).collect()
    assert stdout.strip() == "order=PCI_BUS_ID"
