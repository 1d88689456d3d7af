"""The ``docker`` / ``podman`` command lines of :mod:`unified.execution.containers` (one CLI dialect): plain functions
of the spec, tested without an engine, and used by the engine probe (:mod:`unified.execution.probe`) too."""

from __future__ import annotations

from pathlib import Path

from unified.execution.base import EnvironmentSpec, shell_join
from unified.execution.episode_network import CAP_DROP

KEEPALIVE = ["sh", "-c", "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done"]
LABEL = "unified.session"


def build_argv(engine: str, spec: EnvironmentSpec, tag: str) -> list[str]:
    """``docker build`` of the spec's context."""
    ctx = Path(spec.build_context)
    return [engine, "build", "-t", tag, "-f", str(ctx / spec.dockerfile), str(ctx)]


def run_argv(engine: str, spec: EnvironmentSpec, image: str, name: str, mounts: list[str] = (),
             network: list[str] = ()) -> list[str]:
    """``docker run -d`` of a keep-alive container with the spec's limits (``mounts``: extra ``-v`` options;
    ``network``: the episode's own network, :mod:`unified.execution.episode_network`), without ``CAP_NET_RAW``."""
    argv = [engine, "run", "-d", "--name", name, "--label", f"{LABEL}={name}", "--init", *CAP_DROP, *mounts]
    if not spec.network:
        argv += ["--network", "none"]
    else:
        argv += list(network)
    if spec.cpus:
        argv += ["--cpus", f"{spec.cpus:g}"]
    if spec.memory_mb:
        argv += ["--memory", f"{int(spec.memory_mb)}m"]
    if spec.max_processes:
        argv += ["--pids-limit", str(int(spec.max_processes))]
    if spec.workdir:
        argv += ["-w", spec.workdir]
    for key, value in spec.env.items():
        argv += ["-e", f"{key}={value}"]
    return argv + ["--entrypoint", KEEPALIVE[0], image, *KEEPALIVE[1:]]


def exec_argv(engine: str, name: str, command: str | list[str], timeout_s: float, workdir: str | None = None,
              env: dict[str, str] | None = None, interactive: bool = False, has_timeout: bool = True) -> list[str]:
    """``docker exec`` of ``command``, wrapped in the image's ``timeout -k`` when it has one (default capabilities)."""
    argv = [engine, "exec"]
    if interactive:
        argv.append("-i")
    if workdir:
        argv += ["-w", workdir]
    for key, value in (env or {}).items():
        argv += ["-e", f"{key}={value}"]
    inner = shell_join(command)
    if has_timeout:
        inner = ["timeout", "-k", "5", f"{max(timeout_s, 0.1):g}", *inner]
    return argv + [name, *inner]


def rm_argv(engine: str, name: str) -> list[str]:
    return [engine, "rm", "-f", "-v", name]
