"""``dpkg-query``, ``apt-get`` and ``apt-mark`` over ``var/lib/dpkg/status`` of a hardware root.

The status file is written in dpkg's own format, so installed and held
packages are visible to anything that reads it. ``apt-get install`` knows only what
``apt-get update`` fetched into ``var/lib/apt/lists`` from the sources the host's
``etc/apt`` names (:mod:`provision.sim.mirror`: a stock image knows Ubuntu's archive
alone, a vendor repository answers only with its key in place); asking for anything
else fails the way apt does. Installing a driver branch removes the other branch (the
real packages conflict); the new kernel module only takes over at the next boot, which
is what makes "reboot only when needed" testable.
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path
from typing import Any

from provision.sim import mirror
from provision.sim.files import replace_file
from provision.sim.node import load_state, save_state
from provision.sim.tools.common import ToolError, not_simulated

STATUS = "var/lib/dpkg/status"
LISTS = "var/lib/apt/lists"
SOURCES_LIST = "etc/apt/sources.list"
SOURCES_DIR = "etc/apt/sources.list.d"
#: Package families whose branches conflict with each other (nvidia-driver-535 vs -550).
FAMILIES = ("nvidia-driver-", "nvidia-utils-", "nvidia-fabricmanager-", "nvidia-dkms-", "libnvidia-nscq-",
            "nvidia-imex-")


IMEX_CONFIG = "etc/nvidia-imex/config.cfg"
IMEX_NODES_CONFIG = "/etc/nvidia-imex/nodes_config.cfg"
#: What the nvidia-imex package installs as ``config.cfg``: NVIDIA's defaults as the DRA driver's template carries them
#: (../shared/fixtures/blackwell/imex/k8sdra_imex_config_cfg_template.cfg), its placeholders filled with the
#: package's own paths.
IMEX_DEFAULT_CONFIG = {
    "LOG_LEVEL": "4", "LOG_FILE_NAME": "/var/log/nvidia-imex.log", "SERVER_PORT": "50000",
    "IMEX_NODE_CONFIG_FILE": IMEX_NODES_CONFIG, "IMEX_WAIT_FOR_QUORUM": "RECOVERY", "IMEX_CMD_ENABLED": "1",
    "IMEX_CMD_BIND_INTERFACE_IP": "", "IMEX_CMD_PORT": "50005", "IMEX_NODE_DISCONNECTED_GRACE_TIME": "-1",
}


def imex_default_config() -> str:
    return "".join(f"{key}={value}\n" for key, value in IMEX_DEFAULT_CONFIG.items())


def read_status(root: Path) -> dict[str, dict[str, str]]:
    packages: dict[str, dict[str, str]] = {}
    path = root / STATUS
    text = path.read_text() if path.exists() else ""
    for block in text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line and not line.startswith(" "))
        if "Package" in fields:
            packages[fields["Package"]] = fields
    return packages


def write_status(root: Path, packages: dict[str, dict[str, str]]) -> None:
    blocks = []
    for name in sorted(packages):
        fields = packages[name]
        blocks.append("\n".join(f"{key}: {fields[key]}" for key in
                                ("Package", "Status", "Priority", "Section", "Architecture", "Version", "Description")
                                if key in fields))
    replace_file(root / STATUS, "\n\n".join(blocks) + ("\n" if blocks else ""))


def installed_version(root: Path, prefix: str) -> str | None:
    """Upstream version of the installed package whose name starts with ``prefix`` (driver branches)."""
    for name, fields in read_status(root).items():
        if name.startswith(prefix) and fields.get("Status", "").endswith(" installed"):
            return fields["Version"].split("-")[0]
    return None


def package_entry(name: str, version: str, held: bool = False) -> dict[str, str]:
    return {"Package": name, "Status": f"{'hold' if held else 'install'} ok installed", "Priority": "optional",
            "Section": "non-free/libs" if name.startswith(("nvidia", "libnvidia")) else "net",
            "Architecture": "amd64", "Version": version, "Description": f"{name} (simulated package)"}


def dpkg_query(root: Path, args: list[str]) -> int:
    fmt = "${Package}\t${Version}\n"
    names: list[str] = []
    show = False
    for arg in args:
        if arg in ("-W", "--show"):
            show = True
        elif arg.startswith(("-f=", "--showformat=")):
            fmt = arg.split("=", 1)[1].encode().decode("unicode_escape")
        elif arg.startswith("-"):
            not_simulated("dpkg-query", arg)
        else:
            names.append(arg)
    if not show:
        not_simulated("dpkg-query", " ".join(args))
    packages = read_status(root)
    selected = [packages[name] for name in sorted(packages) if not names or any(
        re.fullmatch(pattern.replace("*", ".*"), name) for pattern in names)]
    missing = [name for name in names if not any(re.fullmatch(name.replace("*", ".*"), p) for p in packages)]
    for fields in selected:
        status = fields.get("Status", "")
        abbrev = ("hi " if status.startswith("hold") else "ii ") if status.endswith("installed") else "un "
        text = fmt
        for key, value in {"Package": fields["Package"], "Version": fields.get("Version", ""), "Status": status,
                           "db:Status-Abbrev": abbrev, "Architecture": fields.get("Architecture", "")}.items():
            text = text.replace("${" + key + "}", value)
        print(text, end="")
    if missing:
        for name in missing:
            print(f"dpkg-query: no packages found matching {name}", file=sys.stderr)
        return 1
    return 0


def apt_mark(root: Path, args: list[str]) -> int:
    if not args or args[0] not in ("hold", "unhold", "showhold"):
        not_simulated("apt-mark", " ".join(args))
    packages = read_status(root)
    if args[0] == "showhold":
        for name in sorted(packages):
            if packages[name]["Status"].startswith("hold"):
                print(name)
        return 0
    for name in args[1:]:
        if name not in packages:
            raise ToolError(f"E: Unable to locate package {name}", 100)
        held = packages[name]["Status"].startswith("hold")
        if args[0] == "hold":
            print(f"{name} was already set on hold." if held else f"{name} set on hold.")
            packages[name]["Status"] = "hold ok installed"
        else:
            print(f"Canceled hold on {name}." if held else f"{name} was already not on hold.")
            packages[name]["Status"] = "install ok installed"
    write_status(root, packages)
    return 0


#: The options apt-get is given with ``-o`` that the stand-in understands.
KNOWN_OPTIONS = ("DPkg::Lock::Timeout",)
#: Who holds dpkg's lock on a stock image's first boot (the upgrades it installs take minutes on a real host).
LOCK_HOLDER = "process 1873 (unattended-upgr)"
#: Who holds apt's lists lock then: apt-daily's refresh of the lists, which runs before the upgrades.
LISTS_LOCK_HOLDER = "process 1841 (apt-get)"


def apt_get(root: Path, args: list[str]) -> int:
    options: dict[str, str] = {}
    rest: list[str] = []
    pending = iter(args)
    for arg in pending:
        if arg == "-o":
            name, _, value = next(pending, "").partition("=")
            if name not in KNOWN_OPTIONS:
                not_simulated("apt-get", f"-o {name}")
            options[name] = value
        else:
            rest.append(arg)
    flags = {arg for arg in rest if arg.startswith("-")}
    words = [arg for arg in rest if not arg.startswith("-")]
    known = {"-y", "-q", "-qq", "--yes", "--quiet", "--allow-downgrades", "--allow-change-held-packages",
             "--no-install-recommends", "--reinstall"}
    unknown = flags - known
    if unknown or not words:
        not_simulated("apt-get", " ".join(sorted(unknown)) or "(no command)")
    command, requested = words[0], words[1:]
    if command == "update":
        if requested:
            not_simulated("apt-get", "update " + " ".join(requested))
        _refuse_while_lists_locked(load_state(root))
        return update(root, load_state(root))
    if command not in ("install", "remove", "purge"):
        not_simulated("apt-get", command)
    _wait_for_dpkg_lock(load_state(root), float(options.get("DPkg::Lock::Timeout", "0") or 0))
    state = load_state(root)
    available = known_packages(root)
    packages = read_status(root)
    print("Reading package lists...\nBuilding dependency tree...\nReading state information...")
    if command in ("remove", "purge"):
        for name in requested:
            if name in packages:
                print(f"Removing {name} ({packages[name]['Version']}) ...")
                del packages[name]
        write_status(root, packages)
        return 0
    plan: list[tuple[str, str]] = []
    for item in requested:
        name, _, wanted = item.partition("=")
        if name not in available:
            raise ToolError(f"E: Unable to locate package {name}", 100)
        versions = available[name]
        version = next((v for v in versions if v == wanted or (wanted.endswith("*") and v.startswith(wanted[:-1]))),
                       None) if wanted else versions[-1]
        if version is None:
            raise ToolError(f"E: Version '{wanted}' for '{name}' was not found", 100)
        plan.append((name, version))
        dependency = name.replace("nvidia-driver-", "nvidia-utils-", 1)
        if dependency != name and version in available.get(dependency, []) and not any(
                planned == dependency for planned, _ in plan):
            plan.append((dependency, version))  # the driver metapackage depends on its utils at the same version
    held_changes = [name for name, version in plan
                    if name in packages and packages[name]["Status"].startswith("hold")
                    and packages[name]["Version"] != version]
    for name, _version in plan:
        family = next((prefix for prefix in FAMILIES if name.startswith(prefix)), None)
        if family:
            held_changes += [other for other in packages if other.startswith(family) and other != name
                             and packages[other]["Status"].startswith("hold")]
    if held_changes and "--allow-change-held-packages" not in flags:
        raise ToolError("E: Held packages were changed and -y was used without --allow-change-held-packages.", 100)
    downgrades = [name for name, version in plan if name in packages and _older(version, packages[name]["Version"])]
    if downgrades and "--allow-downgrades" not in flags:
        raise ToolError("E: Packages were downgraded and -y was used without --allow-downgrades.", 100)
    changed = False
    for name, version in plan:
        family = next((prefix for prefix in FAMILIES if name.startswith(prefix)), None)
        if family:
            for other in [other for other in packages if other.startswith(family) and other != name]:
                print(f"Removing {other} ({packages[other]['Version']}) ...")
                del packages[other]
                changed = True
        current = packages.get(name)
        if current and current["Version"] == version and "--reinstall" not in flags:
            print(f"{name} is already the newest version ({version}).")
            continue
        held = bool(current and current["Status"].startswith("hold"))
        packages[name] = package_entry(name, version, held=held)
        print(f"Setting up {name} ({version}) ...")
        _effects(root, state, name, version)
        changed = True
    write_status(root, packages)
    if changed:
        save_state(root, state)
    print(f"{len(plan)} upgraded, newly installed or unchanged.")
    return 0


def _wait_for_dpkg_lock(state: dict[str, Any], timeout_s: float) -> None:
    """A stock image's first boot runs unattended-upgrades, which holds dpkg's frontend lock while it installs:
    apt-get fails at once, as apt does, unless told to wait (``-o DPkg::Lock::Timeout=SECONDS``)."""
    remaining = float(state.get("dpkg_lock_until", 0.0)) - time.time()
    if remaining <= 0:
        return
    lock = f"Could not get lock /var/lib/dpkg/lock-frontend. It is held by {LOCK_HOLDER}"
    if timeout_s < remaining:
        if timeout_s > 0:
            time.sleep(timeout_s)
        raise ToolError(f"E: {lock}\nN: Be aware that removing the lock file is not a solution and may break your "
                        "system.\nE: Unable to acquire the dpkg frontend lock (/var/lib/dpkg/lock-frontend), is "
                        "another process using it?", 100)
    print(f"Waiting for cache lock: {lock}... {int(remaining)}s", file=sys.stderr)
    time.sleep(remaining)


def _refuse_while_lists_locked(state: dict[str, Any]) -> None:
    """apt-get update takes apt's lists lock without waiting: apt 2.4 (Ubuntu 22.04) applies DPkg::Lock::Timeout
    to dpkg's lock only (``pkgAcquire::GetLock`` in apt-pkg/acquire.cc), and a stock image's first boot runs
    apt-daily's refresh of the lists, which holds it."""
    if float(state.get("lists_lock_until", 0.0)) > time.time():
        raise ToolError(f"E: Could not get lock /var/lib/apt/lists/lock. It is held by {LISTS_LOCK_HOLDER}\n"
                        "N: Be aware that removing the lock file is not a solution and may break your system.\n"
                        "E: Unable to lock directory /var/lib/apt/lists/", 100)


