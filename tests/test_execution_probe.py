"""The container-start probe: a tiny real run per engine, known failures as one skip with a one-line fix."""

from __future__ import annotations

import os
import resource
import shutil
import tomllib

import pytest

from unified.execution import BackendUnavailable, PodmanBackend
from unified.execution import probe as probe_mod
from unified.execution.probe import classify, containers_conf_text, probe_engine

# stderr lines podman 4.3 printed on a cgroup-v1-hybrid host without CAP_SYS_RESOURCE
CRUN_HYBRID = "Error: OCI runtime error: crun: cgroups in hybrid mode not supported, drop all controllers from cgroupv2"
RLIMIT = ("Error: runc: runc create failed: unable to start container process: error during container init: error "
          "setting rlimits for ready process: error setting rlimit type 7: operation not permitted: OCI permission denied")


@pytest.mark.parametrize("stderr", [CRUN_HYBRID, RLIMIT])
def test_known_start_failures_carry_the_one_line_fix(stderr):
    problem = classify("podman", stderr)
    assert "cannot start a container" in problem.reason
    assert "\n" not in problem.how_to_fix and "runc" in problem.how_to_fix and "CONTAINERS_CONF" in problem.how_to_fix
    other = classify("podman", "Error: something else entirely")
    assert "runc" not in other.how_to_fix and "something else" in other.reason


def test_the_suggested_containers_conf_stays_under_the_hosts_hard_limits():
    conf = tomllib.loads(containers_conf_text())
    assert conf["engine"]["runtime"] == "runc"
    limits = dict(item.split("=") for item in conf["containers"]["default_ulimits"])
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    nofile = int(limits["nofile"].split(":")[1])
    assert hard == resource.RLIM_INFINITY or nofile <= hard
    assert int(limits["nproc"].split(":")[0]) <= 32768


def test_an_engine_that_does_not_answer_is_called_busy_not_absent(tmp_path, monkeypatch):
    engine = tmp_path / "slowengine"
    engine.write_text("#!/bin/sh\nexec sleep 30\n")  # a real program that never answers in time
    engine.chmod(0o755)
    monkeypatch.setattr(probe_mod, "PROBE_TIMEOUT_S", 1.0)
    problem = probe_engine.__wrapped__(str(engine))
    assert isinstance(problem, BackendUnavailable)
    assert "did not answer within 1 s (machine busy?)" in problem.reason
    assert "service" not in problem.reason


@pytest.mark.slow
def test_podman_probe_really_starts_a_container(tmp_path, monkeypatch):
    """Needs podman and runc; the good config starts a container, a config over the hard limit is a known failure."""
    if shutil.which("podman") is None or shutil.which("runc") is None:
        pytest.skip("podman and runc are not both installed here")
    good = tmp_path / "good.conf"
    good.write_text(containers_conf_text())
    monkeypatch.setenv("CONTAINERS_CONF", str(good))
    problem = probe_engine.__wrapped__("podman")
    if problem is not None and os.geteuid() != 0:
        pytest.skip(f"rootless podman cannot start containers here: {problem}")
    assert problem is None
    assert PodmanBackend().unavailable_reason() is None
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard == resource.RLIM_INFINITY or hard >= 1 << 20:
        return
    bad = tmp_path / "bad.conf"
    bad.write_text(f'[containers]\ndefault_ulimits = ["nofile={hard + 1}:{hard + 1}"]\n[engine]\nruntime = "runc"\n')
    monkeypatch.setenv("CONTAINERS_CONF", str(bad))
    problem = probe_engine.__wrapped__("podman")
    if problem is None:
        pytest.skip("this host lets containers raise their rlimits (CAP_SYS_RESOURCE)")
    assert "ulimits" in problem.reason and "CONTAINERS_CONF" in problem.how_to_fix
    import unified.execution as execution

    execution._available.cache_clear()
    probe_engine.cache_clear()
    try:
        assert execution.get_backend("auto").name != "podman"  # an engine that cannot start containers is passed over
    finally:
        execution._available.cache_clear()
        probe_engine.cache_clear()
