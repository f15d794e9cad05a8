"""Kernel modules, services, the kernel log, disks and reboots of a simulated host.

``modprobe`` writes ``proc/modules`` and ``sys/module/<name>`` exactly where the
kernel would; loading nvidia-peermem registers the peer-memory client under
``sys/kernel/mm/memory_peers/nv_mem`` only when the (simulated) hardware and
stack allow it, so "loaded" and "registered" can differ as they do in the field.
A reboot forgets everything not made persistent: loaded modules not listed in
``etc/modules-load.d``, setpci changes, running services not enabled.
"""

from __future__ import annotations

# Every systemctl, modprobe and uname a play or a check runs is a fresh interpreter on this machine's CPU: what only
# one command needs (the catalogue's and PCI model's dataclasses, the kernel log, subprocess, uuid, datetime) is
# imported in that command, not here (thirty systemctl calls on one host: 2.45 s with them at the top, 1.30 s without).
import os
import sys
import time
from pathlib import Path
from typing import Any

from provision.sim.files import replace_file
from provision.sim.node import (
    ACS_STATE_KEY,
    BOOT_LINES_KEY,
    GRUB_CONFIG,
    GRUB_DEFAULTS,
    HCA_MODULES,
    INBOX,
    ROOT_ARGS,
    append_kernel_log,
    load_state,
    ring_position,
    ring_since_boot,
    save_state,
)
from provision.sim.tools.common import ToolError, not_simulated, privileged

MODULE_SIZES = {"nvidia": 62_652_416, "nvidia_uvm": 1_527_808, "nvidia_modeset": 1_314_816,
                "nvidia_peermem": 16_384, "mlx5_core": 2_187_264, "mlx5_ib": 462_848, "ib_core": 462_848,
                "ib_uverbs": 180_224, "ib_umad": 40_960}
DEPENDS = {"nvidia_peermem": ["nvidia", "ib_core"], "nvidia_uvm": ["nvidia"], "nvidia_modeset": ["nvidia"],
           "mlx5_ib": ["mlx5_core", "ib_core"], "ib_umad": ["ib_core"]}
PEERMEM_VERSION = "1.1-0"


def _canonical(name: str) -> str:
    return name.replace("-", "_")


def srcversion(module: str, stack: str | None) -> str:
    """The ``srcversion`` a module built from ``stack``'s sources carries (``inbox``: the kernel's own, else the
    OFED release or the driver version): what tells a loaded module from the one now installed on disk."""
    import hashlib

    return hashlib.md5(f"{module}:{stack or INBOX}".encode()).hexdigest()[:23].upper()


def installed_stack(state: dict[str, Any], module: str) -> str | None:
    """Where the module file ``modprobe`` would load now comes from (OFED's DKMS modules override the kernel's)."""
    if module in HCA_MODULES:
        return state.get("ofed_installed") or INBOX
    if module.startswith("nvidia"):
        return state.get("driver_installed")
    return INBOX


