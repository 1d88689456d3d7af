"""The rollout server on a private key: a per-job key file and an authenticating reverse proxy.

In server mode (``generation.backend=vllm_server``, several nodes) ``trl vllm-serve`` runs ``vllm serve``
with ``VLLM_SERVER_DEV_MODE=1``: besides generation it answers ``/init_weight_transfer_engine``,
``/update_weights``, ``/reset_prefix_cache``, ``/sleep``, ``/collective_rpc`` ... with no key (vLLM's
``--api-key`` covers only its ``/v1``-style routes, and TRL's client sends no header). So the server binds
``127.0.0.1`` of node 0 only, and this gate listens on the node's cluster address at the public port:

- a request whose ``Authorization`` header is ``Bearer <key>`` (compared in constant time) is forwarded to
  the loopback server as it came (method, path and query, headers but the hop-by-hop ones and the key,
  body), and the answer comes back as the server gave it (status, headers, body streamed);
- any other request gets ``401`` and a one-line JSON error; nothing of it is read past its headers or
  forwarded, and the connection is closed;
- the gate starts the server command as its child and ends with it: when the server exits the gate exits
  with its status; SIGTERM/SIGINT to the gate stop the server's process group first;
- it refuses a server it can reach on the public address at the loopback port (one bound to ``0.0.0.0``):
  that server would be open beside the gate.

The key is ``secrets.token_urlsafe(32)``, written by the launch into ``<output_dir>/rollout_server.key``
(mode 0600, created before the server starts) and read by the gate and by the trainer
(:mod:`unified.warmup.rollout_client`); it is never on a command line or in a log.
Standard library only: the gate runs on the server node in whatever environment serves vLLM.

    python -m unified.warmup.rollout_gate new-key OUTPUT/rollout_server.key
    python -m unified.warmup.rollout_gate serve --key-file F --host ADDR --port 8000 --upstream-port 8001 \\
        -- trl vllm-serve --model M --host 127.0.0.1 --port 8001
"""

from __future__ import annotations

import _thread
import argparse
import hmac
import http.client
import json
import os
import secrets
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

KEY_FILE_NAME = "rollout_server.key"
"""The key's file in the run's output directory (``slurm/lwm_warmup.sh`` uses the same name)."""
MIN_KEY_CHARS = 32
MAX_KEY_FILE_BYTES = 4096
"""A key file is read up to this many bytes (a key is 43)."""
UPSTREAM_HOST = "127.0.0.1"
UPSTREAM_ENV = "UNIFIED_ROLLOUT_UPSTREAM"
"""Set for the server command: ``127.0.0.1:PORT``, where it must listen (a ``VLLM_CMD`` of one's own)."""
HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
                        "transfer-encoding", "upgrade", "content-length", "authorization"})
"""Request/response headers the gate does not pass on as they are (it sets its own framing; the key stays here).
``Host`` is passed on, so that a redirect of the server (``/health/`` -> ``/health``) points back at the gate."""
COPY_BYTES = 1 << 16
IDLE_TIMEOUT_S = 600.0
"""A keyed client connection idle this long is closed (TRL's pooled connections reconnect)."""
HEADER_TIMEOUT_S = 10.0
"""A connection whose request line and headers are not all in after this long is closed (slow or idle senders)."""
MAX_PENDING_PER_PEER = 16
"""Connections of one peer address whose headers are not yet read; the peer's oldest goes when a new one comes."""
MAX_PENDING = 256
"""Such connections of all peers together; the oldest goes when a new one comes."""
MAX_KEYED = 512
"""Connections that showed the key (TRL opens up to 64 at once); past this a keyed request gets 503."""
STOP_GRACE_S = 60.0
MAX_REFUSALS_LOGGED = 50
"""Refusal and dropped-connection lines logged in all; later ones are counted, not logged."""


class KeyFileError(ValueError):
    """A key file that is missing, not private, or not a key (one line naming the file)."""


def rollout_key_path(output_dir: str | os.PathLike[str]) -> Path:
    """Where the launch writes a run's key: ``<output_dir>/rollout_server.key``."""
    return Path(output_dir) / KEY_FILE_NAME


