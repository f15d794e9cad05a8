"""The silence rule for what a person hands the tool (issue 51): every command's evidence option, walked.

``tests/facts/test_silence.py`` walks the facts a host is asked for; this walks the files an operator gives a command.
For each evidence option of each command (found by walking the command line, so a new option without cases fails
here) four files that cannot be evidence are handed over alone: an empty file, a binary one, a good file cut in
the middle of a line, and a file of another tool's format. None may end as health: a file of which nothing was
understood is refused (exit 2) naming the file; a file partly understood is read, and the command says how much of
it was not (never a notice above "No suspect cables.").

The good files are our own, written by the simulator's writers in the real formats: UFM's event.log, an
``ibnetdiscover`` dump, ``perfquery -x`` snapshots, a syslog line, a netdev map, a GUID map, a baseline export.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import click
import pytest

from tests.conftest import run_cli

pytestmark = pytest.mark.fast

#: Path parameters that are not evidence, and why (each is checked elsewhere).
NOT_EVIDENCE = {
    "spec": "the spec: its loader and fuzzers (tests/test_spec*.py) refuse what it cannot read",
    "--spec": "the spec, as above",
    "files": "`validate`'s specs, as above",
    "--state-dir": "where state is kept, not read as evidence",
    "--output": "a file the command writes",
    "--textfile": "a folder the command writes",
    "--actions": "a folder the command writes",
    "export file": "the file `baseline export` writes",
    "--logs": "a failed job's folder of logs: triage says inconclusive (exit 1) when it recognises nothing, and "
              "lists the files it could not read (tests/triage/test_triage.py walks empty, binary and foreign folders)",
}


def _path_params(command: click.Command, prefix: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    """(command path, parameter name) for every file or folder parameter of the command line."""
    if isinstance(command, click.Group):
        return [found for name, sub in sorted(command.commands.items()) for found in _path_params(sub, (*prefix, name))]
    return [(" ".join(prefix), max(param.opts, key=len)) for param in command.params
            if isinstance(param.type, click.Path)]


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Good files of each format for the example's simulated fabric (our own, from the simulator's writers)."""
    from provision.sim import fabric as sim_fabric
    from provision.sim import ufm
    from provision.spec import load_spec
    from tests.conftest import example_text

    directory = tmp_path_factory.mktemp("evidence")
    spec = directory / "sim-cluster.yaml"
    spec.write_text(example_text())
    loaded = load_spec(spec)
    dump = sim_fabric.write_dump(loaded, [], directory / "fabric")
    ufm.write_history(loaded, [{"kind": "flapping_cable", "layer": "fabric", "target": "leaf-su02-r3/5",
                                "params": {"flaps_per_hour": 4}}], directory / "fabric")
    syslog = directory / "syslog"
    syslog.write_text("Nov 28 01:12:09 sim01 kernel: [  812.402113] mlx5_core 0000:1a:00.0 ibp26s0: Link up\n"
                      "Nov 28 01:12:10 sim01 systemd[1]: Started Session 4 of user root.\n")
    netdev = directory / "netdev.map"
    netdev.write_text("# host netdev hca\n* ibp26s0 mlx5_0\n")
    guids = directory / "guids.map"
    guids.write_text("0x0002c90300000001 \"sim01 mlx5_0\"\n")
    results = directory / "results.json"
    results.write_text(json.dumps({"routing": "dmodk", "tests": [
        {"flows": [["sim01/mlx5_0", "sim02/mlx5_0"]], "passed": True}]}))
    return {"spec": spec, "events": directory / "fabric" / "ufm" / "event.log", "observed": dump,
            "counters": directory / "fabric" / "counters" / "start", "syslog": syslog, "netdev": netdev,
            "guids": guids, "results": results}


Invocation = Callable[[dict[str, Path], Path], list[str]]

