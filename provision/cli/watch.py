"""``provision watch SPEC``: the admitted fleet watched after its burn-in, a pass at a time, each a recorded run."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from types import FrameType

import click

from provision.cli.common import argv, emit_json, json_option, out, spec_argument, state_dir_of, state_dir_option
from provision.errors import EXIT_OK, EXIT_PROBLEMS
from provision.run.context import SpecIdentity, mutating_run
from provision.spec import LoadedSpec, load_spec
from provision.state.lifecycle import WATCH
from provision.watch.passes import PassResult, one_pass

#: The longest wait between passes: a watch asked to stop answers within a pass and this.
MAX_INTERVAL_S = 3600.0


@click.command(name="watch")
@spec_argument
@click.option("--once", is_flag=True, help="One pass, then exit (1 when Slurm could not be read).")
@click.option("--interval", "interval_s", type=click.FloatRange(1.0, MAX_INTERVAL_S), default=60.0,
              show_default=True, help="Seconds between passes.")
@click.option("--clear-breaker", is_flag=True,
              help="The operator has found the common cause: clear the tripped breaker, list what it held, exit.")
@state_dir_option
@json_option
def watch_command(spec: Path, once: bool, interval_s: float, clear_breaker: bool, state_dir: Path | None,
                  as_json: bool) -> int:
    """Read back what happened in Slurm since the last pass: a node node-check drained is quarantined with its
    check; an administrator's drain or resume is recorded as theirs. Follow the fabric's UFM events, syslogs
    and counters (watch.signals): a bad cable gets a ticket, its port disabled where the policy allows, and a
    node it cut off is taken out of service. Past watch.breaker (a share of the fleet quarantined within a
    window) it acts on no node until --clear-breaker. SIGTERM ends it between passes."""
    loaded = load_spec(spec)
    if loaded.spec.slurm is None:
        raise click.UsageError("the spec has no slurm section: there is nothing to watch yet")
    directory = state_dir_of(loaded, state_dir)
    if clear_breaker:
        return _clear(loaded, directory, as_json)
    stop = threading.Event()

    def ask_to_stop(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    previous = signal.signal(signal.SIGTERM, ask_to_stop)
    try:
        while True:
            with mutating_run(directory, WATCH, argv(), spec=SpecIdentity(loaded.path.resolve(), loaded.sha256),
                              wait_lock_s=interval_s) as run:
                result = one_pass(loaded, run, directory, now=time.time())
                run.note("watch.pass", result.as_dict())
                code = EXIT_PROBLEMS if result.problems else EXIT_OK
                run.conclude(code)
            _render(result, as_json)
            if once or stop.wait(interval_s):
                return code
    finally:
        signal.signal(signal.SIGTERM, previous)


def _clear(loaded: LoadedSpec, directory: Path, as_json: bool) -> int:
    """An operator's clearing of the breaker, in a recorded run of its own: what it held is listed (the nodes
    still drained in Slurm by node-check are read back by the next pass)."""
    with mutating_run(directory, WATCH, argv(), spec=SpecIdentity(loaded.path.resolve(), loaded.sha256)) as run:
        state = run.store.breaker()
        held = state["detail"].get("held", []) if state and state["tripped"] else []
        if state and state["tripped"]:
            run.store.set_breaker(tripped=False, detail={"cleared": True, "held": held, "was": state["detail"]},
                                  run_id=run.id)
        run.note("watch.breaker_cleared", {"was_tripped": bool(state and state["tripped"]), "held": held})
        run.conclude(EXIT_OK)
    if as_json:
        emit_json({"cleared": bool(state and state["tripped"]), "held": held})
    elif state and state["tripped"]:
        out.print(f"breaker cleared; it had held {len(held)} move(s): "
                  + ", ".join(f"{entry['node']} ({entry['reason']})" for entry in held), markup=False)
    else:
        out.print("the breaker was not tripped", markup=False)
    return EXIT_OK


def _render(result: PassResult, as_json: bool) -> None:
    if as_json:
        emit_json(result.as_dict())
        return
    reconciled = result.reconciled
    if reconciled.unreachable:
        out.print(f"Slurm unreachable: {reconciled.unreachable}; nothing read back this pass", markup=False)
    elif reconciled.pending:
        out.print("a sync to Slurm is pending: nothing read back until it has gone through", markup=False)
    elif not reconciled.moves and not reconciled.held:
        out.print("Slurm and the store agree.", markup=False)
    for move in reconciled.moves:
        by = f"the operator ({move.seen_operator}, seen in Slurm)" if move.seen_operator else "node-check"
        out.print(f"{move.node}: {move.target} by {by}: {move.reason}", markup=False)
    if result.signals is not None:
        read = sum(reading.lines for reading in result.signals.readings)
        suspects = result.signals.judgement.suspects
        out.print(f"fabric: {read} new line(s) or snapshot(s) read; "
                  + (f"{len(suspects)} suspect cable(s)" if suspects else "no suspect cable"), markup=False)
        for action in result.cables:
            done = [part for part in ("ticket written" if action.ticket else "",
                                      "port disabled" if action.disable else "", action.already) if part]
            out.print(f"  {action.cable}: {action.klass}" + (f" ({'; '.join(done)})" if done else ""), markup=False)
    for move in result.moves:
        out.print(f"{move.node}: {move.target} by the watch: {move.reason}", markup=False)
    _render_warnings_and_checks(result)
    for item in result.climbed:
        out.print(f"{item.node}: ladder {item.step or item.action}: {item.outcome} ({item.why})", markup=False)
    for problem in result.problems:
        out.print(f"problem: {problem}", markup=False)
    breaker = result.breaker or reconciled.breaker
    if breaker:
        held = [*reconciled.held, *result.held]
        out.print(f"breaker tripped: {breaker}; held: "
                  + (", ".join(f"{move.node} ({move.reason})" for move in held) or "nothing new this pass")
                  + "; clear with provision watch SPEC --clear-breaker once the cause is found", markup=False)


def _render_warnings_and_checks(result: PassResult) -> None:
    """What the pass forecast (warnings, no action) and how its revalidation jobs stand."""
    for row in result.forecasts:
        out.print(f"forecast: {row['node']} {row['component']}: its threshold in {row['hours']:.0f} h ({row['why']}); "
                  "a warning, no action", markup=False)
    if result.revalidation is not None:
        for end in result.revalidation.ended:
            out.print(f"{end.node}: revalidation job {end.job_id} {end.verdict} ({end.detail})", markup=False)
        for node, job_id in result.revalidation.submitted.items():
            out.print(f"{node}: revalidation job {job_id} submitted", markup=False)
