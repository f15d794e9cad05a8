"""The ``provision`` command line: a package of thin command modules.

Each command parses its arguments, calls one service function and renders the answer; mutating commands
run inside :func:`provision.run.context.mutating_run`. Exit codes are a contract for scripts and CI (see
:mod:`provision.errors`): 0 success; 1 the run worked but found problems; 2 bad usage, a bad spec or a
refusal before anything changed; 3 an internal error, with the run directory named; 130 interrupted.
Read commands take ``--json``; humans get tables.
"""

from __future__ import annotations

import sys
import traceback

import click

from provision import __version__
from provision.cli import audit, cables  # noqa: F401  (they add their commands to the topology group)
from provision.cli.baseline import baseline_group
from provision.cli.common import err
from provision.cli.history import history_command, runs_command
from provision.cli.hostlists import hostlist_group
from provision.cli.lifecycle import apply, burnin, plan, status
from provision.cli.metrics import metrics_command
from provision.cli.nodecheck import node_check_command
from provision.cli.operator import admit, drain, quarantine, return_command
from provision.cli.power import power_group
from provision.cli.report import report_command
from provision.cli.simulation import sim
from provision.cli.slurm import slurm_group
from provision.cli.specs import validate
from provision.cli.topology import topology
from provision.cli.triage import triage_command
from provision.cli.watch import watch_command
from provision.errors import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, Refusal
from provision.run import context as run_context
from provision.sinks import dispatch as sinks
from provision.spec import SpecError
from topology.hostlist import HostlistError


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="provision")
def cli() -> None:
    """Turn a delivery of bare-metal GPU servers into a healthy, admitted cluster."""


for command in (validate, plan, apply, burnin, status, history_command, runs_command, admit, quarantine, drain,
                return_command, sim, topology, hostlist_group, report_command, metrics_command,
                slurm_group, node_check_command, power_group, baseline_group, watch_command,
                triage_command):
    cli.add_command(command)


def main(argv: list[str] | None = None) -> int:
    """Entry point: map every outcome to the documented exit codes."""
    run_context.forget()
    run_context.on_run_end(sinks.after_run)
    try:
        code = cli.main(args=argv, prog_name="provision", standalone_mode=False)
        return code if isinstance(code, int) else EXIT_OK
    except SpecError as error:
        for issue in error.issues:
            err.print(str(issue), markup=False)
        return EXIT_USAGE
    except (Refusal, HostlistError) as error:
        err.print(f"provision: {error}", markup=False)
        return EXIT_USAGE
    except click.exceptions.Exit as done:
        return done.exit_code
    except click.ClickException as error:
        error.show()
        return EXIT_USAGE
    except (click.exceptions.Abort, KeyboardInterrupt):
        run = run_context.latest()
        where = f" (run record: {run.path})" if run else ""
        err.print(f"provision: interrupted{where}", markup=False)
        return EXIT_INTERRUPTED
    except Exception as error:  # the contract: never a bare traceback, always exit 3
        return _internal_error(error)


def _internal_error(error: Exception) -> int:
    details = traceback.format_exc()
    run = run_context.latest()
    if run is not None:
        (run.path / "error.txt").write_text(details)
        err.print(f"provision: internal error: {error!r}; details in {run.path / 'error.txt'}", markup=False)
    else:
        err.print(f"provision: internal error: {error!r}", markup=False)
        err.print(details, markup=False)
    return EXIT_INTERNAL


def entry() -> None:
    sys.exit(main())
