"""Presenting a simulated host at the real paths (the production-identical presentation).

In the prefix presentation a playbook reaches a host's hardware through ``hw_root`` and its stand-ins
through PATH, which hides a whole class of bug: a task that writes ``/etc/...`` without the prefix, or
calls a tool by an absolute path, works in simulation and fails on the first real host. Here the same
host is shown to an unchanged playbook in a mount and UTS namespace of its own, where the real paths are
the host's:

- ``/sys`` is the host's ``sys`` tree;
- ``/proc`` is a view of symbolic links: the host's own entries (modules, swaps, cmdline, ``driver/``,
  kernel release, NUMA balancing, boot id) and this machine's procfs for the rest (``self``, ``mounts``...).
  Links, not bind mounts, because the simulator replaces files by renaming a new one over them, and a
  bind mount of a file would keep showing the old one;
- ``/etc``, ``/usr/local``, ``/opt`` and ``/var`` are overlays whose upper layer is the host's own tree, so
  what a playbook writes there lands in the host and this machine's files stay untouched;
- ``/usr/bin`` and ``/usr/sbin`` are overlays with the host's stand-ins on top, so ``nvidia-smi``,
  ``modprobe`` and ``/usr/sbin/shutdown`` are the host's whatever the PATH;
- the hostname is the host's.

The host's processes share a PID namespace, so they all end with the first one. Anything run in it
(``provision sim shell``, or an sshd the playbooks then reach over SSH with no
``hw_root`` at all) sees one simulated host as a real one. It needs root (mounts), util-linux
``unshare`` and overlayfs. Limits, stated rather than hidden: ``/proc/<pid>`` of other processes is not
shown (``/proc/self`` is); ``python3`` is this machine's, without torch: the burn-in's stages that start
workers need the node runtime (``software.runtime``, installed by the node_runtime role), and the rank-layer
faults, which live in the simulated node's ``python3``, act in the prefix presentation only; one namespace
per host at a time, because an overlay's upper layer belongs to one mount.
"""

from __future__ import annotations

import fcntl
import os
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from provision.sim.cluster import SimError, node_paths, write_stand_ins
from provision.sim.host import ensure_host

#: The host's own entries in its /proc, nested as they are there; everything else is this machine's.
HOST_PROC: dict[str, dict[str, Any] | None] = {
    "modules": None, "swaps": None, "cmdline": None, "driver": None,
    "sys": {"kernel": {"osrelease": None, "arch": None, "numa_balancing": None, "random": {"boot_id": None}}},
}


#: Trees a playbook writes in: overlays whose upper layer is the host's own (the node runtime lives in /opt and
#: its wheels in /var/cache), so nothing lands on this machine.
OVERLAID = ("etc", "usr/local", "opt", "var")


@dataclass(frozen=True)
class Layout:
    host: str
    root: Path
    namespace: Path

    @property
    def stand_ins(self) -> Path:
        return self.namespace / "bin"

    @property
    def proc_view(self) -> Path:
        return self.namespace / "proc"

    @property
    def machine_proc(self) -> Path:
        return self.namespace / "machine-proc"


def unavailable() -> str | None:
    """Why this machine cannot present a host at the real paths, or None when it can."""
    if os.geteuid() != 0:
        return "needs root (it mounts over /sys, /proc, /etc and /usr)"
    if shutil.which("unshare") is None:
        return "needs util-linux unshare"
    try:
        filesystems = Path("/proc/filesystems").read_text()
    except OSError as error:
        return f"cannot read /proc/filesystems: {error}"
    if "overlay" not in filesystems.split():
        return "the kernel has no overlayfs"
    return None


def prepare(state_dir: Path, host: str) -> Layout:
    """Build what the namespace mounts: the host itself, its stand-ins naming its root, and the /proc view."""
    paths = node_paths(state_dir, host)
    root = ensure_host(paths.root.parent)
    layout = Layout(host, root, paths.root.parent / "namespace")
    shutil.rmtree(layout.stand_ins, ignore_errors=True)
    # python3 stays this machine's: it is what Ansible's modules run under on a real host
    write_stand_ins(layout.stand_ins, shlex.quote(str(root)), node_python=False)
    owner = root.stat()
    for directory in ("proc/driver", *OVERLAID):  # /proc/driver is on every real host, driver or not
        if not (root / directory).is_dir():
            (root / directory).mkdir(parents=True)
            os.chown(root / directory, owner.st_uid, owner.st_gid)  # the host's tools write there as its owner
    shutil.rmtree(layout.proc_view, ignore_errors=True)
    _link_proc_level(layout.proc_view, Path(), HOST_PROC, layout)
    layout.machine_proc.mkdir(exist_ok=True)
    return layout