def write_new_key(path: str | os.PathLike[str]) -> Path:
    """Write a fresh random key to ``path`` (mode 0600 from creation, replaced atomically) and return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_urlsafe(32) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return path


def _file_kind(mode: int) -> str:
    for test, name in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "not a regular file"


def read_key(path: str | os.PathLike[str]) -> str:
    """The key in ``path``: a regular file of this user, readable by no one else, of at least 32 characters.

    ``lstat`` first, then ``open(O_NOFOLLOW | O_NONBLOCK)`` and ``fstat`` of what was opened (the same inode):
    a symbolic link, directory, FIFO, socket or device is refused in one line naming the path before anything
    is read (a FIFO would block the open or the read forever), and at most :data:`MAX_KEY_FILE_BYTES` are read.
    """
    try:
        before = os.lstat(path)
    except OSError as exc:
        raise KeyFileError(f"rollout key file {path}: {exc.strerror}") from None
    if not stat.S_ISREG(before.st_mode):
        raise KeyFileError(f"rollout key file {path}: {_file_kind(before.st_mode)}, not a regular file")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        raise KeyFileError(f"rollout key file {path}: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode) or (info.st_dev, info.st_ino) != (before.st_dev, before.st_ino):
            raise KeyFileError(f"rollout key file {path}: replaced while it was opened ({_file_kind(info.st_mode)})")
        if info.st_uid != os.getuid():
            raise KeyFileError(f"rollout key file {path}: owned by uid {info.st_uid}, not this user ({os.getuid()})")
        if info.st_mode & 0o077:
            raise KeyFileError(f"rollout key file {path}: mode {stat.S_IMODE(info.st_mode):04o} lets others read it "
                               "(it must be 0600)")
        data = handle.read(MAX_KEY_FILE_BYTES + 1)
    try:
        key = data.decode("ascii").strip()
    except UnicodeDecodeError:
        key = ""
    if len(data) > MAX_KEY_FILE_BYTES or len(key) < MIN_KEY_CHARS or any(c.isspace() for c in key):
        raise KeyFileError(f"rollout key file {path}: not a key (one word of at least {MIN_KEY_CHARS} characters)")
    return key


def _printable(text: str, limit: int = 160) -> str:
    return "".join(c if c.isprintable() else "?" for c in text[:limit])


class _GateHandler(BaseHTTPRequestHandler):
    """One client connection: check the key, then relay each request to the loopback server."""

    protocol_version = "HTTP/1.1"
    server_version = "unified-rollout-gate"
    sys_version = ""
    timeout = HEADER_TIMEOUT_S  # each read until the key is shown (and the gate's deadline on the whole headers)
    server: "RolloutGate"

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - the base class's name
        """Quiet: the gate logs refusals only (:meth:`RolloutGate.note_refusal`)."""

    def parse_request(self) -> bool:
        """The request line and headers; a connection the gate dropped meanwhile (:meth:`RolloutGate._drop`)
        ends here, unanswered."""
        if self.server.was_dropped(self.connection):
            self.close_connection = True
            return False
        return super().parse_request()

    def _refused(self) -> bool:
        """Answer 401 and close (the body unread) unless the request carries the key."""
        refusal = self.server.refusal(self.headers.get("Authorization"))
        if refusal:
            self.server.note_refusal(self.command, self.path, self.client_address[0], refusal)
            try:
                self._reply_json(401, {"error": "unauthorized: the rollout server needs 'Authorization: Bearer "
                                                "<key>' (the job's rollout_server.key; docs/slurm.md, Network)"},
                                 {"WWW-Authenticate": 'Bearer realm="rollout"'}, close=True)
            except OSError:  # it hung up before reading its 401: the refusal line above is all there is to say
                self.close_connection = True
            return True
        if not self.server.keyed(self.connection):
            try:
                self._reply_json(503, {"error": f"rollout gate: {MAX_KEYED} keyed connections are open"}, close=True)
            except OSError:
                self.close_connection = True
            return True
        return False

    def handle_expect_100(self) -> bool:
        """``Expect: 100-continue``: the key is checked before the client is asked for the body."""
        return False if self._refused() else super().handle_expect_100()

    def _handle(self) -> None:
        if self._refused():
            return
        body = self._read_body()
        if body is None:
            return
        upstream = http.client.HTTPConnection(UPSTREAM_HOST, self.server.upstream_port, timeout=None)
        try:
            try:
                upstream.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
                if "Host" not in self.headers:
                    upstream.putheader("Host", f"{UPSTREAM_HOST}:{self.server.upstream_port}")
                for name, value in self.headers.items():
                    if name.lower() not in HOP_BY_HOP:
                        upstream.putheader(name, value)
                if body or self.command in ("POST", "PUT", "PATCH"):
                    upstream.putheader("Content-Length", str(len(body)))
                upstream.endheaders(body or None)
                answer = upstream.getresponse()
            except OSError as exc:
                self._reply_json(502, {"error": f"rollout gate: the rollout server on {UPSTREAM_HOST}:"
                                                f"{self.server.upstream_port} did not answer ({type(exc).__name__})"})
                return
            self._relay(answer)
        except (BrokenPipeError, ConnectionResetError):  # the client left
            self.close_connection = True
        finally:
            upstream.close()

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _handle

    def _read_body(self) -> bytes | None:
        """The request body (``Content-Length`` or chunked); None after answering 400 to a malformed one."""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            parts = []
            while True:
                size_line = self.rfile.readline(1024)
                try:
                    size = int(size_line.split(b";")[0].strip(), 16)
                except ValueError:
                    self._reply_json(400, {"error": "rollout gate: malformed chunked body"}, close=True)
                    return None
                if size == 0:
                    while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline(1024)
        length = self.headers.get("Content-Length")
        if length is None:
            return b""
        try:
            return self.rfile.read(int(length))
        except ValueError:
            self._reply_json(400, {"error": "rollout gate: bad Content-Length"}, close=True)
            return None

    def _relay(self, answer: http.client.HTTPResponse) -> None:
        """The server's answer to the client: its status and headers, the body streamed as it arrives."""
        no_body = self.command == "HEAD" or answer.status in (204, 304) or 100 <= answer.status < 200
        length = answer.getheader("Content-Length")
        chunked = not no_body and length is None
        self.send_response_only(answer.status, answer.reason)
        for name, value in answer.getheaders():
            if name.lower() not in HOP_BY_HOP:
                self.send_header(name, value)
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        elif length is not None:
            self.send_header("Content-Length", length)
        self.end_headers()
        if no_body:
            return
        while piece := answer.read1(COPY_BYTES):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
        if chunked:
            self.wfile.write(b"0\r\n\r\n")

    def _reply_json(self, status: int, payload: dict, headers: dict[str, str] | None = None, *,
                    close: bool = False) -> None:
        body = (json.dumps(payload) + "\n").encode()
        self.send_response_only(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(body)


class RolloutGate(ThreadingHTTPServer):
    """The gate: listens on ``(host, port)``, forwards keyed requests to ``127.0.0.1:upstream_port``.

    ``serve_forever()`` in a thread (:meth:`start`); :meth:`close` stops it.

    Connections are bounded before anything of them is trusted: until a connection has shown the key it is
    *pending*, at most :data:`MAX_PENDING_PER_PEER` per peer address and :data:`MAX_PENDING` in all (a new one
    pushes out the oldest, so a flood of idle connections cannot keep a new one out), and at most
    :data:`HEADER_TIMEOUT_S` long. A connection that showed the key leaves the pending set for its own
    (:data:`MAX_KEYED`), which no unkeyed connection can fill. Refusals and dropped connections are counted
    one-line notes (:meth:`note`), never tracebacks.
    """

    daemon_threads = True
    request_queue_size = 1024  # TRL opens up to 64 generation requests at once; the backlog outlasts a flood

    def __init__(self, key: str, host: str, port: int, upstream_port: int):
        if len(key) < MIN_KEY_CHARS:
            raise KeyFileError(f"a rollout key has at least {MIN_KEY_CHARS} characters")
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._key = key.encode()
        self.upstream_port = upstream_port
        self.refusals = 0
        self.dropped = 0
        self._notes = 0
        self._lock = threading.Lock()
        self._note_lock = threading.Lock()
        self._pending: dict[socket.socket, tuple[str, float]] = {}  # oldest first: (peer, accepted at, monotonic)
        self._keyed: set[socket.socket] = set()
        self._dropped: set[socket.socket] = set()  # dropped while their handler still runs
        self._thread: threading.Thread | None = None
        super().__init__((host, port), _GateHandler)

    def process_request(self, request, client_address) -> None:
        """A new connection joins the pending set (pushing out its peer's oldest, or the oldest of all, when full)."""
        peer = str(client_address[0])
        with self._lock:
            mine = [s for s, (p, _) in self._pending.items() if p == peer]
            if len(mine) >= MAX_PENDING_PER_PEER:
                self._drop(mine[0], f"{MAX_PENDING_PER_PEER} connections of this peer wait for their headers")
            elif len(self._pending) >= MAX_PENDING:
                self._drop(next(iter(self._pending)), f"{MAX_PENDING} connections wait for their headers")
            self._pending[request] = (peer, time.monotonic())
        # a daemon thread per connection, as ThreadingMixIn's, but started without waiting for it to run: under a
        # flood the acceptor would otherwise wait on the GIL with every connection it pushed out
        _thread.start_new_thread(self.process_request_thread, (request, client_address))

    def service_actions(self) -> None:
        """Between accepts (every poll interval): drop the pending connections past :data:`HEADER_TIMEOUT_S`."""
        now = time.monotonic()
        with self._lock:
            late = [s for s, (_, since) in self._pending.items() if now - since > HEADER_TIMEOUT_S]
            for sock in late:
                self._drop(sock, f"its headers were not in after {HEADER_TIMEOUT_S:g} s")

    def _drop(self, sock: socket.socket, why: str) -> None:
        """Close a pending connection (its handler's read ends); the caller holds the lock."""
        peer, _ = self._pending.pop(sock)
        self._dropped.add(sock)
        self.dropped += 1
        self.note(f"rollout gate: dropped a connection from {peer}: {why}")
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def was_dropped(self, sock: socket.socket) -> bool:
        with self._lock:
            return sock in self._dropped

    def keyed(self, sock: socket.socket) -> bool:
        """A connection showed the key: out of the pending set, the keyed idle timeout; False when those are full."""
        with self._lock:
            if sock in self._keyed:
                return True
            if len(self._keyed) >= MAX_KEYED:
                return False
            self._pending.pop(sock, None)
            self._keyed.add(sock)
        sock.settimeout(IDLE_TIMEOUT_S)
        return True

    def shutdown_request(self, request) -> None:
        with self._lock:
            self._pending.pop(request, None)
            self._keyed.discard(request)
            self._dropped.discard(request)
        super().shutdown_request(request)

    def handle_error(self, request, client_address) -> None:
        """A connection that failed (the client hung up, reset, timed out): one counted line, no traceback."""
        exc = sys.exc_info()[1]
        with self._lock:
            self.dropped += 1
        self.note(f"rollout gate: connection from {client_address[0]} ended: {type(exc).__name__}")

    def note(self, line: str) -> None:
        """One stderr line (the first :data:`MAX_REFUSALS_LOGGED` of all refusals and drops), counted after.
        The line and its newline are one write under the lock: handler threads noting at once never run two
        lines together (``print`` writes the text and the newline separately)."""
        with self._note_lock:
            self._notes += 1
            if self._notes <= MAX_REFUSALS_LOGGED:
                more = " (further refusals and drops are counted, not logged)" if self._notes == MAX_REFUSALS_LOGGED \
                    else ""
                sys.stderr.write(line + more + "\n")
                sys.stderr.flush()

    def refusal(self, authorization: str | None) -> str | None:
        """Why a request with this ``Authorization`` header is refused, or None when it carries the key."""
        if not authorization:
            return "no Authorization header"
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer":
            return "not a Bearer credential"
        return None if hmac.compare_digest(token.strip().encode(), self._key) else "wrong key"

    def note_refusal(self, method: str, path: str, client: str, why: str) -> None:
        """One stderr line per refused request (the first :data:`MAX_REFUSALS_LOGGED`), never the credential."""
        with self._note_lock:
            self.refusals += 1
        self.note(f"rollout gate: refused {_printable(method, 16)} {_printable(path)} from {client}: {why}")

    def start(self) -> "RolloutGate":
        self._thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.1}, name="rollout-gate",
                                        daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        if self._thread is not None:
            self.shutdown()
            self._thread.join()
        self.server_close()


