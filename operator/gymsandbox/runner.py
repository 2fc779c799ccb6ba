"""Start the operator: load and check the cluster policy, wait for the lead, then run the engine until a
signal stops it (handlers/engine.py)."""

from __future__ import annotations

import contextlib
import http.server
import logging
import os
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from gymsandbox.handlers.context import WORKERS, OperatorContext
from gymsandbox.handlers.engine import Engine
from gymsandbox.handlers.leader import ELECTION_REQUEST_SECONDS, LeaderElection, instance_identity, lease_name
from gymsandbox.kube.client import Kube
from gymsandbox.kube.connect import ConnectionSetupError, api_client, startup_problem
from gymsandbox.kube.signing import ensure_signing_key
from gymsandbox.logs import configure_logging
from gymsandbox.metrics import METRICS, serve_metrics
from gymsandbox.policy.cluster import ClusterPolicy, load_policy

LOG = logging.getLogger("gymsandbox")
# On SIGTERM, how long the keys being handled may take to finish before the Lease is handed over.
STOP_SECONDS = 5.0


def run_operator(
    policy_path: Path,
    namespaces: list[str],
    operator_namespace: str,
    *,
    liveness: str | None = None,
    verbose: bool = False,
    log_format: str = "full",
    metrics_listen: tuple[str, int] | None = None,
) -> None:
    policy: ClusterPolicy = load_policy(policy_path)
    namespaces = namespaces or list(policy.watch_namespaces)
    if metrics_listen:  # before any API call: a port already taken is refused at once
        serve_metrics(METRICS.registry, metrics_listen)
    configure_logging(verbose=verbose, log_format=log_format)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    # The election's own client (never fenced, never queued behind a burst), which also makes the signing
    # key on a first start: any instance may, leading or not.
    unfenced = Kube(api_client(connections=2), timeout=ELECTION_REQUEST_SECONDS)
    election = LeaderElection(unfenced, operator_namespace, lease_name(namespaces), instance_identity())
    kube = Kube(api_client(connections=3 * WORKERS), fence=election.fence)
    try:  # the first request: an API server out of reach or turning us away is one line, not a traceback
        signing_key = ensure_signing_key(unfenced, operator_namespace)
    except Exception as e:
        problem = startup_problem(e, unfenced.api_client.configuration.host)
        if problem is None:
            raise
        raise ConnectionSetupError(problem) from None
    context = OperatorContext(policy=policy, kube=kube, signing_key=signing_key, namespaces=tuple(namespaces))
    scope = ", ".join(namespaces) if namespaces else "all namespaces"
    metrics = f"; metrics on port {metrics_listen[1]}" if metrics_listen else ""
    LOG.info("gymsandbox operator starting: watching %s%s", scope, metrics)
    health = Health()
    with serving_health(liveness, health):  # a standby is alive too: its probes must not restart it
        election.acquire(until=stop)
        if stop.is_set():
            return
        election.keep(on_lost=lost_the_lead(election))
        engine = Engine(context, stop)  # a signal also ends a listing that keeps failing
        health.check = engine.healthy
        try:
            engine.start()
            stop.wait()
            LOG.info("gymsandbox operator stopping: handing the lead over")
        finally:
            engine.stop(STOP_SECONDS)
            election.release()


def lost_the_lead(election: LeaderElection) -> Callable[[str], None]:
    def exit_now(holder: str) -> None:
        LOG.error(
            "gymsandbox operator lost the lead to %s (%s): exiting, to start again as a standby",
            holder,
            election.where,
        )
        logging.shutdown()
        os._exit(3)  # at once: no handler may write another line once the other instance acts

    return exit_now


class Health:
    """What the liveness endpoint answers: healthy until `check` says otherwise (a standby has none)."""

    def __init__(self) -> None:
        self.check: Callable[[], bool] = lambda: True


@contextlib.contextmanager
def serving_health(liveness: str | None, health: Health) -> Iterator[None]:
    """Answer the liveness endpoint (also the readiness probe's): 200 while `health` holds, else 503."""
    if not liveness:
        yield
        return
    url = urlsplit(liveness)

    class Alive(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?")[0] != url.path:
                self.send_response(404)
                self.end_headers()
                return
            healthy = health.check()
            self.send_response(200 if healthy else 503)
            self.end_headers()
            self.wfile.write(b"ok\n" if healthy else b"a watch or the clock has stopped\n")

        def log_message(self, *_: Any) -> None:  # the probes are not news
            pass

    server = http.server.ThreadingHTTPServer((url.hostname or "0.0.0.0", url.port or 80), Alive)  # noqa: S104
    thread = threading.Thread(target=server.serve_forever, name="gymsandbox-health", daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()