def _link_proc_level(view: Path, relative: Path, host_entries: dict[str, Any], layout: Layout) -> None:
    view.mkdir(parents=True)
    machine = Path("/proc") / relative
    names = {name for name in os.listdir(machine) if not name.isdigit()} | set(host_entries)
    for name in sorted(names):
        if name in host_entries and host_entries[name] is not None:
            _link_proc_level(view / name, relative / name, host_entries[name], layout)
        elif name in host_entries:
            (view / name).symlink_to(layout.root / "proc" / relative / name)
        else:
            (view / name).symlink_to(layout.machine_proc / relative / name)


def mount_script(layout: Layout) -> str:
    """The shell run inside the new namespace: every mount, then ``exec "$@"``. Any failure stops it before
    the command runs, so nothing ever runs half presented (and so never against this machine's own tools)."""
    root, ns = layout.root, layout.namespace
    q = shlex.quote
    lines = [
        "set -eu",
        "mount --make-rprivate /",
        f"hostname {q(layout.host)}",
        f"mount --bind {q(str(root / 'sys'))} /sys",
        f"mount -t proc proc {q(str(layout.machine_proc))}",  # this namespace's processes
        f"mount --bind {q(str(layout.proc_view))} /proc",
    ]
    for tree in OVERLAID:
        work = ns / f"work-{tree.replace('/', '-')}"
        lines += [f"rm -rf {q(str(work))}", f"mkdir -p {q(str(work))}",
                  f"mount -t overlay overlay -o lowerdir=/{tree},upperdir={q(str(root / tree))},"
                  f"workdir={q(str(work))} /{tree}"]
    for tree in ("usr/bin", "usr/sbin"):
        lines.append(f"mount -t overlay overlay -o lowerdir={q(str(layout.stand_ins))}:/{tree} /{tree}")
    lines.append('exec "$@"')
    return "\n".join(lines) + "\n"


def _argv(layout: Layout, argv: list[str]) -> list[str]:
    # a PID namespace too, so that when the first process goes every process of the host goes with it
    # (sshd's session processes would otherwise outlive their server, holding the mounts)
    return ["unshare", "--mount", "--uts", "--pid", "--kill-child", "--", "sh", "-c", mount_script(layout),
            f"provision-sim-{layout.host}", *argv]


def _claim(state_dir: Path, host: str) -> tuple[int, Layout]:
    """Lock the host's namespace for the life of the process about to start (which inherits the lock),
    then prepare it: a second namespace would rebuild the /proc view and reuse the overlay layers under
    the first one's feet."""
    reason = unavailable()
    if reason is not None:
        raise SimError(f"cannot present {host} at the real paths: {reason}")
    directory = node_paths(state_dir, host).root.parent
    if not directory.is_dir():
        raise SimError(f"no simulated host {host!r} under {state_dir} (run provision sim up first)")
    (directory / "namespace").mkdir(exist_ok=True)
    descriptor = os.open(directory / "namespace" / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(descriptor)
        raise SimError(f"{host} is already presented at the real paths by another process") from None
    try:
        return descriptor, prepare(state_dir, host)
    except BaseException:
        os.close(descriptor)
        raise


def spawn(state_dir: Path, host: str, argv: list[str], **options: Any) -> subprocess.Popen[Any]:
    """Start ``argv`` as a process of simulated ``host`` presented at the real paths (an sshd, a shell)."""
    descriptor, layout = _claim(state_dir, host)
    try:
        return subprocess.Popen(_argv(layout, argv), pass_fds=(descriptor,), **options)
    finally:
        os.close(descriptor)  # the child holds the lock now


def run(state_dir: Path, host: str, argv: list[str], timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    process = spawn(state_dir, host, argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        stdout, stderr = process.communicate()
        raise SimError(f"{' '.join(argv)} on {host} did not finish in {timeout_s:.0f} s") from None
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def replace_process(state_dir: Path, host: str, argv: list[str]) -> NoReturn:
    """Become ``argv`` on simulated ``host`` (``provision sim shell``): signals and the terminal go to it."""
    descriptor, layout = _claim(state_dir, host)
    os.set_inheritable(descriptor, True)
    os.execvp("unshare", _argv(layout, argv))