def _accepts(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def _stop_group(child: subprocess.Popen, grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM to the server's process group, SIGKILL after ``grace_s``."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(child.pid, sig)
        except ProcessLookupError:
            return
        try:
            child.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def serve(key: str, host: str, port: int, upstream_port: int, command: list[str]) -> int:
    """Run ``command`` (the rollout server, on ``127.0.0.1:upstream_port``) behind a gate on ``host:port``.

    Returns the server's exit status (128 + signal when a signal ended it), or 1 when the gate stopped a server
    it could reach on ``host`` at the loopback port.
    """
    if port == upstream_port and host == UPSTREAM_HOST:
        raise ValueError(f"the gate and the server cannot both listen on {host}:{port}")
    gate = RolloutGate(key, host, port, upstream_port).start()  # bind first: a busy port fails before the server
    child = subprocess.Popen(command, start_new_session=True,
                             env={**os.environ, UPSTREAM_ENV: f"{UPSTREAM_HOST}:{upstream_port}"})
    stopping: list[int] = []

    def on_signal(signum, _frame) -> None:
        stopping.append(signum)
        threading.Thread(target=_stop_group, args=(child,), daemon=True).start()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    print(f"rollout gate: {host}:{port} -> {UPSTREAM_HOST}:{upstream_port} (server pid {child.pid}); "
          "requests need the job's key", file=sys.stderr, flush=True)
    # (on 127.0.0.1 itself, or on every address, the gate cannot tell the server's address from its own)
    probing, exposed = host not in (UPSTREAM_HOST, "localhost", "0.0.0.0", "::", ""), False
    try:
        while True:
            try:
                status = child.wait(timeout=1.0)
                break
            except subprocess.TimeoutExpired:
                pass
            if probing and not stopping:
                if _accepts(host, upstream_port):
                    exposed = True
                    print(f"rollout gate: the rollout server answers on {host}:{upstream_port}, not only on "
                          f"{UPSTREAM_HOST}: it would be open without the key; stopping it (bind it to "
                          f"{UPSTREAM_HOST})", file=sys.stderr, flush=True)
                    _stop_group(child)
                elif _accepts(UPSTREAM_HOST, upstream_port):
                    probing = False  # up on loopback only
    finally:
        _stop_group(child)
        gate.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if exposed:
        return 1
    print(f"rollout gate: the rollout server exited (status {status}); {gate.refusals} request(s) refused, "
          f"{gate.dropped} connection(s) dropped", file=sys.stderr, flush=True)
    return 128 - status if status < 0 else status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, prog="python -m unified.warmup.rollout_gate",
                                     description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="action", required=True)
    new_key = commands.add_parser("new-key", help="write a fresh key (mode 0600) to FILE")
    new_key.add_argument("file")
    run = commands.add_parser("serve", help="run the server command after -- behind the gate")
    run.add_argument("--key-file", required=True)
    run.add_argument("--host", required=True, help="the address the trainers reach the server at")
    run.add_argument("--port", type=int, required=True, help="the public port (generation.vllm_server_port)")
    run.add_argument("--upstream-port", type=int, required=True, help="the server's port on 127.0.0.1")
    run.add_argument("command", nargs=argparse.REMAINDER, help="-- the server command")
    args = parser.parse_args(argv)
    try:
        if args.action == "new-key":
            write_new_key(args.file)
            return 0
        command = args.command[1:] if args.command[:1] == ["--"] else args.command
        if not command:
            parser.error("serve: give the server command after --")
        return serve(read_key(args.key_file), args.host, args.port, args.upstream_port, command)
    except (KeyFileError, ValueError, OSError) as exc:
        print(f"rollout gate: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
