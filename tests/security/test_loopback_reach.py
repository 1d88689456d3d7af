"""Promise: an agent cannot reach the host's loopback services, nor call the model server as its own.

Attack (Terminal-Bench's default is the network on): a ``local`` sandbox with the network shared
the host's network namespace, so the agent saw every listening loopback port and called them (the
in-process model/judge server with no token, the mock services of another episode), and the
host's abstract Unix sockets. Now the ``local`` backend refuses the network (with the reason),
the Terminal-Bench adapter turns it off there and says so, and the in-process server answers only
requests that carry its per-server bearer token.
"""

from __future__ import annotations

import json
import socket
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from _process_support import LoopbackListener
from security._support import needs_local
from unified.execution import EnvironmentSpec, ExecutionError, LocalBackend

FIXTURES = Path(__file__).parents[1] / "fixtures" / "terminal_bench"
CONNECT = ("python3 -c 'import socket, sys; socket.create_connection((\"127.0.0.1\", int(sys.argv[1])), 3); "
           "print(\"connected\")' {port}; python3 -c 'import socket; s = socket.socket(socket.AF_UNIX); "
           "s.connect(\"\\0{abstract}\"); print(\"abstract\")'")


@pytest.fixture
def abstract_socket():
    """A listening abstract Unix socket on the host (no file: only the network namespace scopes it)."""
    name = f"unified-test-{id(object())}"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind("\0" + name)
    sock.listen(4)
    threading.Thread(target=lambda: [sock.accept() for _ in range(4)], daemon=True).start()
    yield name
    sock.close()


@needs_local
def test_a_local_session_with_the_network_cannot_reach_host_loopback(abstract_socket):
    server = LoopbackListener()
    reached = ""
    try:
        with LocalBackend().start(EnvironmentSpec(network=True)) as session:
            reached = session.exec(CONNECT.format(port=server.port, abstract=abstract_socket)).stdout
    except ExecutionError as exc:  # refused, with the reason
        assert "network on is refused" in str(exc) and "loopback" in str(exc), exc
    assert "connected" not in reached and "abstract" not in reached and server.hits == 0, reached
    server.sock.close()


@needs_local
def test_terminal_bench_on_the_local_backend_runs_without_the_network_and_says_so():
    from evaluators.terminal_bench import TerminalBench2Adapter

    adapter = TerminalBench2Adapter(root=str(FIXTURES), backend="local", tasks="fixture_region_report",
                                    agent="tool_calling")
    task = adapter.tasks()[0]
    assert task.payload["network"] is True  # Harbor's default: the task has the network
    env = adapter.open(task)
    assert env.network is False and "local backend has no network" in env.network_source, env.network_source


def test_the_in_process_server_requires_its_token(tiny_checkpoint):
    from unified.inference.endpoints import resolve_endpoint

    endpoint = resolve_endpoint(str(tiny_checkpoint))
    url = endpoint.config.base_url + "/chat/completions"
    body = json.dumps({"model": endpoint.config.model, "messages": [{"role": "user", "content": "hi"}],
                       "max_tokens": 2}).encode()
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Bearer "}):
        request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json", **headers})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=30)
        assert refused.value.code == 401
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(endpoint.config.base_url + "/models", timeout=30)
    assert refused.value.code == 401
    # its own clients carry the token
    assert endpoint.client.chat([{"role": "user", "content": "hi"}], max_tokens=2).completion_tokens >= 1