def write_modules(root: Path, state: dict[str, Any]) -> None:
    """``proc/modules``, ``sys/module/*`` (with each module's ``srcversion``) and ``proc/driver/nvidia/version``
    for the set the host's state has loaded, the driver's banner the one of the host's machine."""
    import shutil

    from provision.sim import kernel_log

    modules, driver, ib_stack = state["modules"], state.get("driver_loaded"), state.get("ib_stack_loaded")
    version_file = root / "proc" / "driver" / "nvidia" / "version"
    if "nvidia" in modules and driver:
        banner = kernel_log.driver_banner(driver, state.get("machine", "x86_64"))
        replace_file(version_file, f"NVRM version: {banner}\n"
                                   "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n")
    elif version_file.exists():
        version_file.unlink()
    lines = []
    for name in modules:
        users = [other for other in modules if name in DEPENDS.get(other, [])]
        used_by = ",".join(users) + "," if users else "-"
        address = 0xFFFFFFFFC0000000 + 0x100000 * (sorted(MODULE_SIZES).index(name) if name in MODULE_SIZES else 99)
        lines.append(f"{name} {MODULE_SIZES.get(name, 65_536)} {len(users)} {used_by} Live 0x{address:016x}")
    (root / "proc").mkdir(parents=True, exist_ok=True)
    replace_file(root / "proc" / "modules", "".join(line + "\n" for line in lines))
    module_dir = root / "sys" / "module"
    module_dir.mkdir(parents=True, exist_ok=True)
    for existing in module_dir.iterdir():
        if existing.name not in modules:
            shutil.rmtree(existing)
    versions = {"nvidia_peermem": PEERMEM_VERSION, **({"nvidia": driver} if driver else {})}
    for name in modules:
        replace_file(module_dir / name / "initstate", "live\n")
        replace_file(module_dir / name / "refcnt", "0\n")
        stack = ib_stack if name in HCA_MODULES else driver if name.startswith("nvidia") else INBOX
        replace_file(module_dir / name / "srcversion", srcversion(name, stack) + "\n")
        if name in versions:  # as the real modules do (MODULE_VERSION): present whenever loaded, registered or not
            replace_file(module_dir / name / "version", versions[name] + "\n")


def _register_peers(root: Path, state: dict[str, Any]) -> None:
    import shutil

    registry = root / "sys" / "kernel" / "mm" / "memory_peers" / "nv_mem"
    if "nvidia_peermem" in state["modules"] and state.get("peermem_registers", True):
        replace_file(registry / "version", PEERMEM_VERSION + "\n")
    elif registry.exists():
        shutil.rmtree(registry)


#: Where the nvidia module creates IMEX channel 0 when loaded with ``NVreg_CreateImexChannel0=1`` (field guide 8.3):
#: a device node, gone at every boot (``/dev`` is a tmpfs) until the module is loaded with the option again.
IMEX_CHANNELS = "dev/nvidia-caps-imex-channels"


def module_options(root: Path, module: str) -> dict[str, str]:
    """The ``options <module> KEY=VALUE ...`` lines of ``/etc/modprobe.d/*.conf``, as modprobe applies them."""
    options: dict[str, str] = {}
    for path in sorted((root / "etc" / "modprobe.d").glob("*.conf")):
        for line in path.read_text().splitlines():
            words = line.split("#", 1)[0].split()
            if len(words) >= 2 and words[0] == "options" and words[1] == module:
                for word in words[2:]:
                    key, equals, value = word.partition("=")
                    if equals:
                        options[key] = value
    return options


def _load(root: Path, state: dict[str, Any], name: str, log: list[str]) -> None:
    from provision.sim import kernel_log

    if name in state["modules"]:
        return
    if name == "nvidia":
        installed = state.get("driver_installed")
        if installed is None:
            raise ToolError(f"modprobe: FATAL: Module nvidia not found in directory /lib/modules/{state['kernel']}", 1)
        state["driver_loaded"] = installed
        log += kernel_log.driver_load_lines(installed, state.get("machine", "x86_64"))
        if module_options(root, "nvidia").get("NVreg_CreateImexChannel0") == "1":
            replace_file(root / IMEX_CHANNELS / "channel0", "")
    if name == "nvidia_peermem" and (state.get("driver_installed") is None or state.get("peermem_missing")):
        raise ToolError("modprobe: FATAL: Module nvidia-peermem not found in directory "
                        f"/lib/modules/{state['kernel']}", 1)
    for dependency in DEPENDS.get(name, []):
        _load(root, state, dependency, log)
    if name == "nvidia_peermem":
        # built against the ib_core of the OFED installed when the driver was; the ib_core in memory must be that
        # one (an OFED installed under a running inbox stack takes over only at openibd's restart or a reboot)
        built = state.get("peermem_built_against")
        if built != state.get("ofed_installed") or (built or INBOX) != state.get("ib_stack_loaded"):
            log += kernel_log.peermem_symbol_lines()
            raise ToolError("modprobe: ERROR: could not insert 'nvidia_peermem': Invalid argument", 1)
    if name in HCA_MODULES and not any(module in state["modules"] for module in HCA_MODULES):
        state["ib_stack_loaded"] = installed_stack(state, name)
    state["modules"].append(name)


