"""Progress as events happen: one line per event when the output is not a terminal (a CI log, ``make demo >
log``), so a seven-minute run is never silent; on a terminal the phase bars of ``lifecycle`` stay.

A line is ``HH:MM:SS  host  phase/stage  outcome  detail``. ``-v`` adds every Ansible task of every host.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from provision.cli.common import err


def _clock(event: dict[str, Any]) -> str:
    try:
        return datetime.fromisoformat(event["ts"]).strftime("%H:%M:%S")
    except (KeyError, ValueError):
        return "--:--:--"


def line_for(event: dict[str, Any], *, verbose: bool = False) -> str | None:
    """The progress line an event deserves, or None (pure: tested on recorded events)."""
    name, when = event.get("event", ""), _clock(event)
    if name == "phase.started":
        return f"{when}  -  {event['phase']}  started"
    if name == "phase.finished":
        return f"{when}  -  {event['phase']}  finished  {event.get('summary', '')}"
    if name == "phase.stopped":
        return f"{when}  -  {event['phase']}  STOPPED  {event.get('reason', '')}"
    if name == "provision.node":
        if event.get("passed"):
            return f"{when}  {event['node']}  provision  ok  {event.get('changed', 0)} task(s) changed"
        if event.get("stopped"):
            return f"{when}  {event['node']}  provision  not finished  {event.get('message')}"
        return f"{when}  {event['node']}  provision  FAILED  {event.get('failed_task')}: {event.get('message')}"
    if name == "burnin.stage.started":
        return f"{when}  -  burnin/{event['stage']}  started on {len(event.get('nodes', []))} node(s)"
    if name == "burnin.node":
        if event.get("passed"):
            return f"{when}  {event['node']}  burnin/{event['stage']}  passed"
        return f"{when}  {event['node']}  burnin/{event['stage']}  FAILED  {event.get('check')}: {event.get('reason')}"
    if name == "burnin.systemic":
        return f"{when}  -  burnin/{event['stage']}  SYSTEMIC  {len(event.get('failing', []))} node(s) failed"
    if name == "task" and verbose:
        return f"{when}  {event['host']}  task  {event['outcome']}  {event['task']}"
    if name == "sink.slurm":
        if event.get("pending"):
            return f"{when}  -  slurm  SYNC PENDING  {event.get('error')}"
        held = ", ".join(f"{node} ({reason})" for node, reason in sorted((event.get("held_by_admin") or {}).items()))
        return (f"{when}  -  slurm  synced  {len(event.get('actions', []))} change(s)"
                + (f"; left drained by an administrator: {held}" if held else ""))
    if name == "run.finished":
        return f"{when}  -  run  {event.get('status')}  exit {event.get('exit_code')}"
    return None


def event_printer(*, verbose: bool) -> Callable[[dict[str, Any]], None]:
    def show(event: dict[str, Any]) -> None:
        text = line_for(event, verbose=verbose)
        if text is not None:
            err.print(text, markup=False, highlight=False)
    return show
