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

Playwright's own Chromium (``playwright install chromium``) lives on the host under
``$PLAYWRIGHT_BROWSERS_PATH`` or ``~/.cache/ms-playwright``, which the sandbox does not see (its
``$HOME`` is the workspace); that folder is bound read-only at the same mount. Whether it all works
is checked *inside a sandbox set up as a trial's* (the sandbox's own ``python3`` and environment,
a page rendered): a host where ``python3`` imports playwright only through a user site or
``PYTHONPATH`` passes a host check but not this one, and its web-page tasks are skipped with the fix
instead of running and scoring 0.2 with no screenshots.

What is needed, and how to provide it (the skip reason says the same when one is missing):
``/usr/bin/python3 -m pip install playwright`` (``--break-system-packages`` on Debian 12 and
later: the sandbox runs the system ``python3``), then ``playwright install chromium`` where its
CDN is reachable, or ``apt-get install chromium`` where it is not.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from unified.execution import LocalBackend, WorkspaceSpec

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


def own_browsers_dir() -> Path | None:
    """The host's Playwright browser folder with a Chromium in it (``$PLAYWRIGHT_BROWSERS_PATH``, else
    ``~/.cache/ms-playwright``), or None. The sandbox sees neither (its ``$HOME`` is the workspace
    and the host's environment is not inherited): it is bound read-only at :data:`BROWSERS_MOUNT`."""
    explicit = os.environ.get("PLAYWRIGHT_BROWSERS_PATH")
    for folder in ([Path(explicit)] if explicit and explicit != "0" else []) + [Path.home() / ".cache" / "ms-playwright"]:
        if any(folder.glob("chromium*")):
            return folder.resolve()
    return None


def _host_candidate() -> PlaywrightSetup:
    """The browser the host offers (Playwright's own, else a distribution's Chromium), before the sandbox check."""
    package = playwright_package_dir()
    if package is None:
        return PlaywrightSetup(missing=f"the sandbox's python3 ({PYTHON3}) cannot import playwright: "
                               f"run `{INSTALL_PLAYWRIGHT}`, then {INSTALL_BROWSER}")
    own = own_browsers_dir()
    if own is not None:
        return PlaywrightSetup(browser="playwright's own chromium", browsers_dir=own)
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        return PlaywrightSetup(missing=f"playwright is installed but has no browser: {INSTALL_BROWSER}")
    try:
        version = subprocess.run([chromium, "--version"], capture_output=True, text=True, timeout=60).stdout.strip()
        directory = browsers_dir_for(package, chromium, Path.home() / ".cache" / "unified" / "playwright-browsers")
    except (OSError, ValueError, KeyError, subprocess.TimeoutExpired) as exc:
        return PlaywrightSetup(missing=f"cannot point playwright at {chromium}: {exc}")
    return PlaywrightSetup(browser=f"Debian's {version or 'Chromium'} ({chromium})", browsers_dir=directory)


def sandbox_spec(setup: PlaywrightSetup, spec: WorkspaceSpec) -> WorkspaceSpec:
    """``spec`` showing ``setup``'s browser inside:
    its folder bound read-only at :data:`BROWSERS_MOUNT`, ``PLAYWRIGHT_BROWSERS_PATH`` naming it,
    no per-process address-space limit (Chromium reserves about a TiB; the sandbox-wide limit holds)."""
    if setup.browsers_dir is not None:
        spec.readonly_mounts.append((str(setup.browsers_dir), BROWSERS_MOUNT))
        spec.env["PLAYWRIGHT_BROWSERS_PATH"] = BROWSERS_MOUNT
    spec.per_process_address_space = False
    return spec


SANDBOX_CHECK = """import sys
from playwright.sync_api import sync_playwright
with sync_playwright() as p:
    browser = p.chromium.launch(headless=True)
    page = browser.new_page()
    page.set_content("<p id=x>ok</p>")
    print("BROWSER-OK", page.inner_text("#x"), browser.version)
    browser.close()
"""
"""What the web-page tasks' scripts do, in miniature: import Playwright, launch its Chromium with
no browser path, render a page."""


def check_in_sandbox(setup: PlaywrightSetup, code: str = SANDBOX_CHECK, memory_mb: int = 16384,
                     timeout_s: float = 120) -> str:
    """Run ``code`` with the sandbox's ``python3`` in a sandbox set up as a web-page trial's is
    (:func:`sandbox_spec`); ``""`` when it printed ``BROWSER-OK``, else what failed (one line)."""
    spec = sandbox_spec(setup, WorkspaceSpec(name="claw-browser-check-", timeout_s=timeout_s, memory_mb=memory_mb,
                                             commands={"python": PYTHON3}))
    session = LocalBackend().workspace(spec)
    try:
        session.host_workspace.mkdir(parents=True, exist_ok=True)
        (session.host_workspace / "check.py").write_text(code)
        session.start()
        result = session.exec([PYTHON3, "check.py"], timeout_s=timeout_s)
    except Exception as exc:  # no sandbox here: the tasks cannot run either
        return f"{type(exc).__name__}: {exc}"
    finally:
        session.close()
    if result.exit_code == 0 and "BROWSER-OK" in result.stdout:
        return ""
    tail = (result.stderr or result.stdout or "").strip().splitlines()
    why = "timed out" if result.timed_out else f"exit {result.exit_code}"
    return f"{why}: {tail[-1][:300] if tail else 'no output'}"


@functools.lru_cache(maxsize=1)
def playwright_setup() -> PlaywrightSetup:
    """How (or why not) the web-page tasks' Playwright scripts can run *inside the sandbox*: the
    host's candidate browser (module docstring), then :func:`check_in_sandbox` with the sandbox's
    own environment (its ``python3`` without the host's user site or ``PYTHONPATH``, the browser
    folder bound in). A failed check is the skip reason, with the fix."""
    candidate = _host_candidate()
    if not candidate.ok:
        return candidate
    failed = check_in_sandbox(candidate)
    if not failed:
        return candidate
    if "No module named" in failed and "playwright" in failed:
        fix = (f"the host's {PYTHON3} imports playwright but the sandbox's does not (a user site or PYTHONPATH "
               f"the sandbox does not see): run `{INSTALL_PLAYWRIGHT}` system-wide")
    else:
        fix = (f"playwright cannot launch {candidate.browser} inside the sandbox ({failed}): {INSTALL_BROWSER}, "
               "or set PLAYWRIGHT_BROWSERS_PATH to a folder holding Playwright's Chromium")
    return PlaywrightSetup(missing=fix[:600], browser=candidate.browser)
