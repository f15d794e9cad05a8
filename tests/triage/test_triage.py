"""``provision triage --logs DIR`` (issue 54, item 4): which node killed a failed job, on our own logs in the real
formats (tests/data/triage/README.md names each) and on the real failed jobs of ../shared/fixtures/public/failed_jobs
where present, each with the answer its source gives; nothing recognised is "inconclusive", never healthy."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import SHARED_FIXTURES, run_cli

pytestmark = pytest.mark.fast
OURS = Path(__file__).parents[1] / "data" / "triage"
FAILED_JOBS = SHARED_FIXTURES / "public" / "failed_jobs"


def _triage(folder: Path, *extra: str) -> tuple[int, dict]:
    hosts = folder / "hosts"
    result = run_cli("triage", "--logs", str(folder), *(("--hosts", str(hosts)) if hosts.exists() else ()), "--json",
                     *extra)
    assert result.returncode in (0, 1), result.stdout + result.stderr
    return result.returncode, json.loads(result.stdout)


def _culprits(found: dict) -> dict[str, str]:
    return {culprit["who"]: culprit["strength"] for culprit in found["culprits"]}


@pytest.mark.parametrize(("case", "expected"), [
    ("torchrun_root_cause", {"gpu-b07": "likely"}),
    ("watchdog_one_rank_behind", {"rank 2": "likely"}),
    ("refused_peer", {"gpu-a03": "likely"}),
    ("ib_errors_one_peer", {"gpu-c09": "likely"}),
    ("srun_node_failure", {"gpu-d14": "strong"}),  # not gpu-d03, whose slurmstepd printed the cancellation
    ("xid_in_a_nodes_dmesg", {"gpu-e05": "strong"}),
])
def test_the_culprit_is_named(case: str, expected: dict[str, str]) -> None:
    code, found = _triage(OURS / case)
    assert code == 0 and _culprits(found) == expected, found


def test_every_rank_at_one_call_is_no_single_nodes_fault() -> None:
    code, found = _triage(OURS / "watchdog_all_at_one_call")
    assert code == 0 and found["culprits"] == [] and found["conclusive"], found
    assert found["nobody"] and "same collective (1067) with none behind" in found["nobody"][0]
    assert found["requeue"].startswith("Do not requeue as it is")


def test_a_merged_log_names_the_failure_but_not_its_host() -> None:
    code, found = _triage(OURS / "xid_in_a_nodes_dmesg")
    assert code == 0
    assert any("unspecified launch failure" in line for line in found["unattributed"]), found


def test_one_side_of_a_failed_link_is_the_links_not_the_nodes(tmp_path: Path) -> None:
    (tmp_path / "nccl.log").write_text((OURS / "ib_errors_one_peer" / "nccl.log").read_text().splitlines()[0] + "\n")
    code, found = _triage(tmp_path)
    assert code == 0 and found["culprits"] == [] and len(found["links"]) == 1
    assert found["links"][0].startswith("the InfiniBand path between gpu-c01 and 10.40.2.9")


@pytest.mark.parametrize("content", [b"", bytes(range(256)) * 8, b"iteration 100 | loss 2.1\n" * 50],
                         ids=["empty", "binary", "a healthy-looking log"])
def test_nothing_recognised_is_never_a_clean_bill(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "job.out").write_bytes(content)
    result = run_cli("triage", "--logs", str(tmp_path))
    said = result.stdout + result.stderr
    if content.startswith(b"\x00"):  # no readable file at all: refused, naming it
        assert result.returncode == 2 and "job.out: binary" in said, said
    else:
        assert result.returncode == 1 and "Inconclusive" in said and "not known to be healthy" in said, said


def test_a_hosts_file_that_is_not_one_is_refused_with_its_line(tmp_path: Path) -> None:
    (tmp_path / "job.out").write_text("srun: error: Node failure on gpu-d14\n")
    (tmp_path / "map").write_text("10.40.1.15 gpu-a01\ngpu-a02 10.40.1.16\n")
    result = run_cli("triage", "--logs", str(tmp_path), "--hosts", str(tmp_path / "map"))
    assert result.returncode == 2 and "map:2: expected '<address> <host>'" in result.stderr, result.stderr


# --- real failed jobs (../shared/fixtures/public/failed_jobs), each against its source's conclusion ---

needs_jobs = pytest.mark.skipif(not FAILED_JOBS.is_dir(), reason="../shared/fixtures/public/failed_jobs absent")


def _real(case: str, tmp_path: Path, hosts: str = "") -> tuple[int, dict]:
    """The job's files without the fixture's own SOURCE.md (the write-up, not the job's output)."""
    folder = tmp_path / case
    shutil.copytree(FAILED_JOBS / case, folder, ignore=shutil.ignore_patterns("SOURCE.md"))
    if hosts:
        (folder / "hosts").write_text(hosts)
    return _triage(folder)


@needs_jobs
def test_real_node_failure_names_the_lost_node_not_the_reporter(tmp_path: Path) -> None:
    code, found = _real("m4_jz_srun_node_failure_iam37", tmp_path)
    assert code == 0 and _culprits(found) == {"jean-zay-iam37": "strong"}, found


@needs_jobs
def test_real_refused_connection_names_the_refusing_peer(tmp_path: Path) -> None:
    """The operator's own reverse lookup (operator_nslookup.txt) gave r10i6n5 for 10.148.3.247."""
    code, found = _real("jz_nccl_connect_refused_r10i6n5", tmp_path, hosts="10.148.3.247 r10i6n5.ib0.xa.idris.fr\n")
    assert code == 0 and _culprits(found) == {"r10i6n5": "likely"}, found


@needs_jobs
def test_real_ib_error_between_two_cloud_nodes_blames_neither(tmp_path: Path) -> None:
    """The source's conclusion: the two VMs were not placed on one IB fabric; neither node is faulty."""
    code, found = _real("azure_ib_not_connected_error12", tmp_path)
    assert code == 0 and found["culprits"] == [] and "node-2 and 10.2.0.5" in found["links"][0], found


@needs_jobs
@pytest.mark.parametrize("case", ["bloom_tr1_13b_ecc_then_oom_same_node",
                                  "m4_jz_node_unresponsive_iam15_cuda_unknown_error"])
def test_real_merged_logs_say_what_failed_but_name_no_host(case: str, tmp_path: Path) -> None:
    """Both sources: the merged output has no host prefixes, so the failing node cannot be named from it."""
    code, found = _real(case, tmp_path)
    assert code == 1 and found["culprits"] == [] and found["unattributed"], found


@needs_jobs
@pytest.mark.parametrize("case", ["bloom176b_eval_hang_dataloader_deadlock", "m4_jz_gpfs_freeze_rank0_hang"])
def test_real_hangs_with_no_failure_line_are_inconclusive(case: str, tmp_path: Path) -> None:
    """A DataLoader deadlock and a GPFS freeze: no node failed; nothing is blamed, and nothing is called healthy."""
    code, found = _real(case, tmp_path)
    assert code == 1 and found["culprits"] == [] and not found["conclusive"], found


def test_the_flight_recorder_names_the_rank_the_others_waited_for() -> None:
    code, found = _triage(OURS / "flight_recorder")
    assert code == 0 and _culprits(found) == {"rank 3": "likely"}, found
    assert "never reached nccl:all_reduce #8 of default_pg that ranks 0, 1, 2 wait in" in found["culprits"][0]["why"][0]


def test_a_dump_that_asks_for_code_is_refused_not_run(tmp_path: Path) -> None:
    """A pickle can run code when loaded: one that names any global (here os.system) is refused unread."""
    import pickle

    class Payload:
        def __reduce__(self) -> tuple:
            import os

            return (os.system, ("touch " + str(tmp_path / "ran"),))

    (tmp_path / "_dump_0").write_bytes(pickle.dumps({"entries": [Payload()], "pg_config": {}}, protocol=2))
    result = run_cli("triage", "--logs", str(tmp_path))
    assert result.returncode == 2 and "refused posix.system" in result.stderr, result.stdout + result.stderr
    assert not (tmp_path / "ran").exists()


@needs_jobs
@pytest.mark.parametrize(("case", "ranks"), [
    # fault_injection.log: ranks 12 and 14 (GPU error); NVIDIA's own analyzer names only 12 at its HEAD
    ("nvrx_fr_injected_gpu_error_1st", {"rank 12"}),
    ("nvrx_fr_injected_lock_gil_2nd", {"rank 10", "rank 15"}),  # fault_injection.log: 10 and 15 hold the GIL
])
def test_real_flight_recorder_dumps_name_the_injected_ranks(case: str, ranks: set[str]) -> None:
    code, found = _triage(FAILED_JOBS / case / "fr_dumps")
    assert code == 0 and set(_culprits(found)) == ranks, found
