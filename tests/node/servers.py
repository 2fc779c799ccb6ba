"""Test servers for egress tests: network namespaces on the real node's test network, made and removed here.

Pods reach them through the node (forwarded, so NetworkPolicy applies), never anything outside this machine:
- `gs-tsrv` holds two addresses: HTTP on PRIMARY:8080 and :9090 and on SECONDARY:8080, and a DNS server
  (tests/node/dns_responder.py) on PRIMARY:53 that answers RESOLVER_NAME.
- `gs-tmeta` stands in for a cloud metadata server at 169.254.169.254:80. Only packets from the pod network
  are routed there (a policy-routing rule), so the host's own route to that address is untouched.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from hack.localcluster.node import add_netns_link, delete_netns_link
from hack.localcluster.nodeconfig import POD_CIDR

PRIMARY, SECONDARY = "10.89.1.2", "10.89.1.3"
METADATA = "169.254.169.254"
METADATA_VIA = "10.89.1.10"
RESOLVER_NAME = "outside.example"
RESOLVER_ANSWER = "10.89.1.3"
ROUTE_TABLE = "2089"
BODY = "hello from a test server\n"


@dataclass(frozen=True)
class Servers:
    allowed: str = f"{PRIMARY}:8080"
    other_port: str = f"{PRIMARY}:9090"
    other_address: str = f"{SECONDARY}:8080"
    metadata: str = f"{METADATA}:80"
    resolver: str = PRIMARY


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, text=True)


@contextlib.contextmanager
def started_servers(directory: Path) -> Iterator[Servers]:
    """Start the servers; on exit stop each by PID and remove the namespaces, links and routing rule."""
    www = directory / "www"
    www.mkdir(parents=True)
    (www / "index.html").write_text(BODY)
    started: list[subprocess.Popen[bytes]] = []

    def serve(netns: str, *argv: str) -> None:
        started.append(
            subprocess.Popen(
                ["ip", "netns", "exec", netns, *argv],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )

    try:
        add_netns_link("gs-tsrv", ("gstsrv-h", "gstsrv-n"), "10.89.1.1", [PRIMARY, SECONDARY], 29)
        for listen in (f"{PRIMARY}:8080", f"{PRIMARY}:9090", f"{SECONDARY}:8080"):
            serve("gs-tsrv", "busybox", "httpd", "-f", "-p", listen, "-h", str(www))
        serve(
            "gs-tsrv",
            sys.executable,
            "-m",
            "tests.node.dns_responder",
            PRIMARY,
            RESOLVER_NAME,
            RESOLVER_ANSWER,
        )
        add_netns_link("gs-tmeta", ("gstmeta-h", "gstmeta-n"), "10.89.1.9", [METADATA_VIA], 30)
        _run("ip", "netns", "exec", "gs-tmeta", "ip", "addr", "add", f"{METADATA}/32", "dev", "lo")
        serve("gs-tmeta", "busybox", "httpd", "-f", "-p", f"{METADATA}:80", "-h", str(www))
        _run("ip", "route", "add", f"{METADATA}/32", "via", METADATA_VIA, "table", ROUTE_TABLE)
        _run("ip", "rule", "add", "from", POD_CIDR, "to", f"{METADATA}/32", "table", ROUTE_TABLE)
        yield Servers()
    finally:
        for process in started:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=10)
        subprocess.run(["ip", "rule", "del", "table", ROUTE_TABLE], check=False, capture_output=True)
        subprocess.run(["ip", "route", "flush", "table", ROUTE_TABLE], check=False, capture_output=True)
        delete_netns_link("gs-tsrv", "gstsrv-h")
        delete_netns_link("gs-tmeta", "gstmeta-h")
