"""A warm interpreter for the simulated nodes' agents: torch imported once, each agent a fork of it.

On a real node an agent's ``import torch`` costs that node's own CPU (~2 s). The simulated nodes all pay it on this
machine's cores, once per node per launch (126 agents in a run of the suite, a quarter of an hour of CPU), queued
behind each other on two cores. So the node's ``python3`` (``nodepython/sitecustomize.py``) hands an agent's start
to a zygote: a process of the same interpreter and path that has imported torch and forks, per agent, a child that
takes the agent's standard streams, environment, working directory, CPU affinity and umask, and runs
``-m fabric_tests.agent`` as the interpreter would have. The agent's code, its workers and the rank faults (installed
in the child, from the host's root) are unchanged.

What the zygote changes is the process tree, so the process that started the agent (the *client*, the
``python3 -m fabric_tests.agent`` a session or srun ran) stands in for the agent: it forwards SIGTERM to it (SIGINT
and SIGHUP to its process group), exits with its exit status, and if the client goes (a session's timeout kills
its process group, srun is cancelled) or its own parent does (the controller was killed), the agent's process
group is killed with it, as an agent notices its parent gone. The child's command line and environment, as
``/proc`` shows them, are rewritten to the agent's, so ``ps``, ``pgrep`` and the tests' process checks see the
agent and its workers where they are.

When no zygote can be had (another interpreter flag, no socket), the agent starts as before. The zygote exits
after a minute without children; its key is the interpreter, its path and these sources' modification times.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import json
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import traceback
from typing import Any

MODULE = "fabric_tests.agent"
IDLE_EXIT_S = 60.0
START_WAIT_S = 30.0
#: Room reserved in the zygote's command line and environment for the agent's, so /proc shows the agent's.
TITLE_ROOM = 8192
ENVIRON_ROOM = 65536
ORPHANED_EXIT = 129  # as fabric_tests.agent: the controller that launched the agent is gone


def _key() -> str:
    here = os.path.dirname(os.path.abspath(__file__))
    sources = [os.path.join(here, "zygote.py"), os.path.join(here, "nodepython", "sitecustomize.py")]
    stamp = [sys.executable, os.environ.get("PYTHONPATH", ""), str(os.getuid()),
             *(f"{path}:{os.stat(path).st_mtime_ns}" for path in sources)]
    return hashlib.sha256("\0".join(stamp).encode()).hexdigest()[:20]


def _address(key: str) -> str:
    return f"\0provision-sim-zygote-{key}"  # Linux's abstract namespace: nothing on disk to clean up


def hand_over() -> None:
    """Run this agent in the zygote and exit with its status; return when no zygote could take it."""
    key = _key()
    connection = _connect(key)
    if connection is None:
        return
    request = {"args": sys.argv[1:], "env": dict(os.environ), "cwd": os.getcwd(),
               "affinity": sorted(os.sched_getaffinity(0)), "umask": _umask()}
    payload = json.dumps(request).encode()
    try:
        socket.send_fds(connection, [struct.pack("!I", len(payload)) + payload], [0, 1, 2])
        child = int(_read_line(connection))
    except (OSError, ValueError):
        connection.close()
        return
    parent = os.getppid()

    def forward(signum: int, frame: Any) -> None:
        # SIGTERM to the agent, which takes its workers down itself; SIGINT and SIGHUP to its group, as a terminal
        # sends them to every process in the foreground
        with contextlib.suppress(ProcessLookupError):
            (os.kill if signum == signal.SIGTERM else os.killpg)(child, signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, forward)
    connection.settimeout(0.2)
    while True:
        try:
            line = _read_line(connection)
        except TimeoutError:
            if os.getppid() != parent:  # whoever started the agent is gone: so is the agent (the child sees EOF)
                os._exit(ORPHANED_EXIT)
            continue
        except OSError:
            os._exit(ORPHANED_EXIT)
        status = int(line)
        os._exit(status if status >= 0 else 128 - status)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _read_line(connection: socket.socket) -> str:
    data = b""
    while not data.endswith(b"\n"):
        chunk = connection.recv(64)
        if not chunk:
            raise ConnectionResetError("the zygote closed the connection")
        data += chunk
    return data.decode().strip()


def _connect(key: str) -> socket.socket | None:
    def attempt() -> socket.socket | None:
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            connection.connect(_address(key))
        except OSError:
            connection.close()
            return None
        return connection

    connection = attempt()
    if connection is not None:
        return connection
    # started with an environment that names no cluster: a process check of a test's folder must not find it
    keep = ("PYTHONPATH", "HOME", "LANG", "LC_ALL", "PYTHONDONTWRITEBYTECODE", "TMPDIR")
    env = {name: os.environ[name] for name in keep if name in os.environ}
    env["PATH"] = "/usr/bin:/bin"
    env["PROVISION_SIM_ZYGOTE_ROOM"] = "x" * ENVIRON_ROOM
    spawned = subprocess.Popen([sys.executable, "-m", "provision.sim.zygote", key, " " * TITLE_ROOM], env=env,
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True, cwd="/")
    deadline = time.monotonic() + START_WAIT_S
    while time.monotonic() < deadline:
        time.sleep(0.1)
        connection = attempt()
        if connection is not None:
            return connection
        if spawned.poll() not in (None, 0):  # it could not start (0: another one won the address): cold start
            return None
    return None


def _area(first: int) -> tuple[int, int]:
    """Start and end addresses from /proc/self/stat, fields ``first`` and ``first + 1`` (1-based)."""
    with open("/proc/self/stat", "rb") as handle:
        fields = handle.read().rsplit(b")", 1)[1].split()
    return int(fields[first - 3]), int(fields[first - 2])


def _rewrite(area: tuple[int, int], words: list[str]) -> None:
    """What /proc shows for this process (its command line: fields 48-49; environment: 50-51), overwritten in place
    with ``words`` (NUL-separated, cut to fit, the rest NUL), as ``setproctitle`` does."""
    start, end = area
    size = end - start
    data = b"".join(word.encode(errors="replace") + b"\0" for word in words)[:size - 1]
    ctypes.memmove(start, data.ljust(size, b"\0"), size)


def _child(connection: socket.socket, request: dict[str, Any], streams: list[int]) -> None:
    """In the forked child: become the agent that was asked for, then exit with its status. Never returns."""
    code = 1
    try:
        os.setsid()
        for target, fd in enumerate(streams[:3]):
            os.dup2(fd, target)
        for fd in streams:
            if fd > 2:
                os.close(fd)
        for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
            signal.signal(signum, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)

        def watch() -> None:  # the client (the agent's stand-in in the process tree) went: the agent goes too
            with contextlib.suppress(OSError):
                while connection.recv(1):
                    pass
            os.killpg(0, signal.SIGKILL)

        threading.Thread(target=watch, daemon=True).start()
        args = list(request["args"])
        environ = {str(name): str(value) for name, value in request["env"].items()}
        os.environ.clear()  # libc's environment no longer points into the area rewritten below
        os.environ.update(environ)
        os.chdir(request["cwd"])
        os.umask(int(request["umask"]))
        with contextlib.suppress(OSError):
            os.sched_setaffinity(0, set(request["affinity"]))
        _rewrite(_area(48), [sys.executable, "-m", MODULE, *args])
        _rewrite(_area(50), [f"{name}={value}" for name, value in environ.items()])
        sys.path[0] = request["cwd"]
        sys.argv = ["-m", *args]
        import runpy

        import sitecustomize  # the node's start-up, now with this host's environment: its rank faults

        sitecustomize.start()
        try:
            runpy.run_module(MODULE, run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
            if not isinstance(stop.code, int) and stop.code is not None:
                print(stop.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


def serve(key: str) -> None:
    """The zygote: torch imported, then a fork per request until a minute passes with nothing running."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(_address(key))
    except OSError:  # another client started one first
        return
    import torch.distributed  # noqa: F401 - what every child inherits: torch and its collectives

    listener.listen(64)
    children: dict[int, socket.socket] = {}
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    idle_since = time.monotonic()
    while children or time.monotonic() - idle_since < IDLE_EXIT_S:
        for _ in selector.select(timeout=0.05):
            connection, _ = listener.accept()
            try:
                header, fds, _flags, _sender = socket.recv_fds(connection, 4, 3)
                (length,) = struct.unpack("!I", header)
                payload = b""
                while len(payload) < length:
                    chunk = connection.recv(length - len(payload))
                    if not chunk:
                        raise ConnectionResetError("the client went before its request was read")
                    payload += chunk
                request = json.loads(payload)
            except (OSError, ValueError, struct.error):
                connection.close()
                continue
            pid = os.fork()
            if pid == 0:
                listener.close()
                for other in children.values():
                    other.close()
                _child(connection, request, fds)
            for fd in fds:
                os.close(fd)
            children[pid] = connection
            with contextlib.suppress(OSError):
                connection.sendall(f"{pid}\n".encode())
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            if pid in children:
                finished = children.pop(pid)
                with contextlib.suppress(OSError):
                    finished.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
                finished.close()
            idle_since = time.monotonic()


if __name__ == "__main__":
    serve(sys.argv[1])
