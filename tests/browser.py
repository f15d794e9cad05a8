"""The acceptance report in a real headless browser: Debian's chromium driven by playwright (no browser download).

``open_report`` loads the report from ``file://`` and returns what a reader would see: console errors, every URL
the page asked for, each plot's declared and drawn data points, the quarantined nodes' cards; it keeps a
full-page screenshot under ``test-artifacts/``.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = shutil.which("chromium")
MISSING = "needs Debian's chromium and the playwright package (`make test` installs both)"

try:
    from playwright.sync_api import sync_playwright
except ImportError:  # pragma: no cover - make test installs it
    sync_playwright = None


@dataclass
class SeenReport:
    console_errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    plots: list[dict] = field(default_factory=list)  # title, declared, drawn, visible
    cards: list[str] = field(default_factory=list)
    text: str = ""
    screenshot: Path | None = None


def available() -> bool:
    return bool(CHROMIUM) and sync_playwright is not None


def open_report(html: Path, name: str) -> SeenReport:
    assert available(), MISSING
    seen = SeenReport()
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1100, "height": 900})
            page.on("console", lambda message: seen.console_errors.append(message.text)
                    if message.type == "error" else None)
            page.on("pageerror", lambda error: seen.console_errors.append(str(error)))
            page.on("request", lambda request: seen.requests.append(request.url))
            page.goto(html.resolve().as_uri(), wait_until="load", timeout=30_000)
            seen.plots = page.eval_on_selector_all("svg.plot", """plots => plots.map(plot => ({
                title: plot.getAttribute('aria-label'),
                declared: Number(plot.getAttribute('data-points')),
                drawn: plot.querySelectorAll('.point').length,
                visible: Array.from(plot.querySelectorAll('.point')).filter(point => {
                    const box = point.getBoundingClientRect(); return box.width > 0 && box.height > 0; }).length,
                flagged: plot.querySelectorAll('.point.flagged').length }))""")
            seen.cards = page.eval_on_selector_all(".card", "cards => cards.map(card => card.dataset.node)")
            seen.text = page.inner_text("body")
            seen.screenshot = ARTIFACTS / f"{name}.png"
            page.screenshot(path=str(seen.screenshot), full_page=True)
        finally:
            browser.close()
    return seen