def modprobe(root: Path, args: list[str]) -> int:
    remove = "-r" in args or "--remove" in args
    names = [_canonical(arg) for arg in args if not arg.startswith("-")]
    unknown = [arg for arg in args if arg.startswith("-") and arg not in ("-r", "--remove", "-q", "--quiet")]
    if unknown or not names:
        not_simulated("modprobe", " ".join(unknown) or "(no module)")
    state = load_state(root)
    log: list[str] = []
    try:
        for name in names:
            if remove:
                users = [other for other in state["modules"] if name in DEPENDS.get(other, [])]
                if users:
                    raise ToolError(f"modprobe: FATAL: Module {name} is in use.", 1)
                if name == "nvidia" and any(service.get("active") for unit, service in state["services"].items()
                                            if unit.startswith("nvidia-")):
                    raise ToolError("modprobe: FATAL: Module nvidia is in use.", 1)
                if name in state["modules"]:
                    state["modules"].remove(name)
                    if name == "nvidia":
                        state["driver_loaded"] = None
            elif name not in MODULE_SIZES:
                raise ToolError(f"modprobe: FATAL: Module {name} not found in directory /lib/modules/{state['kernel']}",
                                1)
            else:
                _load(root, state, name, log)
    finally:
        if log:
            append_kernel_log(root, log)
        write_modules(root, state)
        _register_peers(root, state)
        save_state(root, state)
    return 0


def modinfo(root: Path, args: list[str]) -> int:
    """``modinfo -F srcversion NAME``: the field of the module file modprobe would load now."""
    if len(args) != 3 or args[0] not in ("-F", "--field") or args[1] != "srcversion":
        not_simulated("modinfo", " ".join(args))
    name = _canonical(args[2])
    state = load_state(root)
    stack = installed_stack(state, name)
    if name not in MODULE_SIZES or stack is None:
        raise ToolError(f"modinfo: ERROR: Module {args[2]} not found.", 1)
    print(srcversion(name, stack))
    return 0


def lsmod(root: Path, args: list[str]) -> int:
    if args:
        not_simulated("lsmod", " ".join(args))
    print("Module                  Size  Used by")
    for line in (root / "proc" / "modules").read_text().splitlines():
        name, size, count, users = line.split()[:4]
        users = users.rstrip(",") if users != "-" else ""
        print(f"{name:<19} {size:>8}  {count} {users}".rstrip())
    return 0


def dmesg(root: Path, args: list[str]) -> int:
    from datetime import datetime

    if not privileged():  # Ubuntu sets kernel.dmesg_restrict=1
        raise ToolError("dmesg: read kernel buffer failed: Operation not permitted", 1)
    human = iso = False
    for arg in args:
        if arg in ("-T", "--ctime"):
            human = True
        elif arg in ("--time-format=iso", "--time-format", "iso"):  # util-linux: the form or its two words
            iso = iso or arg != "--time-format"
        elif arg not in ("--notime",):
            not_simulated("dmesg", arg)
    state = load_state(root)
    booted = state.get("ring_epoch") or time.time() - state.get("uptime_s", 3600.0)  # a host built before the epoch
    for seconds, message in ring_since_boot(root):
        line = f"[{seconds:12.6f}] {message}"
        if "--notime" in args:
            print(message)
        elif iso:  # 2026-11-28T17:55:34,551034+00:00: a comma before the microseconds, the zone's offset
            at = datetime.fromtimestamp(booted + seconds).astimezone()
            offset = at.strftime("%z")
            print(f"{at.strftime('%Y-%m-%dT%H:%M:%S')},{at.microsecond:06d}{offset[:3]}:{offset[3:]} {message}")
        elif human:
            print(f"[{time.strftime('%a %b %d %H:%M:%S %Y', time.localtime(booted + seconds))}] {message}")
        else:
            print(line)
    return 0


