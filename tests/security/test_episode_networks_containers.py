"""Promise: with the network on, an episode reaches neither other episodes nor the host (issue 42, R3).

Before: every container with the network on joined podman's default bridge: episode B read episode A's
service at A's address and a host service listening on ``0.0.0.0`` through the bridge's gateway, and
``AF_PACKET`` sockets opened (``CAP_NET_RAW``: ARP spoofing on the shared bridge). Now each episode has a
bridge of its own, confined by firewall rules (no delivery to the host, nothing forwarded to private
addresses), and ``CAP_NET_RAW`` is dropped.

Everything runs in a network namespace this test makes (``unshare --net``): the "host" listener binds
every address of that namespace only, podman's bridges and firewall rules are made there, and no address
outside it and the containers is ever tried. Root and podman only (the container test marks).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from security._containers import CONTAINER_MARKS, ROOT
from unified.execution import EnvironmentSpec
from unified.execution.containers import image_tag

pytestmark = [*CONTAINER_MARKS, pytest.mark.skipif(shutil.which("unshare") is None or shutil.which("iptables") is None,
                                                   reason="needs unshare and iptables")]


def test_two_episodes_reach_neither_each_other_nor_the_host(podman_service_adapter):
    image = "localhost/" + image_tag(EnvironmentSpec(build_context=ROOT / "fixture_container_service" / "environment",
                                      name="fixture_container_service"))
    probe = Path(__file__).with_name("_episode_network_probe.py")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2]), str(Path(__file__).parents[1]),
                                                        os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(["unshare", "--net", sys.executable, str(probe), image], capture_output=True, text=True,
                          timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["a_self"] == "reached:episode-a", seen  # the service is up: B's failure below is the isolation
    assert not seen["b_self"].startswith("reached"), seen
    assert not seen["b_to_a"].startswith("reached"), seen
    assert not seen["b_to_host"].startswith("reached"), seen
    assert seen["packet_socket"].startswith("denied"), seen
    assert seen["ip_a"] and seen["gateway_b"] and seen["ip_a"].rsplit(".", 1)[0] != seen["gateway_b"].rsplit(".", 1)[0]
