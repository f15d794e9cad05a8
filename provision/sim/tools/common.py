"""Shared plumbing of the tool stand-ins: errors, and refusing what is not simulated."""

from __future__ import annotations

import os
from typing import Any, NoReturn

#: The file a host's root holds once it is built (see ``provision.sim.host``): a stand-in finding it needs
#: nothing of the builder.
READY = ".materialized"


class ToolError(Exception):
    """Ends a stand-in with ``message`` on stderr and a non-zero exit, as the real tool would."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


def not_simulated(tool: str, detail: str = "") -> NoReturn:
    """An option or command the simulator does not model must fail loudly, never succeed silently."""
    suffix = f" {detail}" if detail else ""
    raise ToolError(f"not simulated: {tool}{suffix}", 64)


def privileged() -> bool:
    """Whether the stand-in runs as root. A simulated host refuses an unprivileged user what a real one refuses
    (kernel.dmesg_restrict, config space beyond the first 64 bytes, umad devices), with the real tools' words."""
    return os.geteuid() == 0


def service_active(state: dict[str, Any], unit: str) -> bool:
    """Whether the host's systemd unit runs now (``systemctl start`` sets it; a boot or a crash clears it)."""
    return bool(state.get("services", {}).get(unit, {}).get("active"))