def sources(root: Path) -> list[tuple[dict[str, str], str, str, list[str]]]:
    """The ``deb`` lines of ``sources.list`` and ``sources.list.d/*.list``: (options, URL, suite, components)."""
    files = [root / SOURCES_LIST, *sorted((root / SOURCES_DIR).glob("*.list"))]
    found = []
    for path in files:
        for line in (path.read_text().splitlines() if path.is_file() else []):
            words = line.split("#", 1)[0].split()
            if not words or words[0] != "deb":
                continue
            options: dict[str, str] = {}
            rest = words[1:]
            if rest and rest[0].startswith("["):
                closing = next(index for index, word in enumerate(rest) if word.endswith("]"))
                for option in " ".join(rest[: closing + 1]).strip("[]").split():
                    key, _, value = option.partition("=")
                    options[key] = value
                rest = rest[closing + 1 :]
            if len(rest) >= 2:
                found.append((options, rest[0], rest[1], rest[2:]))
    return found


def update(root: Path, state: dict[str, Any]) -> int:
    """Fetch every source's index the way apt does: a vendor's only when its ``signed-by`` keyring holds the
    key it signs with, none from a host that does not resolve or a path the server lacks. Lists of sources no
    longer named are dropped, as apt drops them."""
    offered: dict[str, dict[str, list[str]]] = state["packages_available"]
    lists = root / LISTS
    lists.mkdir(parents=True, exist_ok=True)
    kept: set[str] = set()
    notes: list[str] = []
    failed = False
    for index, (options, url, suite, components) in enumerate(sources(root), 1):
        where = mirror.origin(url)
        name = mirror.list_name(url, suite)
        release = f"{url} {suite}" + (" " + " ".join(components) if components else "")
        if where.failure == "unresolved":
            host = url.split("://", 1)[-1].split("/", 1)[0]
            print(f"Err:{index} {release} InRelease\n  Temporary failure resolving '{host}'")
            notes.append(f"W: Failed to fetch {url.rstrip('/')}/InRelease  Temporary failure resolving '{host}'")
            kept.add(name)  # apt keeps the old index, if any
            continue
        if where.failure == "missing" or where.vendor is None:
            print(f"Ign:{index} {release} InRelease\nErr:{index} {release} Release\n  404  Not Found")
            notes.append(f"E: The repository '{release} Release' does not have a Release file.")
            failed = True
            continue
        if where.vendor != mirror.UBUNTU:
            keyring = options.get("signed-by", "")
            path = root / keyring.lstrip("/") if keyring else None
            trusted = path is not None and path.is_file() and path.read_text(errors="replace") == \
                mirror.stand_in_key(where.vendor)
            if not trusted:
                print(f"Get:{index} {release} InRelease [1,581 B]\nErr:{index} {release} InRelease")
                notes += [f"W: GPG error: {release} InRelease: The following signatures couldn't be verified because "
                          f"the public key is not available: NO_PUBKEY {mirror.key_id(where.vendor)}",
                          f"E: The repository '{release} InRelease' is not signed."]
                failed = True
                kept.add(name)
                continue
        if where.vendor in mirror.STACK_PACKAGE:
            packages = {mirror.STACK_PACKAGE[where.vendor]: [f"{where.release}-1"]}
        else:
            packages = offered.get(where.vendor, {})
        print(f"Get:{index} {release} InRelease [1,581 B]")
        replace_file(lists / name, mirror.packages_text(packages))
        kept.add(name)
    for stale in lists.glob("*_Packages"):
        if stale.name not in kept:
            stale.unlink()
    print("Reading package lists... Done")
    for note in notes:
        print(note, file=sys.stderr)
    return 100 if failed else 0


