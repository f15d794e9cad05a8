#!/usr/bin/python
"""Ansible module: a systemd unit enabled and active, through systemctl (daemon-reload when asked)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: unit_state
short_description: Enable and start a systemd unit, idempotently
description:
  - One C(systemctl show) reads whether the unit is enabled and active; C(enable --now), C(enable) or
    C(start) does what is missing (C(daemon-reload) first when asked). A converged unit costs one systemctl.
    Supports check mode.
options:
  name:
    description: Unit name without C(.service).
    type: str
    required: true
  enabled:
    description: Enabled at boot.
    type: bool
    default: true
  started:
    description: Started now (a oneshot unit runs its command).
    type: bool
    default: true
  daemon_reload:
    description: Run C(systemctl daemon-reload) first (after a unit file changed).
    type: bool
    default: false
author: provision
"""

EXAMPLES = r"""
- name: Persistence daemon
  unit_state:
    name: nvidia-persistenced
"""

RETURN = r"""
enabled:
  description: Whether the unit is enabled afterwards.
  returned: always
  type: bool
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

#: ``UnitFileState`` values for which ``systemctl is-enabled`` exits 0 (the unit starts at boot or with another).
ENABLED = {"enabled", "enabled-runtime", "static", "indirect", "alias", "generated", "transient"}
#: ``ActiveState`` values for which ``systemctl is-active`` exits 0.
ACTIVE = {"active", "reloading"}


def unit_properties(show: str) -> dict[str, str]:
    """``systemctl show --property=...``: one ``Name=value`` a line, in systemd's order, not the asked one."""
    return dict(line.split("=", 1) for line in show.splitlines() if "=" in line)


def actions_for(properties: dict[str, str], *, enabled: bool, started: bool) -> list[str]:
    """The systemctl command (without the unit) that brings the unit where it is wanted, or none."""
    enable = enabled and properties.get("UnitFileState", "") not in ENABLED
    start = started and properties.get("ActiveState", "") not in ACTIVE
    if enable and start:
        return ["enable", "--now"]
    return ["enable"] if enable else ["start"] if start else []


def main() -> None:
    module = AnsibleModule(
        argument_spec={"name": {"type": "str", "required": True}, "enabled": {"type": "bool", "default": True},
                       "started": {"type": "bool", "default": True},
                       "daemon_reload": {"type": "bool", "default": False}},
        supports_check_mode=True,
    )
    name = module.params["name"]
    if module.params["daemon_reload"] and not module.check_mode:
        module.run_command(["systemctl", "daemon-reload"], check_rc=True)
    rc, out, err = module.run_command(["systemctl", "show", "--property=LoadState,UnitFileState,ActiveState", name])
    if rc != 0:
        module.fail_json(msg=f"systemctl show {name} failed: {(err or out).strip()}")
    properties = unit_properties(out)
    action = actions_for(properties, enabled=module.params["enabled"], started=module.params["started"])
    was_enabled = properties.get("UnitFileState", "") in ENABLED
    if module.check_mode or not action:
        module.exit_json(changed=bool(action), actions=action, enabled=was_enabled or "enable" in action)
    rc, out, err = module.run_command(["systemctl", *action, name])
    if rc != 0:
        module.fail_json(msg=f"systemctl {' '.join(action)} {name} failed: {(err or out).strip()}", actions=action)
    module.exit_json(changed=True, actions=action, enabled=was_enabled or "enable" in action)


if __name__ == "__main__":
    main()
