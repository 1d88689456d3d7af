"""Run by tests/security/test_episode_networks_containers.py inside a network namespace the test made (``unshare
--net``): a "host" listener on every address of that namespace, two episodes' containers started at once with the
network on, and what one of them can reach. Prints one JSON object. Never touches an address outside that namespace
and the containers' own."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

from unified.execution import EnvironmentSpec, PodmanBackend

PROBE = ("perl -MIO::Socket::INET -e '$s = IO::Socket::INET->new(PeerAddr => $ARGV[0], PeerPort => $ARGV[1], "
         "Timeout => 3); if ($s) { $l = <$s>; chomp $l; print \"reached:$l\" } else { print \"no:$!\" }'")
SERVICE = ("nohup setsid perl -MIO::Socket::INET -e '$s = IO::Socket::INET->new(LocalAddr => \"0.0.0.0\", "
           "LocalPort => 8080, Listen => 5, ReuseAddr => 1) or die; while ($c = $s->accept) { print $c \"episode-a\\n\"; "
           "close $c }' >/dev/null 2>&1 & sleep 1")
PACKET = "perl -e 'if (socket(my $s, 17, 3, 0)) { print \"opened\" } else { print \"denied:$!\" }'"


def _inspect(name: str, field: str) -> str:
    out = subprocess.run(["podman", "inspect", "--format", "{{range .NetworkSettings.Networks}}{{." + field + "}} {{end}}",
                          name], capture_output=True, text=True).stdout.split()
    return out[0] if out else ""


def main(image: str) -> None:
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    host = socket.socket()
    host.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    host.bind(("0.0.0.0", 0))
    host.listen(5)

    def serve() -> None:
        while True:
            conn, _ = host.accept()
            conn.sendall(b"host-listener\n")
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    backend = PodmanBackend()
    spec = EnvironmentSpec(image=image, network=True, name="r3-probe", memory_mb=256)
    with ThreadPoolExecutor(2) as pool:  # two episodes at once
        a, b = pool.map(lambda _: backend.start(spec), range(2))
    try:
        # the engine's firewall (re)inserts its jump at the top of filter FORWARD when a container starts: do it once
        # more now, above every rule made so far, as a later episode's start would (our rules must not depend on order)
        jump = ["FORWARD", "-m", "comment", "--comment", "netavark firewall plugin rules", "-j", "NETAVARK_FORWARD"]
        if subprocess.run(["iptables", "-w", "-C", *jump], capture_output=True).returncode == 0:
            subprocess.run(["iptables", "-w", "-D", *jump], check=True)
            subprocess.run(["iptables", "-w", "-I", *jump], check=True)
        a.exec(["sh", "-c", SERVICE], timeout_s=30)
        ip_a, gateway_b = _inspect(a.name, "IPAddress"), _inspect(b.name, "Gateway")
        own = b.exec(["sh", "-c", f"{PROBE} 127.0.0.1 8080"], timeout_s=30).stdout  # b has no such service
        seen_a = a.exec(["sh", "-c", f"{PROBE} 127.0.0.1 8080"], timeout_s=30).stdout  # a's service is up
        to_a = b.exec(["sh", "-c", f"{PROBE} {ip_a} 8080"], timeout_s=30).stdout
        to_host = b.exec(["sh", "-c", f"{PROBE} {gateway_b} {host.getsockname()[1]}"], timeout_s=30).stdout
        packet = b.exec(["sh", "-c", PACKET], timeout_s=30).stdout
        print(json.dumps({"ip_a": ip_a, "gateway_b": gateway_b, "a_self": seen_a, "b_self": own, "b_to_a": to_a,
                          "b_to_host": to_host, "packet_socket": packet,
                          "isolation": [a.info.get("network_isolation"), b.info.get("network_isolation")]}))
    finally:
        a.close()
        b.close()


if __name__ == "__main__":
    main(sys.argv[1])
