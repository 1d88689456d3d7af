"""Air-gapped images: which FROM bases can be rebuilt from a distribution archive, and how (no engine needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from unified.execution.images import CannotRebuild, base_recipe, from_images
from unified.execution.images.__main__ import main
from unified.execution.images.bases import configure_rootfs, debootstrap_argv, site_env, sources_list
from unified.execution.images.engines import uv_version_needed


@pytest.mark.parametrize("ref, distro, suite", [
    ("ubuntu:24.04", "ubuntu", "noble"), ("ubuntu:noble-20240423", "ubuntu", "noble"),
    ("docker.io/library/ubuntu:22.04", "ubuntu", "jammy"), ("debian:bookworm-slim", "debian", "bookworm"),
    ("debian:13.0-slim", "debian", "trixie"), ("debian:bullseye-slim", "debian", "bullseye"),
    ("debian:12", "debian", "bookworm"),
])
def test_debian_and_ubuntu_bases_map_to_their_release(ref, distro, suite):
    recipe = base_recipe(ref)
    assert (recipe.distro, recipe.suite) == (distro, suite)
    assert recipe.qualified.startswith(f"docker.io/library/{distro}:")


@pytest.mark.parametrize("ref", ["python:3.13-slim-bookworm", "node:20", "ghcr.io/org/img:1", "ubuntu:99.04"])
def test_other_bases_are_named_skips(ref):
    with pytest.raises(CannotRebuild, match=ref.split(":")[0]):
        base_recipe(ref)


def test_mirrors_are_configurable_and_sources_match_the_published_image(monkeypatch):
    monkeypatch.setenv("UNIFIED_UBUNTU_MIRROR", "http://mirror.site.example/ubuntu")
    noble = base_recipe("ubuntu:24.04")
    assert sources_list(noble).splitlines() == [
        f"deb http://mirror.site.example/ubuntu {s} main restricted universe multiverse"
        for s in ("noble", "noble-updates", "noble-security")]
    argv = debootstrap_argv(noble, Path("/tmp/x"))
    assert argv[:2] == ["debootstrap", "--variant=minbase"] and "http://mirror.site.example/ubuntu" in argv
    bookworm = base_recipe("debian:bookworm", debian_mirror="http://deb.site.example/debian")
    assert "deb http://deb.site.example/debian bookworm main" in sources_list(bookworm)
    assert "bookworm-security" in sources_list(bookworm)


def test_rootfs_gets_the_site_ca_bundle_and_empty_package_lists(tmp_path, monkeypatch):
    root = tmp_path / "root"
    (root / "etc/apt").mkdir(parents=True)
    (root / "var/lib/apt/lists").mkdir(parents=True)
    (root / "var/lib/apt/lists/old_Packages").write_text("x")
    ca = tmp_path / "site.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\nsite\n-----END CERTIFICATE-----\n")
    configure_rootfs(root, base_recipe("debian:bookworm"), ca)
    assert (root / "etc/ssl/certs/ca-certificates.crt").read_text() == ca.read_text()
    assert (root / "usr/local/share/ca-certificates/unified-site.crt").is_file()  # kept by update-ca-certificates
    assert not (root / "var/lib/apt/lists/old_Packages").exists()
    monkeypatch.setenv("PIP_INDEX_URL", "https://pypi.site.example/simple")
    env = site_env(ca)
    assert env["UV_NATIVE_TLS"] == "1" and env["SSL_CERT_FILE"] == env["REQUESTS_CA_BUNDLE"]
    assert env["PIP_INDEX_URL"] == "https://pypi.site.example/simple"


def test_from_lines_skip_build_stages_and_resolve_args(tmp_path):
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text("ARG BASE=ubuntu:24.04\nFROM --platform=linux/amd64 ${BASE} AS build\nRUN make\n"
                          "FROM build AS test\nFROM debian:bookworm-slim\nCOPY --from=build /x /x\n")
    assert from_images(dockerfile) == ["ubuntu:24.04", "debian:bookworm-slim"]


def test_uv_is_added_only_when_the_task_uses_it(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test.sh").write_text("#!/bin/bash\ncurl -LsSf https://astral.sh/uv/0.9.5/install.sh | sh\n"
                                                "uvx -p 3.13 -w pytest pytest /tests\n")
    assert uv_version_needed(tmp_path) == "0.9.5"
    (tmp_path / "tests" / "test.sh").write_text("#!/bin/bash\nuv run pytest\n")
    assert uv_version_needed(tmp_path) == ""
    (tmp_path / "tests" / "test.sh").write_text("#!/bin/bash\npython3 -m pytest  # no uv here\n")
    assert uv_version_needed(tmp_path) is None


def test_cli_reports_a_base_it_cannot_rebuild_as_a_named_skip(tmp_path, capsys):
    import shutil

    if shutil.which("podman") is None:
        pytest.skip("podman is not installed")
    task = tmp_path / "py-task"
    (task / "environment").mkdir(parents=True)
    (task / "environment" / "Dockerfile").write_text("FROM python:3.13-slim-bookworm\nWORKDIR /app\n")
    assert main(["build", str(task)]) == 0
    out = capsys.readouterr().out
    assert "py-task: skipped" in out and "cannot rebuild the base: python:3.13-slim-bookworm" in out


def test_containers_conf_command_writes_the_probe_fix(tmp_path):
    import tomllib

    path = tmp_path / "c" / "containers.conf"
    assert main(["containers-conf", str(path)]) == 0
    assert tomllib.loads(path.read_text())["engine"]["runtime"] == "runc"


def test_uvs_own_image_used_as_a_file_source_is_rebuilt_from_the_wheel(tmp_path):
    from unified.execution.images.engines import UV_IMAGE

    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text("FROM ubuntu:24.04 as build\nCOPY --from=ghcr.io/astral-sh/uv:0.8.14 /uv /uvx /bin/\n"
                          "FROM ubuntu:24.04 AS target\nCOPY --from=build /app /app\n")
    refs = from_images(dockerfile)
    assert refs == ["ubuntu:24.04", "ghcr.io/astral-sh/uv:0.8.14"]
    assert UV_IMAGE.fullmatch(refs[1]).group(1) == "0.8.14"


def test_a_failed_build_line_carries_the_infrastructure_evidence():
    """The census sorts a failed build by the CLI's output: a download failure inside a RUN step must show there."""
    from unified.execution.images import BuildResult
    from unified.execution.images.__main__ import result_line
    from unified.execution.infra import infrastructure_evidence

    reason = ("podman build ... failed (exit 2):\n[1/2] STEP 6/6: RUN uv run /root/x.py\n"
              "error: Request failed after 3 retries\n  Caused by: dns error\n"
              "  Caused by: failed to lookup address information: Name or service not known")
    line = result_line(BuildResult(task="t", status="failed", reason=reason, seconds=12.7))
    assert line.startswith("t: failed  podman build ... failed (exit 2):") and line.endswith("(13 s)")
    assert infrastructure_evidence(line), line
    assert "|" not in result_line(BuildResult(task="t", status="built", image="unified-t:1", seconds=3))
