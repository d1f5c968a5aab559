"""Load an HTML file in headless Chromium (Debian's `chromium`): the DOM after load, the page's console lines,
the load time and optionally a screenshot. Used by the report's browser test and `make report-screenshot`."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import WattschedError

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
FLAGS = ("--headless=new", "--disable-gpu", "--no-sandbox", "--hide-scrollbars", "--no-first-run")
# Chromium logs what a page writes to its console, and uncaught errors, as lines with CONSOLE in them.
CONSOLE = re.compile(r"CONSOLE|Uncaught")
# A reference the browser would fetch over the network: a src/href/url() to http(s) or protocol-relative.
NETWORK_REF = re.compile(
    r"""\b(?:src|href|srcset|action)\s*=\s*["']?\s*(?:https?:)?//|url\(\s*["']?\s*(?:https?:)?//""", re.I
)


@dataclass(frozen=True)
class PageLoad:
    dom: str  # the serialised DOM after load
    console: list[str]  # console lines of the page (errors, warnings, logs, uncaught exceptions)
    seconds: float  # wall time of the browser run that dumped the DOM (start-up included)
    baseline_seconds: float  # the same browser run on an empty page: start-up alone
    screenshot: Path | None


def find_chromium() -> str | None:
    """The headless browser to use: $WATTSCHED_CHROMIUM, else the first of BROWSERS on PATH."""
    explicit = os.environ.get("WATTSCHED_CHROMIUM")
    if explicit:
        return shutil.which(explicit) or (explicit if Path(explicit).is_file() else None)
    return next((found for name in BROWSERS if (found := shutil.which(name))), None)


def _run(browser: str, url: str, extra: list[str], profile: str, timeout: float) -> tuple[str, str, float]:
    started = time.perf_counter()
    try:
        done = subprocess.run(
            [browser, *FLAGS, f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", *extra, url],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise WattschedError(f"{browser} did not finish loading {url} within {timeout:.0f} s") from None
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise WattschedError(f"{browser} failed on {url} (exit {done.returncode}): {done.stderr[-500:]}")
    return done.stdout, done.stderr, seconds


def load_page(
    page: str | Path,
    screenshot: str | Path | None = None,
    width: int = 1280,
    height: int = 3000,
    timeout: float = 60.0,
    browser: str | None = None,
) -> PageLoad:
    """Load `page` (a local HTML file) in headless Chromium: dump its DOM (timed), and write a `width` x `height`
    screenshot PNG when `screenshot` is given."""
    browser = browser or find_chromium()
    if browser is None:
        raise WattschedError(
            f"no headless browser found (tried {', '.join(BROWSERS)}; or set WATTSCHED_CHROMIUM)"
        )
    url = Path(page).resolve().as_uri()
    with tempfile.TemporaryDirectory(prefix="wattsched-chromium-") as profile:
        empty = Path(profile) / "empty.html"
        empty.write_text("<!DOCTYPE html><html><body></body></html>", encoding="utf-8")
        _, _, baseline = _run(browser, empty.as_uri(), ["--dump-dom"], profile, timeout)
        dom, stderr, seconds = _run(browser, url, ["--dump-dom"], profile, timeout)
        console = [line for line in stderr.splitlines() if CONSOLE.search(line)]
        shot = None
        if screenshot is not None:
            shot = Path(screenshot).resolve()
            shot.parent.mkdir(parents=True, exist_ok=True)
            _, stderr, _ = _run(
                browser, url, [f"--screenshot={shot}", f"--window-size={width},{height}"], profile, timeout
            )
            console += [line for line in stderr.splitlines() if CONSOLE.search(line)]
            if not shot.is_file():
                raise WattschedError(f"{browser} wrote no screenshot to {shot}")
    return PageLoad(dom, list(dict.fromkeys(console)), seconds, baseline, shot)


def network_refs(text: str) -> list[str]:
    """The references in an HTML text that a browser would fetch from the network."""
    return [m.group(0) for m in NETWORK_REF.finditer(text)]