def known_packages(root: Path) -> dict[str, list[str]]:
    """Every version apt's lists offer (what ``apt-get install`` can choose from)."""
    available: dict[str, list[str]] = {}
    for path in sorted((root / LISTS).glob("*_Packages")):
        for name, versions in mirror.read_packages(path.read_text()).items():
            available[name] = sorted(set(available.get(name, [])) | set(versions), key=_version_key)
    return available


def write_stock_sources(root: Path, offered: dict[str, dict[str, list[str]]]) -> None:
    """What a stock install leaves: Ubuntu's archive in sources.list and its index already fetched."""
    replace_file(root / SOURCES_LIST, mirror.UBUNTU_LINE + "\n")
    url, suite = mirror.UBUNTU_LINE.split()[1:3]
    replace_file(root / LISTS / mirror.list_name(url, suite), mirror.packages_text(offered.get(mirror.UBUNTU, {})))


def _effects(root: Path, state: dict[str, Any], name: str, version: str) -> None:
    """What a package's maintainer scripts would leave behind."""
    upstream = version.split("-")[0]
    if name.startswith("nvidia-driver-"):
        # DKMS builds nvidia-peermem against the ib_core of the OFED installed right now.
        state["peermem_built_against"] = state.get("ofed_installed")
        state["driver_installed"] = upstream
        state.pop("peermem_missing", None)  # the DKMS build produces nvidia-peermem this time
    elif name in ("doca-ofed", "mlnx-ofed-all"):
        state["ofed_installed"] = upstream
    elif name.startswith("nvidia-fabricmanager-"):
        state.setdefault("services", {}).setdefault("nvidia-fabricmanager", {"enabled": False, "active": False})
    elif name.startswith("nvidia-utils-"):
        state.setdefault("services", {}).setdefault("nvidia-persistenced", {"enabled": False, "active": False})
    elif name == "datacenter-gpu-manager-4-core":  # nv-hostengine's unit, installed stopped
        state.setdefault("services", {}).setdefault("nvidia-dcgm", {"enabled": False, "active": False})
    elif name.startswith("nvidia-imex-"):  # the daemon's unit, stopped, and its default config.cfg
        state.setdefault("services", {}).setdefault("nvidia-imex", {"enabled": False, "active": False})
        if not (root / IMEX_CONFIG).exists():
            replace_file(root / IMEX_CONFIG, imex_default_config())


def _version_key(version: str) -> list[int]:
    return [int(part) for part in re.findall(r"\d+", version)]


def _older(left: str, right: str) -> bool:
    return _version_key(left) < _version_key(right)
