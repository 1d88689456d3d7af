"""The rollout gate under load it did not ask for (issue 55, N1, N3, N4): a flood of idle half-sent connections
from a peer without the key, clients that hang up before reading their 401, key paths that are not files.

A real gate (unified/warmup/rollout_gate.py) in front of the loopback fixture server of tests/test_rollout_gate.py
(tests/_trl_routes_fixture.py); the flood's sockets are real connections to it.
"""

from __future__ import annotations

import json
import os
import resource
import select
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from _trl_routes_fixture import TrlRoutesFixture
from test_rollout_gate import KEY

from unified.warmup import rollout_gate
from unified.warmup.rollout_gate import RolloutGate

REPO = Path(__file__).resolve().parents[1]
FLOOD = 1000
HELD_AT_MOST = 64
"""Of the flood, the gate may hold this many connections open (its per-peer bound is 16): a literal, not the
module's constant, so that a gate without a bound fails here."""


@pytest.fixture
def gated():
    upstream = TrlRoutesFixture().start()
    gate = RolloutGate(KEY, "127.0.0.1", 0, upstream.port).start()
    yield gate, upstream
    gate.close()
    upstream.stop()


def _closed_by_peer(sock: socket.socket, wait_s: float = 0.0) -> bool:
    """Whether the other end closed ``sock`` (readable, then EOF or a reset)."""
    poller = select.poll()  # (not select(): the flood's descriptors are past 1024)
    poller.register(sock, select.POLLIN)
    if not poller.poll(wait_s * 1000):
        return False
    try:
        return sock.recv(4096) == b""
    except OSError:
        return True


def test_a_flood_of_idle_unkeyed_connections_does_not_keep_the_keyed_trainer_out(gated, capfd):
    """1,000 connections that send half a request and wait, from the trainer's own address (127.0.0.1, so no
    per-address rule can tell them apart): while they are held, a keyed request is served (within 5 s; the
    figure is printed), and the gate holds at most its per-peer bound of them (the rest it closed)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 2 * FLOOD + 1024  # the flood's ends, the gate's and pytest's own
    if soft < wanted:
        if hard != resource.RLIM_INFINITY and hard < wanted:
            pytest.skip(f"the flood needs {wanted} open files; this process may open {hard}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    gate, upstream = gated
    port = gate.server_address[1]
    threads_before = threading.active_count()
    flood: list[socket.socket] = []
    try:
        for _ in range(FLOOD):
            sock = socket.create_connection(("127.0.0.1", port), timeout=10)
            sock.sendall(b"POST /update_weights HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n")  # never finished
            flood.append(sock)
        start = time.monotonic()
        conn = socket.create_connection(("127.0.0.1", port), timeout=5)  # a 5 s bound on every step of it
        conn.sendall(f"GET /health HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n\r\n".encode())
        answer = b""
        while b"\r\n\r\n" not in answer:
            piece = conn.recv(4096)
            assert piece, "the gate closed the keyed connection"
            answer += piece
        latency = time.monotonic() - start
        conn.close()
        with capfd.disabled():
            print(f"\nkeyed request served in {latency:.3f} s while {FLOOD} idle unkeyed connections were held")
        assert answer.startswith(b"HTTP/1.1 200 ") and latency < 5.0
        gate_threads = threading.active_count() - threads_before  # (the old gate: a threading.Thread per connection)
        still_open = [s for s in flood if not _closed_by_peer(s, 0.0)]
        deadline = time.monotonic() + 10
        while len(still_open) > HELD_AT_MOST and time.monotonic() < deadline:
            still_open = [s for s in still_open if not _closed_by_peer(s, 0.1)]
        assert len(still_open) <= HELD_AT_MOST and gate_threads <= HELD_AT_MOST, (len(still_open), gate_threads)
    finally:
        for sock in flood:
            sock.close()
    assert [seen.path for seen in upstream.recorder.requests] == ["/health"]  # nothing of the flood went through
    err = capfd.readouterr().err
    assert "Traceback" not in err and "dropped a connection from 127.0.0.1" in err
    assert len(err.splitlines()) <= rollout_gate.MAX_REFUSALS_LOGGED


def test_unfinished_headers_are_cut_after_the_header_timeout(gated, monkeypatch):
    monkeypatch.setattr(rollout_gate, "HEADER_TIMEOUT_S", 1.0, raising=False)  # 10 s in use
    gate, _ = gated
    with socket.create_connection(("127.0.0.1", gate.server_address[1]), timeout=10) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        assert _closed_by_peer(sock, 15.0)  # (the old gate waited 600 s)
    assert getattr(gate, "dropped", 0) == 1


def test_clients_that_hang_up_before_their_401_are_counted_lines_not_tracebacks(gated, capfd):
    gate, upstream = gated
    port = gate.server_address[1]
    clients = 20
    for _ in range(clients):
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        sock.sendall(b"POST /update_weights HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close = reset
        sock.close()
    deadline = time.monotonic() + 20
    while gate.refusals + getattr(gate, "dropped", 0) < clients and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.2)
    assert gate.refusals + getattr(gate, "dropped", 0) == clients and upstream.recorder.requests == []
    err = capfd.readouterr().err
    assert "Traceback" not in err and "Exception" not in err
    assert len(err.splitlines()) == clients and all(line.startswith("rollout gate: ") for line in err.splitlines())


def test_key_paths_that_are_not_files_are_refused_in_one_line_before_they_are_opened(tmp_path):
    """A FIFO (the old open blocked forever), a directory, a device and a link to a FIFO: each refused in one
    line naming the path. In a child with a timeout, so that a regression fails instead of hanging the suite."""
    fifo = tmp_path / "fifo.key"
    os.mkfifo(fifo, 0o600)
    folder = tmp_path / "folder.key"
    folder.mkdir(mode=0o700)
    link = tmp_path / "link.key"
    link.symlink_to(fifo)
    paths = [str(fifo), str(folder), "/dev/null", str(link)]
    child = ("import json, sys, time\nfrom unified.warmup.rollout_gate import KeyFileError, read_key\nout = []\n"
             "for path in sys.argv[1:]:\n    start = time.monotonic()\n    try:\n        read_key(path)\n"
             "        out.append(['read', path, 0])\n    except KeyFileError as exc:\n"
             "        out.append([str(exc), path, time.monotonic() - start])\nprint(json.dumps(out))\n")
    try:
        done = subprocess.run([sys.executable, "-c", child, *paths], cwd=REPO, capture_output=True, text=True,
                              timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("read_key blocked on a key path that is not a regular file")
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)
    for (message, path, seconds), kind in zip(results, ["a FIFO", "a directory", "a character device",
                                                        "a symbolic link"]):
        assert message == f"rollout key file {path}: {kind}, not a regular file" and seconds < 1.0
