"""The trainer's side of the rollout server's key (:mod:`unified.warmup.rollout_gate`).

TRL builds its ``VLLMClient`` inside ``GRPOTrainer.__init__`` (``VLLMGeneration._init_vllm``, main process
only), and the constructor already talks to the server: ``check_server`` polls ``/health`` with a bare
``requests.get`` (no session, so no session header reaches it; and it retries a ``401`` forever, since only a
connection error counts against its timeout), then ``GET /v1/models`` through ``self.session``. Every later
call (``/get_world_size``, ``/server_info``, ``/v1/completions``, ``/init_weight_transfer_engine``,
``/start_weight_update``, ``/update_weights``, ``/finish_weight_update``, ``/reset_prefix_cache``) goes through
``self.session``, a ``requests.Session``.

The seam: while the trainer is built, :func:`keyed_rollout_client` puts a subclass in the place
``VLLMGeneration`` takes the class from. Its ``check_server`` (the first method the constructor calls after
making the session) sets ``Authorization: Bearer <key>`` on the session, so every request after it carries the
key, and polls ``/health`` with the key itself, failing at once (not after the timeout) when the server refuses
the key. Nothing else of TRL's client changes. The key is read from the run's key file, never from the recipe.
"""

from __future__ import annotations

import ipaddress
import socket
import time
from contextlib import contextmanager
from typing import Iterator

from unified.config import ConfigError
from unified.warmup.config import WarmupConfig
from unified.warmup.rollout_gate import read_key, rollout_key_path


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or a name) is this machine's loopback."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        return all(ipaddress.ip_address(info[4][0]).is_loopback for info in socket.getaddrinfo(host, None))
    except (OSError, ValueError):
        return False


def rollout_server_key(cfg: WarmupConfig) -> str | None:
    """The key the trainer sends to its rollout server (``generation.backend=vllm_server``), else None.

    The key is ``<output_dir>/rollout_server.key`` (written by the launch before the server starts). Without that
    file a server on this machine's loopback is used without a key; a server anywhere else is refused: it would be
    reachable from the network with its weight-update routes open (docs/slurm.md, "Network").
    """
    gen = cfg.generation
    if gen.backend != "vllm_server":
        return None
    path = rollout_key_path(cfg.output_dir)
    if path.exists():
        return read_key(path)
    if is_loopback(gen.vllm_server_host):
        return None
    raise ConfigError(f"generation.backend=vllm_server at {gen.vllm_server_host}:{gen.vllm_server_port} without a key: "
                      f"{path} does not exist. A rollout server off this machine must sit behind the key gate "
                      "(slurm/lwm_warmup.sh starts it: python -m unified.warmup.rollout_gate; docs/slurm.md, Network)")


def keyed_client_class(base: type, key: str | None) -> type:
    """A subclass of TRL's ``VLLMClient`` (``base``) whose every request carries ``Authorization: Bearer key``
    (none for ``None``), and whose server check fails at once when the server refuses the trainer."""
    header = {"Authorization": f"Bearer {key}"} if key else {}

    class KeyedVLLMClient(base):
        """TRL's ``VLLMClient``, keyed: see :mod:`unified.warmup.rollout_client`."""

        def check_server(self, total_timeout: float = 0.0, retry_interval: float = 2.0) -> None:
            import requests

            self.session.headers.update(header)
            url = f"{self.base_url}/health"
            start = time.time()
            while True:
                try:
                    status = requests.get(url, headers=header, timeout=max(retry_interval, 5.0)).status_code
                except requests.exceptions.RequestException:
                    status = None
                if status == 200:
                    return
                if status in (401, 403):
                    raise ConnectionError(f"the rollout server at {self.base_url} refused the trainer's key "
                                          f"({status}): the key file is not this job's (a server of another job?)"
                                          if key else
                                          f"the rollout server at {self.base_url} wants a key ({status}) and the "
                                          "trainer has none: its output dir holds no rollout_server.key")
                if time.time() - start >= total_timeout:
                    raise ConnectionError(f"the rollout server at {self.base_url} did not answer /health with 200 "
                                          f"within {total_timeout:.0f}s (last: {status or 'no connection'})")
                time.sleep(retry_interval)

    return KeyedVLLMClient


@contextmanager
def keyed_rollout_client(key: str | None, server_mode: bool = True) -> Iterator[None]:
    """While the trainer is built, TRL's ``VLLMGeneration`` makes :func:`keyed_client_class` clients (with
    ``key``, or none for None); nothing changes outside server mode."""
    if not server_mode:
        yield
        return
    from trl.generation import vllm_generation

    original = vllm_generation.VLLMClient
    vllm_generation.VLLMClient = keyed_client_class(original, key)
    try:
        yield
    finally:
        vllm_generation.VLLMClient = original

