"""One network per episode on docker/podman, with no way to the host or to other episodes (issue 42, R3).

Every container with the network on used to join the engine's default bridge: episode A reached
episode B's services (``10.88.0.x:8080``) and every host service listening on ``0.0.0.0`` through the
bridge's gateway address, and with ``CAP_NET_RAW`` (in the engines' default set) it could open
``AF_PACKET`` sockets and spoof ARP on the shared bridge. Harbor gives each trial its own network. Here:

- a container with the network off keeps ``--network none``; with the network on it gets a bridge
  network of its own (``ENGINE network create --disable-dns``: the container resolves names through the
  host's upstream servers, so nothing of the host's listens for it) that is removed with the container;
- as root, two firewall rules (``iptables -t mangle``, in the netns the engine's bridge lives in) confine
  that bridge: nothing from it is delivered to the host itself (``INPUT -i BRIDGE -j DROP``: the gateway
  address, or any other, of the host), and nothing from it is forwarded to a private, link-local or
  shared address (``FORWARD -i BRIDGE -d 10/8,172.16/12,192.168/16,169.254/16,100.64/10 -j DROP``: other
  episodes, the local network, a cloud's metadata service) except DNS to the host's own name servers;
  egress to the internet stays, as the task allows. The rules live in the ``mangle`` table, which the
  kernel walks before ``filter``: the engine's own firewall (netavark, docker) puts its ACCEPT rules for
  a bridge's subnet in ``filter`` and (re)inserts its jump at the top of ``filter FORWARD`` whenever a
  container starts, so rules of ours in ``filter`` were shadowed by every later start (episode B reached
  episode A under load); a DROP in ``mangle`` is final whatever ``filter`` says. Without root (rootless podman puts each container in a user-mode network stack of its own)
  the episode runs on the engine's default for rootless containers and ``session.info`` says so;
- every container drops ``CAP_NET_RAW`` (no raw or packet sockets; ``ping`` needs it).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from dataclasses import dataclass, field

BLOCKED_DESTINATIONS = "10.0.0.0/8,172.16.0.0/12,192.168.0.0/16,169.254.0.0/16,100.64.0.0/10"
"""Where an episode's traffic is never forwarded: other episodes' bridges, the local network, metadata services."""
CAP_DROP = ["--cap-drop", "NET_RAW"]
"""``run`` options every container gets."""


class NetworkSetupError(RuntimeError):
    """The episode's own network could not be made or confined (the container is not started)."""


def _run(argv: list[str], timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def host_nameservers() -> list[str]:
    """The IPv4 name servers the container resolves through (the host's, as the engine copies them), loopback ones left
    out (the engine replaces those)."""
    found: list[str] = []
    for conf in ("/etc/resolv.conf", "/run/systemd/resolve/resolv.conf"):
        try:
            lines = open(conf, encoding="utf-8", errors="replace").read().splitlines()
        except OSError:
            continue
        for line in lines:
            words = line.split()
            if len(words) >= 2 and words[0] == "nameserver" and words[1].count(".") == 3 \
                    and not words[1].startswith("127.") and words[1] not in found:
                found.append(words[1])
    return found


def _rules(bridge: str) -> list[list[str]]:
    """In order (the first decides): DNS to the host's name servers, then the drops."""
    dns = [["FORWARD", "-i", bridge, "-d", ns, "-p", proto, "--dport", "53", "-j", "ACCEPT"]
           for ns in host_nameservers() for proto in ("udp", "tcp")]
    return [*dns, ["INPUT", "-i", bridge, "-j", "DROP"],
            ["FORWARD", "-i", bridge, "-d", BLOCKED_DESTINATIONS, "-j", "DROP"]]


FIREWALL_TABLE = ["-t", "mangle"]
"""The table of :func:`_rules` (see the module docstring: before the engine's ``filter`` rules, never shadowed)."""


@dataclass
class EpisodeNetwork:
    """The network of one container (``name``; ``bridge``: its host interface; ``rules``: the iptables rules added)."""

    engine: str
    name: str
    bridge: str = ""
    rules: list[list[str]] = field(default_factory=list)
    info: str = ""

    @classmethod
    def create(cls, engine: str) -> EpisodeNetwork:
        """A fresh bridge network, confined as the module docstring says (as root); NetworkSetupError otherwise."""
        net = cls(engine, f"unified-net-{uuid.uuid4().hex[:12]}")
        dns = ["--disable-dns"] if engine == "podman" else []
        made = _run([engine, "network", "create", *dns, net.name])
        if made.returncode != 0:
            raise NetworkSetupError(f"{engine} network create: {made.stderr.strip()[-300:]}")
        try:
            net.bridge = net._bridge_name()
            if os.geteuid() != 0:
                net.info = f"own network {net.name}; not confined by firewall rules (not root)"
                return net
            iptables = shutil.which("iptables")
            if iptables is None or not net.bridge:
                raise NetworkSetupError(f"cannot confine {net.name}: " + ("no iptables" if iptables is None
                                                                           else "its bridge interface is unknown"))
            for rule in reversed(_rules(net.bridge)):  # each inserted first: the list's order results
                added = _run([iptables, "-w", *FIREWALL_TABLE, "-I", *rule])
                if added.returncode != 0:
                    raise NetworkSetupError(f"iptables {' '.join(FIREWALL_TABLE)} -I {' '.join(rule)}: "
                                            f"{added.stderr.strip()[-300:]}")
                net.rules.append(rule)
            net.info = f"own network {net.name} (bridge {net.bridge}): no route to the host or private addresses"
            return net
        except BaseException:
            net.remove()
            raise

    def _bridge_name(self) -> str:
        proc = _run([self.engine, "network", "inspect", self.name])
        try:
            data = json.loads(proc.stdout or "null")
        except ValueError:
            return ""
        entry = data[0] if isinstance(data, list) and data else data if isinstance(data, dict) else {}
        if self.engine == "podman":
            return str(entry.get("network_interface") or entry.get("NetworkInterface") or "")
        net_id = str(entry.get("Id") or "")
        options = entry.get("Options") or {}
        return str(options.get("com.docker.network.bridge.name") or (f"br-{net_id[:12]}" if net_id else ""))

    def run_options(self) -> list[str]:
        return ["--network", self.name]

    def remove(self) -> None:
        """Delete the rules and the network (after the container is gone); never raises."""
        iptables = shutil.which("iptables")
        for rule in reversed(self.rules):
            if iptables:
                try:
                    _run([iptables, "-w", *FIREWALL_TABLE, "-D", *rule])
                except (OSError, subprocess.TimeoutExpired):
                    pass
        self.rules = []
        try:
            _run([self.engine, "network", "rm", "-f", self.name])
        except (OSError, subprocess.TimeoutExpired):
            pass
