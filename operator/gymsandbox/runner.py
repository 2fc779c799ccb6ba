"""Start the operator: load and check the cluster policy, then hand over to kopf."""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import json
import logging
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

import kopf

import gymsandbox.handlers  # noqa: F401 - importing registers the handlers with kopf
from gymsandbox.api.names import FINALIZER, GROUP
from gymsandbox.handlers.context import WORKERS, OperatorContext
from gymsandbox.handlers.leader import ELECTION_REQUEST_SECONDS, LeaderElection, instance_identity, lease_name
from gymsandbox.kube.client import Kube
from gymsandbox.kube.connect import api_client
from gymsandbox.kube.signing import ensure_signing_key
from gymsandbox.logs import quiet_kopf
from gymsandbox.metrics import METRICS, count_watch_restarts, serve_metrics
from gymsandbox.policy.cluster import ClusterPolicy, load_policy

# The kinds with kopf handlers that compare an object with its last-handled state (handlers/gymhost.py's
# on.create/update/resume/delete and both kinds' timers on GymHosts); the rest have event and index handlers.
CHANGE_HANDLED_KINDS = frozenset({"GymHost"})


class DigestDiffBaseStorage(kopf.AnnotationsDiffBaseStorage):
    """kopf's last-handled configuration as digests: `{"spec": {"sha256": ...}, "metadata": {"sha256": ...}}`.

    The handlers only need to know that the spec changed (on.update(field="spec")), never how, and a copy of
    a spec in an annotation fails for any spec over the API server's 256 KiB limit on annotations: such an
    object could never be marked handled, and would be handled again on every event.

    kopf builds an essence on every event of every object it watches, whether or not a handler compares it.
    `kinds`, when given, names the only kinds whose handlers do (on.create/update/resume/delete, timers); any
    other kind's essence is empty: for episodes and sandbox pods, the busiest watches, it went unread."""

    def __init__(self, *, kinds: Iterable[str] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.kinds = None if kinds is None else frozenset(kinds)

    def build(self, *, body: kopf.Body, extra_fields: Iterable[Any] | None = None) -> kopf.BodyEssence:
        if self.kinds is not None and body.get("kind") not in self.kinds:
            return cast(kopf.BodyEssence, {})
        extra = list(extra_fields or ())
        essence = super().build(body=essential(body, extra), extra_fields=extra)
        return cast(kopf.BodyEssence, {key: {"sha256": digest(value)} for key, value in essence.items()})


def essential(body: kopf.Body, extra_fields: list[Any]) -> kopf.Body:
    """`body` without what kopf's essence drops anyway (status, and metadata but labels and annotations),
    unless an extra field asks for it: kopf deep-copies the body it is given, on every event of every
    object watched (thousands of episodes and pods, and their managedFields), before it drops those."""
    asked = {(f.split(".") if isinstance(f, str) else list(f))[0] for f in extra_fields}
    kept = {k: v for k, v in body.items() if k in asked or k not in ("status", "metadata")}
    if "metadata" not in asked:
        meta = body.get("metadata") or {}
        kept["metadata"] = {k: meta[k] for k in ("labels", "annotations") if k in meta}
    return kopf.Body(cast(kopf.RawBody, kept))


def digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def operator_settings() -> kopf.OperatorSettings:
    settings = kopf.OperatorSettings()
    settings.persistence.finalizer = FINALIZER
    # Progress and the last-handled spec live in our own annotations, not in status (our status schema
    # is structural and owned by the models).
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = DigestDiffBaseStorage(
        prefix=GROUP, key="last-handled-configuration", kinds=CHANGE_HANDLED_KINDS
    )
    # Handlers post events on purpose (refusals, failures, Ready); routine handler logs stay logs.
    settings.posting.level = logging.WARNING
    # Reconnect a silently stalled watch instead of waiting forever.
    settings.watching.server_timeout = 120
    settings.watching.client_timeout = 150
    settings.watching.connect_timeout = 10
    # A timer may delete its own object (expiry); kopf then waits for that timer to exit before it
    # releases the finalizer, checking every this many seconds (its default is 60).
    settings.background.cancellation_polling = 1
    settings.execution.max_workers = WORKERS
    return settings


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
    kopf.configure(verbose=verbose, log_format=kopf.LogFormat[log_format.upper()])
    if not verbose:
        quiet_kopf()
    count_watch_restarts(METRICS, verbose)
    logging.getLogger("kubernetes").setLevel(logging.WARNING)
    # The election's own client (never fenced, never queued behind a burst), which also makes the signing
    # key on a first start: any instance may, leading or not.
    unfenced = Kube(api_client(connections=2), timeout=ELECTION_REQUEST_SECONDS)
    election = LeaderElection(unfenced, operator_namespace, lease_name(namespaces), instance_identity())
    kube = Kube(api_client(connections=3 * WORKERS), fence=election.fence)
    context = OperatorContext(
        policy=policy,
        kube=kube,
        signing_key=ensure_signing_key(unfenced, operator_namespace),
        namespaces=tuple(namespaces),
    )
    scope = ", ".join(namespaces) if namespaces else "all namespaces"
    metrics = f"; metrics on port {metrics_listen[1]}" if metrics_listen else ""
    logging.getLogger("gymsandbox").info("gymsandbox operator starting: watching %s%s", scope, metrics)
    with standby_health(liveness):  # a standby is alive: its probes must not restart it
        election.acquire()
    election.keep(on_lost=lost_the_lead(election))
    try:
        kopf.run(
            settings=operator_settings(),
            standalone=True,
            clusterwide=not namespaces,
            namespaces=namespaces,
            liveness_endpoint=liveness,
            memo=kopf.Memo(context=context),
        )
    finally:
        election.release()


def lost_the_lead(election: LeaderElection) -> Callable[[str], None]:
    def exit_now(holder: str) -> None:
        logging.getLogger("gymsandbox").error(
            "gymsandbox operator lost the lead to %s (%s): exiting, to start again as a standby",
            holder,
            election.where,
        )
        logging.shutdown()
        os._exit(3)  # at once: kopf's handlers must not write another line once the other instance acts

    return exit_now


@contextlib.contextmanager
def standby_health(liveness: str | None) -> Iterator[None]:
    """Answer the liveness endpoint (kopf's, once it runs) while this instance waits for the lead."""
    if not liveness:
        yield
        return
    url = urlsplit(liveness)

    class Alive(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200 if self.path.split("?")[0] == url.path else 404)
            self.end_headers()
            self.wfile.write(b"standby\n")

        def log_message(self, *_: Any) -> None:  # the probes are not news
            pass

    server = http.server.ThreadingHTTPServer((url.hostname or "0.0.0.0", url.port or 80), Alive)  # noqa: S104
    thread = threading.Thread(target=server.serve_forever, name="gymsandbox-standby-health", daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()
