"""Base images rebuilt from a distribution archive: which ``FROM`` names can be, and the root filesystem.

A Debian or Ubuntu ``FROM`` (``ubuntu:24.04``, ``debian:bookworm-slim``, ``debian:13.0-slim``)
is bootstrapped with ``debootstrap --variant=minbase`` from a mirror the site reaches
(``$UNIFIED_DEBIAN_MIRROR``, ``$UNIFIED_UBUNTU_MIRROR``, or the flags of the command), then
given what the site needs to fetch packages at all:

- the host's CA bundle, as ``/etc/ssl/certs/ca-certificates.crt`` and as a local certificate
  (``/usr/local/share/ca-certificates/unified-site.crt``) that a later ``update-ca-certificates``
  keeps, with ``SSL_CERT_FILE``/``REQUESTS_CA_BUNDLE`` pointing at it and ``UV_NATIVE_TLS=1``;
- the sources the published image has (Ubuntu: main restricted universe multiverse; Debian:
  main; each with -updates and -security), and empty package lists, as in the published image;
- the site's package-index settings that are set on the host (:data:`SITE_ENV`).

Every other base (``python:*``, ``node:*``, another registry's image ...) cannot be rebuilt:
:func:`base_recipe` raises :class:`CannotRebuild` naming it, and the task is a named skip.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

DEBIAN_SUITES = {"11": "bullseye", "12": "bookworm", "13": "trixie", "latest": "trixie", "stable": "trixie",
                 "oldstable": "bookworm", "testing": "forky", "unstable": "sid"}
UBUNTU_SUITES = {"20.04": "focal", "22.04": "jammy", "24.04": "noble", "24.10": "oracular", "25.04": "plucky",
                 "25.10": "questing", "latest": "noble", "rolling": "questing"}
"""``latest`` is what the tag meant when Terminal-Bench 2.0 was published (late 2025)."""
DEBIAN_MIRROR = "http://deb.debian.org/debian"
DEBIAN_SECURITY = "http://deb.debian.org/debian-security"
UBUNTU_MIRROR = "http://archive.ubuntu.com/ubuntu"
SITE_ENV = ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "UV_INDEX_URL", "UV_DEFAULT_INDEX", "UV_EXTRA_INDEX_URL",
            "UV_PYTHON_INSTALL_MIRROR", "npm_config_registry", "http_proxy", "https_proxy", "no_proxy",
            "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY")
"""Host variables carried into a rebuilt base when they are set (package indexes, proxies)."""
CA_PATH = "/etc/ssl/certs/ca-certificates.crt"


class CannotRebuild(ValueError):
    """A ``FROM`` image this module cannot rebuild from a distribution archive (a named skip)."""


@dataclass
class BaseRecipe:
    """How to rebuild one ``FROM`` image."""

    ref: str
    """The ``FROM`` name as the Dockerfile writes it (``ubuntu:24.04``)."""
    distro: str
    """``debian`` or ``ubuntu``."""
    suite: str
    """The release codename (``noble``, ``bookworm``)."""
    mirror: str
    security_mirror: str
    keyring: str | None = None
    """A keyring file debootstrap checks the archive with (None for Ubuntu here: no Ubuntu keyring on Debian)."""
    env: dict[str, str] = field(default_factory=dict)

    @property
    def qualified(self) -> str:
        """The name an engine resolves the ``FROM`` to (``docker.io/library/ubuntu:24.04``)."""
        name, _, tag = self.ref.partition(":")
        name = name.removeprefix("docker.io/").removeprefix("library/")
        return f"docker.io/library/{name}:{tag or 'latest'}"

    @property
    def key(self) -> str:
        return f"{self.distro}-{self.suite}"

    def describe(self) -> str:
        checked = "signatures checked" if self.keyring else "signatures NOT checked"
        return f"{self.ref} rebuilt with debootstrap --variant=minbase {self.suite} from {self.mirror} ({checked})"


def base_recipe(ref: str, debian_mirror: str | None = None, ubuntu_mirror: str | None = None) -> BaseRecipe:
    """The recipe for ``FROM ref``; CannotRebuild names what is not a Debian/Ubuntu base."""
    name, _, tag = ref.partition(":")
    tag = tag.split("@", 1)[0] or "latest"
    bare = name.removeprefix("docker.io/").removeprefix("library/")
    if bare == "debian":
        version = tag.removesuffix("-slim")
        version = re.sub(r"-\d{8}$", "", version)  # bookworm-20250520
        suite = DEBIAN_SUITES.get(version.split(".")[0], version)
        if suite not in set(DEBIAN_SUITES.values()) | {"buster", "sid"}:
            raise CannotRebuild(f"{ref}: unknown Debian release {tag!r}")
        mirror = debian_mirror or os.environ.get("UNIFIED_DEBIAN_MIRROR") or DEBIAN_MIRROR
        security = os.environ.get("UNIFIED_DEBIAN_SECURITY_MIRROR") or DEBIAN_SECURITY
        keyring = "/usr/share/keyrings/debian-archive-keyring.gpg"
        return BaseRecipe(ref, "debian", suite, mirror, security, keyring if Path(keyring).is_file() else None)
    if bare == "ubuntu":
        version = re.sub(r"-\d{8}(\.\d+)?$", "", tag)  # noble-20240423
        suite = UBUNTU_SUITES.get(version, version)
        if suite not in set(UBUNTU_SUITES.values()) | {"bionic"}:
            raise CannotRebuild(f"{ref}: unknown Ubuntu release {tag!r}")
        mirror = ubuntu_mirror or os.environ.get("UNIFIED_UBUNTU_MIRROR") or UBUNTU_MIRROR
        keyring = os.environ.get("UNIFIED_UBUNTU_KEYRING") or None
        return BaseRecipe(ref, "ubuntu", suite, mirror, mirror, keyring)
    raise CannotRebuild(f"{ref}: only Debian and Ubuntu bases can be rebuilt from a distribution archive "
                        "(this one needs its registry)")


def sources_list(recipe: BaseRecipe) -> str:
    """``/etc/apt/sources.list`` as the published image has it."""
    s = recipe.suite
    if recipe.distro == "ubuntu":
        comps = "main restricted universe multiverse"
        return "".join(f"deb {recipe.mirror} {suite} {comps}\n" for suite in (s, f"{s}-updates", f"{s}-security"))
    lines = [f"deb {recipe.mirror} {s} main\n"]
    if s not in ("sid", "unstable"):
        lines += [f"deb {recipe.mirror} {s}-updates main\n", f"deb {recipe.security_mirror} {s}-security main\n"]
    return "".join(lines)


def host_ca_bundle() -> Path | None:
    """The host's CA bundle (``$SSL_CERT_FILE``, ``$REQUESTS_CA_BUNDLE``, or Debian's path)."""
    for candidate in (os.environ.get("SSL_CERT_FILE"), os.environ.get("REQUESTS_CA_BUNDLE"), CA_PATH):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    return None


def site_env(ca: Path | None) -> dict[str, str]:
    """Variables a rebuilt base gets: the CA settings, then the host's package-index settings."""
    env = {"SSL_CERT_FILE": CA_PATH, "REQUESTS_CA_BUNDLE": CA_PATH, "UV_NATIVE_TLS": "1"} if ca else {}
    env.update({k: os.environ[k] for k in SITE_ENV if os.environ.get(k)})
    return env