def systemctl(root: Path, args: list[str]) -> int:
    words = [arg for arg in args if not arg.startswith("-")]
    if not words:
        not_simulated("systemctl", " ".join(args))
    state = load_state(root)
    services: dict[str, dict[str, bool]] = state.setdefault("services", {})
    command, units = words[0], [unit.removesuffix(".service") for unit in words[1:]]
    unit_dir = root / "etc" / "systemd" / "system"

    def known(unit: str) -> dict[str, bool]:
        if unit not in services and (unit_dir / f"{unit}.service").exists():
            services[unit] = {"enabled": False, "active": False}
        if unit not in services:
            raise ToolError(f"Failed to {command} {unit}.service: Unit {unit}.service not found.", 5)
        return services[unit]

    if command == "daemon-reload":
        for path in unit_dir.glob("*.service"):
            services.setdefault(path.stem, {"enabled": False, "active": False})
    elif command == "is-active":
        active = all(services.get(unit, {}).get("active") for unit in units)
        for unit in units:
            print(_active_state(services.get(unit)))
        return 0 if active else 3
    elif command == "show":
        wanted = [name for arg in args if arg.startswith("--property=") for name in arg.split("=", 1)[1].split(",")]
        for unit in units:
            service = services.get(unit)
            known_here = service is not None or (unit_dir / f"{unit}.service").exists()
            state_name = _active_state(service)
            values = {"Id": f"{unit}.service", "LoadState": "loaded" if known_here else "not-found",
                      "ActiveState": state_name,
                      "SubState": {"active": "running", "failed": "failed"}.get(state_name, "dead"),
                      "UnitFileState": ("enabled" if service.get("enabled") else "disabled") if service
                      else "disabled" if known_here else ""}
            # in systemd's order, not the asked one; a property it does not know prints empty
            names = [name for name in values if not wanted or name in wanted] + [n for n in wanted if n not in values]
            for name in names:
                print(f"{name}={values.get(name, '')}")
        return 0
    elif command == "is-enabled":
        enabled = all(services.get(unit, {}).get("enabled") for unit in units)
        for unit in units:
            print("enabled" if services.get(unit, {}).get("enabled") else
                  ("disabled" if unit in services else "not-found"))
        return 0 if enabled else 1
    elif command in ("start", "restart") or (command == "enable" and "--now" in args):
        for unit in units:
            known(unit).update(active=True, failed=False, crashed=False)
            if command == "enable":
                known(unit)["enabled"] = True
            if unit in state.get("units_crash_after_start", []) or (unit == "nvidia-fabricmanager"
                                                                   and not _nvlsm_ready(root, state)):
                known(unit).update(active=False, crashed=True)  # a forking daemon that exits once started: the
                #                                                 start succeeds, the unit ends up failed
        save_state(root, state)
        for unit in units:
            _run_unit(root, unit)
        return _unit_failures(root, units, command)
    elif command == "stop":
        for unit in units:
            known(unit)["active"] = False
    elif command in ("enable", "disable"):
        for unit in units:
            known(unit)["enabled"] = command == "enable"
            if "--now" in args:
                known(unit)["active"] = False
        save_state(root, state)
        return 0
    else:
        not_simulated("systemctl", command)
    save_state(root, state)
    return 0


def _nvlsm_ready(root: Path, state: dict[str, Any]) -> bool:
    """What an HGX Blackwell fabric manager needs to stay up: NVLSM installed, mlx5_ib and ib_umad loaded (other
    boards need none of it)."""
    from provision.catalog import NVSWITCH_BRIDGE_MODELS

    # GPUs whose NVSwitches the fabric manager manages through NVLSM (HGX Blackwell, field guide 8.1): without NVLSM
    # installed and the bridge ports' mlx5_ib and ib_umad loaded it exits (NV_WARN_NOTHING_TO_DO) once started.
    if state.get("gpu_model") not in NVSWITCH_BRIDGE_MODELS:
        return True
    from provision.sim.tools.apt import installed_version

    return installed_version(root, "nvlsm") is not None and {"mlx5_ib", "ib_umad"} <= set(state["modules"])


