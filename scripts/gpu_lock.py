"""Resolve and check the locked GPU stack (requirements/gpu-lock.txt) without a GPU.

    python scripts/gpu_lock.py compile    # rewrite requirements/gpu-lock.txt from pyproject + gpu.in
    python scripts/gpu_lock.py check      # CI: the lock still resolves, and is the whole resolved set
    python scripts/gpu_lock.py must-compile --glibc 2.28   # what has no wheel on EL8 nodes (built from sdists)

Both run ``uv pip compile`` for CUDA Linux x86-64 (``--python-platform x86_64-manylinux_2_28``) and
Python 3.11 on this machine, whatever it is: uv reads each wheel's metadata from the index (PEP 658)
and downloads no wheel; the three sdists of the stack (flash-attn, causal-conv1d, deepspeed) get their
dependencies from ``requirements/gpu-sdist-metadata.toml``, so nothing is built. Only the package
index has to be reachable.

``check`` resolves ``pyproject.toml`` (extras ``gpu`` and ``dev``) under the constraints of ``gpu.in``
and of the lock itself, then compares the result with the lock, pin by pin. Exit status: 0 the lock
holds; 1 it no longer resolves (uv's explanation follows) or differs from the resolved set (what is
missing, extra or different is named); 2 bad input (a pin of gpu.in or of the sdist metadata that is
not the lock's); 3 the index could not be reached or uv is missing (nothing was checked).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTHON_VERSION = "3.11"
PLATFORM = "x86_64-manylinux_2_28"
EXTRAS = ("gpu", "dev")
COMPILE_COMMAND = "python scripts/gpu_lock.py compile"
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;#]+)")
_OFFLINE = ("dns error", "failed to lookup address", "connect error", "client error (connect)",
            "network is unreachable", "operation timed out", "failed to fetch")


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def read_pins(path: Path) -> dict[str, str]:
    """``{normalised name: version}`` of the ``name==version`` lines of a requirements file."""
    pins: dict[str, str] = {}
    for lineno, line in enumerate(path.read_text().splitlines(), 1):
        text = line.strip()
        if not text or text.startswith("#") or text.startswith("-"):
            continue
        match = _PIN.match(text)
        if not match:
            raise ValueError(f"{path}:{lineno}: expected name==version, got {text!r}")
        name = normalise(match.group(1))
        if name in pins:
            raise ValueError(f"{path}:{lineno}: {match.group(1)} is pinned twice")
        pins[name] = match.group(2)
    return pins


def sdist_metadata_versions(path: Path) -> dict[str, str]:
    with path.open("rb") as fh:
        data = tomllib.load(fh)
    return {normalise(entry["name"]): str(entry["version"]) for entry in data.get("dependency-metadata", [])}


def uv_command() -> list[str] | None:
    found = shutil.which("uv")
    if found:
        return [found]
    try:
        import uv  # the PyPI package ships the binary

        return [uv.find_uv_bin()]
    except (ImportError, FileNotFoundError):
        return None


def compile_lock(root: Path, output: Path, constraints: list[Path]) -> subprocess.CompletedProcess:
    uv = uv_command()
    if uv is None:
        raise FileNotFoundError("uv is not installed (it is in the dev extra: pip install uv==0.13.9)")
    cmd = [*uv, "pip", "compile", "--quiet", "--config-file", str(root / "requirements/gpu-sdist-metadata.toml"),
           str(root / "pyproject.toml"), *[a for extra in EXTRAS for a in ("--extra", extra)],
           *[a for c in constraints for a in ("-c", str(c))],
           "--python-platform", PLATFORM, "--python-version", PYTHON_VERSION,
           "--custom-compile-command", COMPILE_COMMAND, "-o", str(output)]
    env = {**os.environ, "UV_PYTHON_DOWNLOADS": "never", "UV_NO_PROGRESS": "1"}
    return subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True)


def _uv_failure(proc: subprocess.CompletedProcess) -> tuple[int, str]:
    text = (proc.stderr or proc.stdout or "").strip()
    if any(marker in text.lower() for marker in _OFFLINE) and "no solution found" not in text.lower():
        return 3, f"could not reach the package index, nothing was checked:\n{text}"
    return 1, text


def check(root: Path, lock: Path, pins_file: Path) -> tuple[int, str]:
    """(exit status, report) of checking ``lock`` (see the module docstring)."""
    try:
        locked, wanted = read_pins(lock), read_pins(pins_file)
        metadata = sdist_metadata_versions(root / "requirements/gpu-sdist-metadata.toml")
    except (OSError, ValueError, tomllib.TOMLDecodeError) as exc:
        return 2, str(exc)
    bad = [f"{pins_file.name}: {n}=={v}, lock: {locked.get(n, 'absent')}" for n, v in wanted.items()
           if locked.get(n) != v]
    bad += [f"gpu-sdist-metadata.toml: {n}=={v}, lock: {locked.get(n, 'absent')}" for n, v in metadata.items()
            if locked.get(n) != v]
    if bad:
        return 2, "pins that disagree with the lock (rerun `" + COMPILE_COMMAND + "`):\n  " + "\n  ".join(bad)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "resolved.txt"
        try:
            proc = compile_lock(root, out, [pins_file, lock])
        except FileNotFoundError as exc:
            return 3, str(exc)
        if proc.returncode != 0:
            status, text = _uv_failure(proc)
            if status == 3:
                return status, text
            return 1, f"{lock} no longer resolves for {PLATFORM} / Python {PYTHON_VERSION}:\n{text}"
        resolved = read_pins(out)
    missing = sorted(set(resolved) - set(locked))
    unused = sorted(set(locked) - set(resolved))
    changed = sorted(n for n in set(resolved) & set(locked) if resolved[n] != locked[n])
    if missing or unused or changed:
        lines = [f"{lock} is not the resolved set (rerun `{COMPILE_COMMAND}`):"]
        lines += [f"  needed, not in the lock: {n}=={resolved[n]}" for n in missing]
        lines += [f"  in the lock, needed by nothing: {n}=={locked[n]}" for n in unused]
        lines += [f"  resolved {n}=={resolved[n]}, lock {locked[n]}" for n in changed]
        return 1, "\n".join(lines)
    key = ("torch", "transformers", "trl", "vllm", "flash-attn", "flash-linear-attention", "fla-core",
           "causal-conv1d", "deepspeed", "triton")
    versions = ", ".join(f"{n} {locked[n]}" for n in key if n in locked)
    return 0, f"{lock.name}: resolves ({len(locked)} packages; python {PYTHON_VERSION}, {versions})"


GLIBC_PLATFORMS = {"2.28": "x86_64-manylinux_2_28", "2.31": "x86_64-manylinux_2_31", "2.35": "x86_64-manylinux_2_35"}
"""glibc of the nodes -> uv's platform: 2.28 = RHEL/Rocky/Alma 8 (EL8), 2.31 = Debian 11 / Ubuntu 20.04,
2.35 = Ubuntu 22.04 (the containers: Debian 12 has 2.36)."""
_NO_WHEEL = re.compile(r"Because ([A-Za-z0-9][A-Za-z0-9._-]*)(?:\{[^}]*\})?==\S+ has no usable wheels")
BUILD_KIND = {"flash-attn": "CUDA extension: nvcc + the installed torch (slow; not timed here)",
              "causal-conv1d": "CUDA extension: nvcc + the installed torch",
              "llguidance": "Rust: cargo (its only Linux x86-64 wheel is manylinux_2_31)",
              "deepspeed": "Python only with DS_BUILD_OPS=0 (ops are JIT-built when used), seconds"}
"""How each package known to lack a wheel builds (others: 'unknown build')."""


def must_compile(root: Path, lock: Path, pins_file: Path, glibc: str = "2.28",
                 max_rounds: int = 12) -> tuple[int, list[str], str]:
    """(status, packages with no wheel for ``glibc``, report): what ``pip install -r lock`` must build there.

    uv resolves the lock with wheels only (``--only-binary`` naming every locked package but those
    found so far); each failure names one package without a usable wheel for the platform
    (``manylinux_2_28`` and older tags on EL8), which is then allowed to build, until the resolve
    succeeds. Reads wheel metadata from the index, downloads and builds nothing. Status as :func:`check`.
    """
    platform = GLIBC_PLATFORMS[glibc]
    try:
        locked = read_pins(lock)
    except (OSError, ValueError) as exc:
        return 2, [], str(exc)
    uv = uv_command()
    if uv is None:
        return 3, [], "uv is not installed (it is in the dev extra: pip install uv==0.13.9)"
    found: list[str] = []
    env = {**os.environ, "UV_PYTHON_DOWNLOADS": "never", "UV_NO_PROGRESS": "1"}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(max_rounds):
            binary = ",".join(n for n in sorted(locked) if n not in found)
            cmd = [*uv, "pip", "compile", "--quiet", "--config-file",
                   str(root / "requirements/gpu-sdist-metadata.toml"), str(root / "pyproject.toml"),
                   *[a for extra in EXTRAS for a in ("--extra", extra)], "-c", str(pins_file), "-c", str(lock),
                   "--only-binary", binary, "--python-platform", platform, "--python-version", PYTHON_VERSION,
                   "-o", str(Path(tmp) / "binary.txt")]
            proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True)
            if proc.returncode == 0:
                names = "; ".join(f"{n}=={locked[n]} ({BUILD_KIND.get(n, 'unknown build')})" for n in found) \
                    or "nothing"
                return 0, found, f"glibc {glibc} ({platform}): must compile {names}"
            status, text = _uv_failure(proc)
            match = _NO_WHEEL.search(text)
            if status == 3 or not match:
                return (status if status == 3 else 1), found, text
            found.append(normalise(match.group(1)))
    return 1, found, f"more than {max_rounds} packages without wheels: {found}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, prog="python scripts/gpu_lock.py", description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["compile", "check", "must-compile"])
    parser.add_argument("--glibc", choices=sorted(GLIBC_PLATFORMS), default="2.28",
                        help="must-compile: the nodes' glibc (2.28 = EL8)")
    parser.add_argument("--lock", type=Path, default=ROOT / "requirements/gpu-lock.txt")
    parser.add_argument("--pins", type=Path, default=ROOT / "requirements/gpu.in",
                        help="the top-level pins (default requirements/gpu.in)")
    args = parser.parse_args(argv)
    args.lock, args.pins = args.lock.resolve(), args.pins.resolve()
    start = time.perf_counter()
    if args.command == "compile":
        try:
            proc = compile_lock(ROOT, args.lock, [args.pins])
        except FileNotFoundError as exc:
            print(f"gpu_lock: {exc}", file=sys.stderr)
            return 3
        if proc.returncode != 0:
            print(f"gpu_lock: compile failed:\n{_uv_failure(proc)[1]}", file=sys.stderr)
            return _uv_failure(proc)[0]
        status, report = 0, f"wrote {args.lock} ({len(read_pins(args.lock))} packages)"
    elif args.command == "must-compile":
        status, _, report = must_compile(ROOT, args.lock, args.pins, args.glibc)
    else:
        status, report = check(ROOT, args.lock, args.pins)
    print(f"gpu_lock {args.command}: {report} [{time.perf_counter() - start:.1f} s]",
          file=sys.stdout if status == 0 else sys.stderr)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