def debootstrap_argv(recipe: BaseRecipe, target: Path) -> list[str]:
    argv = ["debootstrap", "--variant=minbase"]
    argv += [f"--keyring={recipe.keyring}"] if recipe.keyring else ["--no-check-gpg"]
    argv += [recipe.suite, str(target), recipe.mirror]
    script = Path("/usr/share/debootstrap/scripts")
    if not (script / recipe.suite).exists():  # newer releases than this debootstrap knows
        argv.append(str(script / ("gutsy" if recipe.distro == "ubuntu" else "sid")))
    return argv


def configure_rootfs(root: Path, recipe: BaseRecipe, ca: Path | None) -> None:
    """Sources, empty package lists and the site's CA bundle in a bootstrapped tree."""
    (root / "etc/apt/sources.list").write_text(sources_list(recipe))
    for leftover in (root / "var/lib/apt/lists").glob("*"):
        if leftover.is_file():
            leftover.unlink()
    shutil.rmtree(root / "var/cache/apt/archives", ignore_errors=True)
    (root / "var/cache/apt/archives/partial").mkdir(parents=True, exist_ok=True)
    if ca is not None:
        local = root / "usr/local/share/ca-certificates"
        local.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ca, local / "unified-site.crt")
        (root / "etc/ssl/certs").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ca, root / CA_PATH.lstrip("/"))


def build_rootfs(recipe: BaseRecipe, cache: Path, log=print) -> Path:
    """The rebuilt base as a tar in ``cache`` (bootstrapped once; later calls reuse it)."""
    out = cache / "rootfs" / f"{recipe.key}.tar"
    if out.is_file():
        return out
    if shutil.which("debootstrap") is None:
        raise CannotRebuild(f"{recipe.ref}: debootstrap is not installed (apt-get install -y debootstrap)")
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"unified-{recipe.key}-", dir=out.parent))
    try:
        start = time.monotonic()
        argv = debootstrap_argv(recipe, work / "root")
        log(f"images: {' '.join(argv)}")
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=3600, stdin=subprocess.DEVNULL)
        if proc.returncode != 0:
            lines = (proc.stdout + proc.stderr).strip().splitlines()
            raise CannotRebuild(f"{recipe.ref}: debootstrap failed: {' | '.join(lines[-3:])}")
        configure_rootfs(work / "root", recipe, host_ca_bundle())
        partial = out.with_suffix(".tar.part")
        subprocess.run(["tar", "--numeric-owner", "-C", str(work / "root"), "-cf", str(partial), "."], check=True,
                       capture_output=True, timeout=1800)
        partial.replace(out)
        log(f"images: {recipe.key} bootstrapped in {time.monotonic() - start:.0f} s -> {out}")
        return out
    finally:
        shutil.rmtree(work, ignore_errors=True)
