"""Run the broker: load policy and the signing key, then serve the app with uvicorn.

On SIGTERM it first stops taking new episodes (503 shutting_down) while in-flight calls finish, then
stops; uvicorn waits for open requests up to the grace period.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from types import FrameType

import uvicorn

from gymsandbox.broker.app import create_app
from gymsandbox.broker.backend import KubeBackend
from gymsandbox.broker.service import BrokerSettings, BrokerState
from gymsandbox.kube.client import Kube
from gymsandbox.kube.connect import ConnectionSetupError, api_client, startup_problem
from gymsandbox.kube.signing import wait_for_signing_key
from gymsandbox.logs import quiet_urllib3
from gymsandbox.metrics import serve_metrics
from gymsandbox.policy.cluster import load_policy

log = logging.getLogger("gymsandbox.broker")

GRACE_SECONDS = 30
SIGNING_KEY_WAIT_SECONDS = 300  # the operator may start after the broker


class _DrainingServer(uvicorn.Server):
    """On SIGTERM: keep serving while calls in flight finish (new creates get 503, /healthz turns 503 so the
    Service stops routing here), then stop; never longer than GRACE_SECONDS."""

    def __init__(self, config: uvicorn.Config, state: BrokerState) -> None:
        super().__init__(config)
        self.broker_state = state

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.broker_state.shutting_down:
            super().handle_exit(sig, frame)  # a second signal: stop now
            return
        self.broker_state.shutting_down = True
        threading.Thread(target=self._drain, args=(sig, frame), daemon=True).start()

    def _drain(self, sig: int, frame: FrameType | None) -> None:
        deadline = time.monotonic() + GRACE_SECONDS
        while self.broker_state.in_flight > 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        super().handle_exit(sig, frame)


def build_state(policy_path: Path, operator_namespace: str, settings: BrokerSettings) -> BrokerState:
    """The policy first (a typo in it is refused at once, before any request), then the cluster."""
    policy = load_policy(policy_path)
    client = api_client(connections=settings.worker_threads)
    try:
        key = wait_for_signing_key(Kube(client), operator_namespace, timeout=SIGNING_KEY_WAIT_SECONDS)
    except Exception as e:
        problem = startup_problem(e, client.configuration.host)
        if problem is None:
            raise
        raise ConnectionSetupError(problem) from None
    return BrokerState(backend=KubeBackend(client), key=key, policy=policy, settings=settings)


class TLSFilesError(Exception):
    pass


def tls_files(directory: Path) -> tuple[Path, Path]:
    """The certificate and key in `directory`, laid out as a kubernetes.io/tls Secret mounts them."""
    cert, key = directory / "tls.crt", directory / "tls.key"
    missing = [str(p) for p in (cert, key) if not p.is_file()]
    if missing:
        raise TLSFilesError(
            f"--tls-dir {directory} has no {' or '.join(missing)} (a kubernetes.io/tls Secret)"
        )
    return cert, key


def run_broker(
    policy_path: Path,
    operator_namespace: str,
    listen: tuple[str, int],
    metrics_listen: tuple[str, int] | None = None,
    tls_dir: Path | None = None,
    *,
    settings: BrokerSettings | None = None,
) -> None:
    """Serve on `listen`, with TLS from `tls_dir` when given (plain HTTP otherwise, with a warning)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    quiet_urllib3(verbose=False)
    cert, key = tls_files(tls_dir) if tls_dir else (None, None)
    state = build_state(policy_path, operator_namespace, settings or BrokerSettings())
    if tls_dir is None:  # once it is about to serve: a start-up refusal stays one line
        log.warning("serving plain HTTP: lease tokens cross the network in the clear (see --tls-dir)")
    app = create_app(state)
    if metrics_listen:
        # Apart from the API port, which every host pod may reach: scrapers only (the chart's NetworkPolicy).
        serve_metrics(app.state.service.telemetry.registry, metrics_listen)
    # Our access log (broker/telemetry.py) replaces uvicorn's: route templates, status, timing, never headers.
    config = uvicorn.Config(
        app,
        host=listen[0],
        port=listen[1],
        log_level="info",
        timeout_graceful_shutdown=GRACE_SECONDS,
        access_log=False,
        ssl_certfile=cert,
        ssl_keyfile=key,
    )
    _DrainingServer(config, state).run()
