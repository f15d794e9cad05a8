"""An operator's moves: ``admit``, ``quarantine``, ``drain`` and ``return`` HOSTLIST with a reason."""

from __future__ import annotations

from pathlib import Path

import click

from provision.cli.common import (
    argv,
    emit_json,
    json_option,
    out,
    spec_option,
    spec_or_state_dir,
    state_dir_option,
)
from provision.cli.render import print_sinks
from provision.errors import EXIT_OK
from provision.fleet import operator
from provision.state import NodeState, StateStore
from topology import hostlist


def _show(move: operator.Move, directory: Path, as_json: bool, line: str) -> int:
    store = StateStore.open_readonly(directory)
    assert store is not None  # the move has just written it
    with store:
        if as_json:
            emit_json({**move.as_dict(), "sinks": store.sink_status()})
            return EXIT_OK
        out.print(line, markup=False)
        print_sinks(store)
    return EXIT_OK


def _command(target: NodeState, help_text: str) -> click.Command:
    @click.argument("hosts", metavar="HOSTLIST")
    @click.option("--reason", required=True, help="Why; kept in the node's history.")
    @spec_option
    @state_dir_option
    @json_option
    def command(hosts: str, reason: str, spec: Path | None, state_dir: Path | None, as_json: bool) -> int:
        loaded, directory = spec_or_state_dir(spec, state_dir)
        move = operator.move_nodes(directory, target, hosts, reason, argv=argv(), spec=loaded)
        return _show(move, directory, as_json, f"{target.value}: {hostlist.compress(move.nodes)} ({reason})")

    command.__doc__ = help_text
    return click.command(name=operator.COMMANDS[target])(command)


admit = _command(NodeState.ADMITTED, "Admit nodes by hand (an operator's decision).")
quarantine = _command(NodeState.QUARANTINED, "Take nodes out of service for repair.")
drain = _command(NodeState.DRAINED, "Set nodes aside; the pipeline leaves them alone until an operator moves them.")


@click.command(name=operator.RETURN)
@click.argument("hosts", metavar="HOSTLIST")
@click.option("--reason", required=True, help="What was repaired (an RMA, a reseat); kept in the node's history.")
@spec_option
@state_dir_option
@json_option
def return_command(hosts: str, reason: str, spec: Path | None, state_dir: Path | None, as_json: bool) -> int:
    """Quarantined nodes back from repair: the next apply burns them in again, every stage."""
    loaded, directory = spec_or_state_dir(spec, state_dir)
    move = operator.return_nodes(directory, hosts, reason, argv=argv(), spec=loaded)
    return _show(move, directory, as_json, f"returned: {hostlist.compress(move.nodes)} ({reason}); the next apply "
                 "burns them in again, every stage")
