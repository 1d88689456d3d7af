"""Playwright for Claw-Eval's web-page tasks, with Debian's Chromium when Playwright's own is absent.

The multimodal web-page tasks (M001-M014) are graded from screenshots that a snapshot script
(``fixtures/take_recording.py``) takes with Playwright: ``p.chromium.launch(headless=True)``, no
browser path. The official agent image (``Dockerfile.agent``) runs ``pip install playwright`` and
``playwright install --with-deps chromium``, which downloads Playwright's Chromium build from its
CDN. Where that download is not reachable, Playwright drives a distribution's Chromium as well:
Playwright looks for its browser under ``$PLAYWRIGHT_BROWSERS_PATH`` at
``chromium_headless_shell-REV/chrome-headless-shell-linux64/chrome-headless-shell`` (``REV`` from
the installed package's ``driver/package/browsers.json``), so a directory of links by those
names to ``/usr/bin/chromium``, bound read-only into the sandbox with that variable set, makes the
tasks' own scripts run unchanged. The result says which browser rendered the pages (a Chromium
of another version than the official image's), and the aggregate names it as a difference.

What is needed, and how to provide it (the skip reason says the same when one is missing):
``/usr/bin/python3 -m pip install playwright`` (``--break-system-packages`` on Debian 12 and
later: the sandbox runs the system ``python3``), then ``playwright install chromium`` where its
CDN is reachable, or ``apt-get install chromium`` where it is not.
"""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

PYTHON3 = "/usr/bin/python3"
BROWSERS_MOUNT = "/tmp/.unified-playwright-browsers"
"""Where the directory of links is bound inside the sandbox (``PLAYWRIGHT_BROWSERS_PATH``)."""
_LAYOUTS = {"chromium-headless-shell": ("chromium_headless_shell-{rev}", ["chrome-headless-shell-linux64/chrome-headless-shell",
                                                                        "chrome-linux/headless_shell"]),
            "chromium": ("chromium-{rev}", ["chrome-linux64/chrome", "chrome-linux/chrome"])}
"""Playwright's browser folders, by browsers.json name: the folder, then the executable (current and older layouts)."""
INSTALL_PLAYWRIGHT = f"{PYTHON3} -m pip install --break-system-packages playwright"
INSTALL_BROWSER = ("`playwright install chromium` (needs Playwright's CDN) or `apt-get install chromium` "
                   "(Debian's; the adapter points Playwright at it)")


@dataclass(frozen=True)
class PlaywrightSetup:
    """Whether the sandbox's ``python3`` can drive a browser with Playwright, and with which one."""

    missing: str = ""
    """Empty when it can; else what is missing and how to provide it (one line)."""
    browser: str = ""
    """``playwright's own chromium`` or ``Debian's Chromium VERSION (/usr/bin/chromium)``."""
    browsers_dir: Path | None = None
    """Host directory to bind at :data:`BROWSERS_MOUNT` and name in ``PLAYWRIGHT_BROWSERS_PATH``; None: Playwright's own."""

    @property
    def ok(self) -> bool:
        return not self.missing


def playwright_package_dir(python: str = PYTHON3) -> Path | None:
    """The ``playwright`` package directory ``python`` imports, or None when it cannot import it."""
    try:
        probe = subprocess.run([python, "-c", "import os, playwright.sync_api as s, playwright as p; "
                                "print(os.path.dirname(p.__file__))"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return Path(probe.stdout.strip()) if probe.returncode == 0 and probe.stdout.strip() else None


def browsers_dir_for(package_dir: Path, chromium: str, cache: Path) -> Path:
    """A ``PLAYWRIGHT_BROWSERS_PATH`` directory whose Chromium entries (for this package's revisions) link to ``chromium``."""
    spec = json.loads((package_dir / "driver" / "package" / "browsers.json").read_text())
    revs = {b["name"]: str(b["revision"]) for b in spec.get("browsers", []) if b.get("name") in _LAYOUTS}
    if not revs:
        raise ValueError(f"{package_dir}/driver/package/browsers.json names no Chromium revision")
    out = cache / ("-".join(f"{n}{r}" for n, r in sorted(revs.items())) + "-" + Path(chromium).name)
    for name, rev in revs.items():
        folder, executables = _LAYOUTS[name]
        for exe in executables:
            link = out / folder.format(rev=rev) / exe
            link.parent.mkdir(parents=True, exist_ok=True)
            if not (link.is_symlink() and str(link.readlink()) == chromium):
                link.unlink(missing_ok=True)
                link.symlink_to(chromium)
    return out


def _own_chromium() -> bool:
    return any(Path.home().glob(".cache/ms-playwright/chromium*"))


@functools.lru_cache(maxsize=1)
def playwright_setup() -> PlaywrightSetup:
    """How (or why not) the web-page tasks' Playwright scripts can run here (module docstring)."""
    package = playwright_package_dir()
    if package is None:
        return PlaywrightSetup(missing=f"the sandbox's python3 ({PYTHON3}) cannot import playwright: "
                               f"run `{INSTALL_PLAYWRIGHT}`, then {INSTALL_BROWSER}")
    if _own_chromium():
        return PlaywrightSetup(browser="playwright's own chromium")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        return PlaywrightSetup(missing=f"playwright is installed but has no browser: {INSTALL_BROWSER}")
    try:
        version = subprocess.run([chromium, "--version"], capture_output=True, text=True, timeout=60).stdout.strip()
        directory = browsers_dir_for(package, chromium, Path.home() / ".cache" / "unified" / "playwright-browsers")
    except (OSError, ValueError, KeyError, subprocess.TimeoutExpired) as exc:
        return PlaywrightSetup(missing=f"cannot point playwright at {chromium}: {exc}")
    return PlaywrightSetup(browser=f"Debian's {version or 'Chromium'} ({chromium})", browsers_dir=directory)
