"""A real node_exporter and a real Prometheus on loopback, started and stopped by a test.

node_exporter serves only its textfile collector from a directory; Prometheus scrapes it every second. Both bind
127.0.0.1 on free ports; every wait is bounded.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

NODE_EXPORTER = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
PROMETHEUS = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")
MISSING = "needs Debian's prometheus and prometheus-node-exporter (`make test` installs them)"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _get(url: str, timeout: float = 2.0) -> Any:
    assert url.startswith("http://127.0.0.1:"), url  # loopback only
    with urllib.request.urlopen(url, timeout=timeout) as answer:
        return answer.read().decode()


class Stack:
    def __init__(self, prometheus_port: int, exporter_port: int) -> None:
        self.prometheus = f"http://127.0.0.1:{prometheus_port}"
        self.exporter = f"http://127.0.0.1:{exporter_port}"

    def query(self, promql: str) -> list[dict[str, Any]]:
        answer = json.loads(_get(f"{self.prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": promql})))
        assert answer["status"] == "success", answer
        return answer["data"]["result"]

    def wait_for(self, promql: str, *, timeout_s: float = 60.0) -> list[dict[str, Any]]:
        """The first non-empty answer to ``promql`` (Prometheus needs a scrape or two after start)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                result = self.query(promql)
            except OSError:
                result = []
            if result:
                return result
            time.sleep(0.5)
        raise AssertionError(f"Prometheus gave no answer to {promql!r} within {timeout_s:g} s")


@contextmanager
def running(textfile_dir: Path, workdir: Path) -> Iterator[Stack]:
    assert NODE_EXPORTER and PROMETHEUS, MISSING
    exporter_port, prometheus_port = free_port(), free_port()
    config = workdir / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        f"  - job_name: node\n    static_configs: [{{targets: ['127.0.0.1:{exporter_port}']}}]\n")
    logs = [open(workdir / name, "wb") for name in ("node_exporter.log", "prometheus.log")]  # noqa: SIM115
    processes = [
        subprocess.Popen([NODE_EXPORTER, f"--web.listen-address=127.0.0.1:{exporter_port}",
                          "--collector.disable-defaults", "--collector.textfile",
                          f"--collector.textfile.directory={textfile_dir}"], stdout=logs[0], stderr=logs[0]),
        subprocess.Popen([PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={workdir / 'tsdb'}",
                          f"--web.listen-address=127.0.0.1:{prometheus_port}"], stdout=logs[1], stderr=logs[1]),
    ]
    try:
        yield Stack(prometheus_port, exporter_port)
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        for log in logs:
            log.close()
