"""Slurm's controller asked, never changed (``provision/hosts/slurmctl.py``): the slurm.conf a spec names is found
beside the spec, a spec without a slurm: section asks nothing of Slurm, and a controller that cannot be reached is
said so, never read as an empty cluster. (The reader against a real slurmctld: tests/triage/test_job_slurm.py and
tests/watch/test_week_slurm.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from provision.errors import UsageProblem
from provision.hosts.slurmctl import SlurmReader, SlurmUnreachable, reader_settings
from provision.spec import load_spec
from tests.simhelpers import write_spec


def test_the_conf_is_found_beside_the_spec_and_no_section_asks_nothing(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, [])
    with pytest.raises(UsageProblem, match="no slurm: section"):
        reader_settings(load_spec(spec))
    data = yaml.safe_load(spec.read_text())
    data["slurm"] = {"conf": "slurm/slurm.conf", "timeout_s": 7}
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    assert reader_settings(load_spec(spec)) == (tmp_path / "slurm" / "slurm.conf", 7.0)


@pytest.mark.slow  # scontrol tries the controller until its deadline
def test_a_controller_nobody_answers_for_is_unreachable_not_empty(tmp_path: Path) -> None:
    conf = tmp_path / "slurm.conf"  # a controller on a loopback port nothing listens on
    conf.write_text("ClusterName=nobody\nSlurmctldHost=localhost(127.0.0.1)\nSlurmctldPort=9\nAuthType=auth/none\n"
                    "NodeName=n1 CPUs=1 State=UNKNOWN\nPartitionName=p Nodes=n1 Default=YES\n")
    reader = SlurmReader(conf, 3.0)
    with pytest.raises(SlurmUnreachable):
        reader.jobs()