#: (command, option) -> the command line that hands ``bad`` to that option alone (other inputs good), and the
#: good file of its own format (cut for the truncated case; None where the format is a folder or JSON).
CASES: dict[tuple[str, str], tuple[Invocation, str | None]] = {
    ("topology flaps", "--events"): (lambda g, bad: ["topology", "flaps", str(g["spec"]), "--events", str(bad)],
                                     "events"),
    ("topology flaps", "--syslog"): (lambda g, bad: ["topology", "flaps", str(g["spec"]), "--syslog", str(bad),
                                                     "--year", "2026", "--netdev-map", str(g["netdev"])], "syslog"),
    ("topology flaps", "--counters"): (lambda g, bad: ["topology", "flaps", str(g["spec"]), "--counters", str(bad),
                                                       "--counters", str(g["counters"])], None),
    ("topology flaps", "--results"): (lambda g, bad: ["topology", "flaps", str(g["spec"]), "--results", str(bad)],
                                      "results"),
    ("topology flaps", "--observed"): (lambda g, bad: ["topology", "flaps", str(g["spec"]), "--events",
                                                       str(g["events"]), "--observed", str(bad)], "observed"),
    ("topology flaps", "--netdev-map"): (lambda g, bad: ["topology", "flaps", str(g["spec"]), "--syslog",
                                                         str(g["syslog"]), "--year", "2026", "--netdev-map",
                                                         str(bad)], "netdev"),
    ("topology flaps", "--design"): (lambda g, bad: ["topology", "flaps", "--design", str(bad), "--events",
                                                     str(g["events"])], None),
    ("topology audit", "--observed"): (lambda g, bad: ["topology", "audit", str(g["spec"]), "--observed", str(bad)],
                                       "observed"),
    ("topology audit", "--design"): (lambda g, bad: ["topology", "audit", "--design", str(bad), "--observed",
                                                     str(g["observed"])], None),
    ("topology audit", "--baseline"): (lambda g, bad: ["topology", "audit", str(g["spec"]), "--observed",
                                                       str(g["observed"]), "--baseline", str(bad)], "observed"),
    ("topology audit", "--guid-map"): (lambda g, bad: ["topology", "audit", str(g["spec"]), "--observed",
                                                       str(g["observed"]), "--guid-map", str(bad)], "guids"),
    ("topology draw", "--observed"): (lambda g, bad: ["topology", "draw", str(g["spec"]), "--observed", str(bad),
                                                      "--output", str(bad.parent / "fabric.svg")], "observed"),
    ("baseline import", "file"): (lambda g, bad: ["baseline", "import", str(bad), "--spec", str(g["spec"]),
                                                  "--state-dir", str(bad.parent / "state")], None),
    ("node-check", "--file"): (lambda g, bad: ["node-check", "--file", str(bad)], None),
    ("triage", "--hosts"): (lambda g, bad: ["triage", "--logs", str(bad.parent), "--hosts", str(bad)], None),
}

#: Words a command uses for "found nothing wrong": never the answer to a file nothing could read.
HEALTHY = ("No suspect cables", "No problems", "every designed cable is in place")


def test_every_evidence_option_of_every_command_has_cases() -> None:
    from provision.cli import cli

    unclassified = [(command, name) for command, name in _path_params(cli)
                    if (command, name) not in CASES and name not in NOT_EVIDENCE
                    and f"{command.split()[-1]} {name}" not in NOT_EVIDENCE]
    assert not unclassified, f"evidence options with no cases in {__name__}.CASES: {unclassified}"
    stale = [key for key in CASES if key not in set(_path_params(cli))]
    assert not stale, f"cases for options that are gone: {stale}"


#: UFM events as syslog forwards them (issue 51): the foreign file for every reader but the syslog's, which
#: reads them as the syslog lines they are; it gets UFM's own event.log instead.
UFM_AS_SYSLOG = (b"Nov 28 01:02:03 ufm01 event: [112] MINOR [Hardware] Switch [leaf-su01-r1 / 5] Link Downed "
                 b"counter delta threshold exceeded\n") * 3


