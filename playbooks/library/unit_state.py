#!/usr/bin/python
"""Ansible module: a systemd unit enabled and active, through systemctl (daemon-reload when asked)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: unit_state
short_description: Enable and start a systemd unit, idempotently
description:
  - Uses only C(systemctl is-enabled), C(is-active), C(enable), C(start) and C(daemon-reload).
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
    enabled = module.run_command(["systemctl", "is-enabled", name])[0] == 0
    active = module.run_command(["systemctl", "is-active", name])[0] == 0
    actions = []
    if module.params["enabled"] and not enabled:
        actions.append("enable")
    if module.params["started"] and not active:
        actions.append("start")
    if module.check_mode or not actions:
        module.exit_json(changed=bool(actions), actions=actions, enabled=enabled or "enable" in actions)
    for action in actions:
        rc, out, err = module.run_command(["systemctl", action, name])
        if rc != 0:
            module.fail_json(msg=f"systemctl {action} {name} failed: {(err or out).strip()}", actions=actions)
    module.exit_json(changed=True, actions=actions, enabled=True)


if __name__ == "__main__":
    main()