def _active_state(service: dict[str, bool] | None) -> str:
    if service and (service.get("failed") or service.get("crashed")):
        return "failed"
    return "active" if service and service.get("active") else "inactive"


def _run_unit(root: Path, unit: str) -> None:
    """Run a unit's ``ExecStart=`` commands through this host's stand-ins, as systemd would at start."""
    import shlex
    import subprocess

    path = root / "etc" / "systemd" / "system" / f"{unit}.service"
    if not path.exists():
        return
    environment = {**os.environ, "PATH": f"{root.parent / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    outcomes = []
    for line in path.read_text().splitlines():
        if line.startswith("ExecStart="):
            command = line.split("=", 1)[1].lstrip("-")
            try:
                result = subprocess.run(shlex.split(command), env=environment, capture_output=True, text=True,
                                        timeout=120, check=False)
                outcomes.append((command, result.returncode, (result.stdout + result.stderr)[-2000:]))
            except (OSError, subprocess.TimeoutExpired) as error:
                outcomes.append((command, 127, str(error)))
    state = load_state(root)  # the command may have changed the state (modprobe, systemctl)
    service = state.setdefault("services", {}).setdefault(unit, {"enabled": False, "active": False})
    service["runs"] = service.get("runs", 0) + 1
    service["last_result"] = [{"command": c, "exit_code": code, "output": out} for c, code, out in outcomes]
    if any(code != 0 for _c, code, _out in outcomes):
        service["active"] = False
        service["failed"] = True
    save_state(root, state)


def _unit_failures(root: Path, units: list[str], command: str) -> int:
    state = load_state(root)
    failed = [unit for unit in units if state["services"].get(unit, {}).get("failed")]
    for unit in failed:
        print(f"Job for {unit}.service failed because the control process exited with error code.",
              file=sys.stderr)
    return 1 if failed else 0


def df(root: Path, args: list[str]) -> int:
    if any(arg not in ("-P", "-k", "--output=source,size,used,avail,pcent,target") for arg in args):
        not_simulated("df", " ".join(args))
    state = load_state(root)
    print("Filesystem     1024-blocks       Used   Available Capacity Mounted on")
    for disk in state["disks"]:
        available = disk["size_kb"] - disk["used_kb"]
        percent = -(-disk["used_kb"] * 100 // disk["size_kb"])
        print(f"{disk['filesystem']:<14} {disk['size_kb']:>11} {disk['used_kb']:>10} {available:>11} {percent:>7}% "
              f"{disk['mount']}")
    return 0


#: ``uname``'s fields by option letter, in the order ``-a`` prints them.
UNAME_ORDER = "snrvmpio"


def uname(root: Path, args: list[str]) -> int:
    """``uname [-snrvmpio | -a]``: the host's kernel name, node name, release and machine (``aarch64`` on a
    Grace tray: what the burn-in's runtime and wheels are chosen by). ``-p`` and ``-i`` print the machine, as
    Ubuntu's coreutils do on both architectures; no option is ``-s``."""
    letters = "".join(arg[1:] for arg in args if arg.startswith("-") and not arg.startswith("--"))
    if any(not arg.startswith("-") or arg.startswith("--") for arg in args) or set(letters) - set(UNAME_ORDER + "a"):
        not_simulated("uname", " ".join(args))
    state = load_state(root)
    machine = state.get("machine", "x86_64")
    values = {"s": "Linux", "n": state["host"], "r": state["kernel"],
              "v": "#122-Ubuntu SMP PREEMPT_DYNAMIC", "m": machine, "p": machine, "i": machine,
              "o": "GNU/Linux"}
    wanted = set(UNAME_ORDER) if "a" in letters else set(letters or "s")
    print(" ".join(values[letter] for letter in UNAME_ORDER if letter in wanted))
    return 0


SWAPS_HEADER = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n"


def swapoff(root: Path, args: list[str]) -> int:
    if args != ["-a"]:
        not_simulated("swapoff", " ".join(args))
    replace_file(root / "proc" / "swaps", SWAPS_HEADER)
    return 0


def _swap_from_fstab(root: Path) -> str:
    fstab = root / "etc" / "fstab"
    entries = [line.split()[0] for line in (fstab.read_text().splitlines() if fstab.exists() else [])
               if len(line.split()) >= 3 and line.split()[2] == "swap" and not line.lstrip().startswith("#")]
    return SWAPS_HEADER + "".join(f"{entry:<40}file\t\t8388604\t\t0\t\t-2\n" for entry in entries)


#: The governor every CPU starts at (Ubuntu's kernels default to schedutil).
BOOT_GOVERNOR = "schedutil"


def reboot(root: Path, args: list[str]) -> int:
    """``reboot`` / ``shutdown -r``: the host comes back with only what was made persistent, unless it hangs on the
    way (the ``reboot_hang`` fault): then it stays down, its boot id unchanged, until its BMC powers it on."""
    state = load_state(root)
    if state.get("hang_on_reboot"):
        state["hang_on_reboot"] = False  # one hang: the power cycle that ends it boots the host normally
        state["powered"] = False
        save_state(root, state)
        print("Rebooting.", file=sys.stderr)
        return 0
    return power_on(root)


def power_on(root: Path) -> int:
    """A boot: what the BMC's power-on does to a host that is off or hung, and the second half of a reboot."""
    import shutil
    import uuid

    state = load_state(root)
    state["powered"] = True
    state["boot_count"] = state.get("boot_count", 1) + 1
    state["uptime_s"] = 5.0
    state["boot_ring_s"] = ring_position(root)  # what the ring holds from here on is this boot's
    replace_file(root / "proc" / "sys" / "kernel" / "random" / "boot_id", f"{uuid.uuid4()}\n")
    state["driver_loaded"] = None
    state["modules"] = []
    state["ib_stack_loaded"] = None
    shutil.rmtree(root / IMEX_CHANNELS, ignore_errors=True)  # /dev is made anew at every boot
    for unit, service in state.get("services", {}).items():
        service["active"] = bool(service.get("enabled"))
        if service["active"] and unit in state.get("units_crash_after_start", []):
            service.update(active=False, crashed=True)  # started at boot, and exited as at every start
    _restore_firmware_acs(root, state)
    replace_file(root / "proc" / "swaps", _swap_from_fstab(root))
    command_line = _booted_command_line(root)
    if command_line:
        replace_file(root / "proc" / "cmdline", command_line)
    replace_file(root / "proc" / "sys" / "kernel" / "numa_balancing", _sysctl_numa(root))
    for governor in (root / "sys" / "devices" / "system" / "cpu").glob("cpu[0-9]*/cpufreq/scaling_governor"):
        replace_file(governor, BOOT_GOVERNOR + "\n")  # the kernel's default at boot: a sysfs write is gone
    persistent = []
    for path in sorted((root / "etc" / "modules-load.d").glob("*.conf")):
        persistent += [line.strip() for line in path.read_text().splitlines()
                       if line.strip() and not line.startswith("#")]
    log: list[str] = []
    save_state(root, state)
    hardware_modules = list(HCA_MODULES) if state.get("hcas") else []
    for name in [*hardware_modules, "nvidia", *persistent]:
        try:
            _load(root, state, _canonical(name), log)
        except ToolError as error:
            log.append(f"systemd-modules-load[612]: Failed to insert module '{name}': {error.message}")
    # dmesg shows this boot's lines only (the file keeps earlier boots', as ``journalctl -k`` would): what the
    # hardware's conditions log at every boot (a GPU that falls off the bus, a link trained short: BOOT_LINES_KEY)
    # is logged again here as the driver probes, and an event of an earlier boot is gone.
    log += list(state.get(BOOT_LINES_KEY, []))
    if log:
        append_kernel_log(root, log)
    write_modules(root, state)
    _register_peers(root, state)
    manager = state.get("services", {}).get("nvidia-fabricmanager")
    if manager and manager.get("active") and not _nvlsm_ready(root, state):
        manager.update(active=False, crashed=True)  # started at boot, and exited: NVLSM cannot start
    enabled_units = [unit for unit, service in state.get("services", {}).items() if service.get("enabled")]
    save_state(root, state)
    for unit in enabled_units:
        _run_unit(root, unit)
    print("Rebooting.", file=sys.stderr)
    return 0


def update_grub(root: Path, args: list[str]) -> int:
    """``update-grub``: GRUB's defaults and every ``/etc/default/grub.d/*.cfg`` sourced by the shell, as
    grub-mkconfig sources them, into the kernel line of ``/boot/grub/grub.cfg`` that the next boot reads."""
    import subprocess

    if args:
        not_simulated("update-grub", " ".join(args))
    if not privileged():
        raise ToolError("grub-mkconfig: You must run this as root", 1)
    drop_ins = sorted((root / "etc" / "default" / "grub.d").glob("*.cfg"))
    script = ". ./" + GRUB_DEFAULTS + "".join(f"; . './{path.relative_to(root)}'" for path in drop_ins) + \
        '; printf %s "$GRUB_CMDLINE_LINUX $GRUB_CMDLINE_LINUX_DEFAULT"'
    result = subprocess.run(["sh", "-c", script], cwd=root, capture_output=True, text=True, timeout=10, check=False)
    if result.returncode != 0:
        raise ToolError(f"/etc/default/grub: {result.stderr.strip()}", 1)
    kernel = load_state(root)["kernel"]
    arguments = " ".join(result.stdout.split())
    replace_file(root / GRUB_CONFIG, f"menuentry 'Ubuntu' {{\n\tlinux\t/boot/vmlinuz-{kernel} {ROOT_ARGS} {arguments}\n"
                                     f"\tinitrd\t/boot/initrd.img-{kernel}\n}}\n")
    for line in ["Sourcing file `/etc/default/grub'",
                 *(f"Sourcing file `/{path.relative_to(root)}'" for path in drop_ins),
                 "Generating grub configuration file ...", f"Found linux image: /boot/vmlinuz-{kernel}", "done"]:
        print(line, file=sys.stderr)
    return 0


def _booted_command_line(root: Path) -> str | None:
    """The kernel line the boot loader hands over, from grub.cfg as update-grub last wrote it (None: never run)."""
    config = root / GRUB_CONFIG
    for line in config.read_text().splitlines() if config.exists() else []:
        words = line.split()
        if words and words[0] == "linux":
            return f"BOOT_IMAGE={words[1].removeprefix('/boot')} {' '.join(words[2:])}\n".replace("  ", " ")
    return None


def _sysctl_numa(root: Path) -> str:
    """What systemd-sysctl leaves in kernel.numa_balancing at boot: the last sysctl.d setting, else 1."""
    value = "1"
    for path in sorted((root / "etc" / "sysctl.d").glob("*.conf")) if (root / "etc" / "sysctl.d").exists() else []:
        for line in path.read_text().splitlines():
            key, _, setting = line.partition("=")
            if key.strip() == "kernel.numa_balancing":
                value = setting.strip()
    return value + "\n"


def _restore_firmware_acs(root: Path, state: dict[str, Any]) -> None:
    """setpci edits do not survive a reboot: every ACS control register goes back to the firmware value."""
    from provision.hostmodel.pciconfig import ECAP_ACS, extended_capabilities, write

    defaults: dict[str, int] = state.get(ACS_STATE_KEY, {})
    devices = root / "sys" / "bus" / "pci" / "devices"
    for bdf, control in defaults.items():
        path = devices / bdf / "config"
        if not path.exists():
            continue
        space = path.read_bytes()
        found = extended_capabilities(space).get(ECAP_ACS)
        if found:
            replace_file(path, write(space, found[0] + 6, 2, control))