def _bad_files(directory: Path, own: Path | None, foreign: bytes) -> dict[str, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    files = {"empty": b"", "binary": bytes(range(256)) * 8, "foreign": foreign}
    if own is not None and own.is_file():  # cut in the middle of a line, two fifths of the way in
        text = own.read_bytes()
        cut = max(1, len(text) * 2 // 5)
        while cut < len(text) and text[cut - 1:cut + 1].count(b"\n"):
            cut += 1
        files["truncated"] = text[:cut]
    written = {}
    for kind, content in files.items():
        path = directory / f"{kind}.in"
        path.write_bytes(content)
        written[kind] = path
    return written


@pytest.mark.parametrize("key", sorted(CASES), ids=lambda key: f"{key[0]} {key[1]}")
def test_no_unreadable_evidence_ends_as_health(key: tuple[str, str], good: dict[str, Path], tmp_path: Path) -> None:
    invocation, own = CASES[key]
    foreign = good["events"].read_bytes() if key[1] == "--syslog" else UFM_AS_SYSLOG
    for kind, bad in _bad_files(tmp_path / "bad", good[own] if own else None, foreign).items():
        result = run_cli(*invocation(good, bad), cwd=tmp_path)
        said = result.stdout + result.stderr
        assert not any(words in said for words in HEALTHY) or result.returncode == 2, (kind, said[-2000:])
        if kind == "truncated":  # partly understood: read, and the command says how much was not
            assert result.returncode == 2 or "not understood" in said, (kind, result.returncode, said[-2000:])
        else:  # nothing understood: refused, the file named
            assert result.returncode == REFUSED.get(key, 2), (kind, result.returncode, said[-2000:])
            assert str(bad) in said or bad.name in said, (kind, said[-2000:])


#: Exit statuses other than 2 for "nothing could be read": node-check speaks Nagios, where a check that could not be
#: made is UNKNOWN (3), the state Slurm's health check and NHC read as "not known", never as a drain (CRITICAL, 2).
REFUSED = {("node-check", "--file"): 3}


def test_ufm_events_in_a_syslog_form_are_refused_and_in_event_log_form_read(good: dict[str, Path],
                                                                            tmp_path: Path) -> None:
    """Issue 51's case: the same UFM events, as event.log writes them and as UFM forwards them to syslog (the
    [112] threshold form, and a raw-data [329] record). The event.log is read; the syslog form, of which the
    event.log reader understands nothing, is refused naming the file (it used to end in "No suspect cables.")."""
    from provision.network.view import view_of_spec
    from provision.sim.ufm import EventWriter
    from provision.spec import load_fabric_spec

    fabric = view_of_spec(load_fabric_spec(good["spec"])).fabric
    cable = next(cable for cable in fabric.cables() if cable.a[0].startswith("leaf") or cable.b[0].startswith("leaf"))
    writer = EventWriter([])
    for flap in range(8):
        writer.link_down(fabric, 1_790_000_000.0 + flap * 400, cable)
    native = tmp_path / "event.log"
    native.write_text(writer.text())
    forwarded = tmp_path / "ufm-syslog.log"
    forwarded.write_text("".join(
        f"Nov 28 01:{minute:02d}:03 ufm01 UFM[2212]: {line.split(' ', 2)[2]}\n"
        for minute, line in enumerate(native.read_text().splitlines())))
    read = run_cli("topology", "flaps", str(good["spec"]), "--events", str(native), "--json", cwd=tmp_path)
    assert read.returncode == 1, read.stderr
    report = json.loads(read.stdout)
    assert [row["class"] for row in report["suspects"]] == ["flapping"]
    assert report["readings"][0]["not_understood"] == 0
    refused = run_cli("topology", "flaps", str(good["spec"]), "--events", str(forwarded), cwd=tmp_path)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert str(forwarded) in refused.stderr and "UFM event.log lines" in refused.stderr
    assert "No suspect cables" not in refused.stdout
