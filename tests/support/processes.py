"""The operator and the broker as processes of this machine: the `gymsandbox` CLI, as a user would run it,
logging to a file, on free loopback ports, stopped by their own PID."""

from __future__ import annotations

import os
import re
import signal
import ssl
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
from hack.localcluster.processes import free_port

from tests.support.chart import OPERATOR_NAMESPACE

# Processes the tests start get SIGTERM when this pytest dies, even without teardown (a killed run), so no
# operator or broker outlives its session and acts on a later run's objects. util-linux, Essential in Debian.
DIE_WITH_PARENT = ["setpriv", "--pdeathsig", "TERM", "--"]
RESYNC_SECONDS = "3"


def stop(process: subprocess.Popen[bytes], grace_seconds: float) -> None:
    """SIGTERM, and SIGKILL if it has not exited `grace_seconds` later."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=grace_seconds)
        except subprocess.TimeoutExpired:
            kill(process)


def kill(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.kill()
    process.wait()


def gymsandbox_cli() -> str:
    """The `gymsandbox` entry point next to this interpreter (the venv's)."""
    return str(Path(sys.executable).parent / "gymsandbox")


# The engine's line once it has listed every kind and handles events (handlers/engine.py).
WATCHING = "gymsandbox operator watching"


@dataclass
class OperatorProcess:
    """One `gymsandbox operator` CLI process, as a user would run it, logging to a file."""

    process: subprocess.Popen[bytes]
    log: Path
    metrics_url: str

    @classmethod
    def launch(
        cls,
        kubeconfig: Path,
        policy_file: Path,
        log: Path,
        namespaces: list[str],
        *,
        verbose: bool = True,
        extra: tuple[str, ...] = (),
        started: str | None = None,
    ) -> OperatorProcess:
        """Tests read its handler log (--verbose) unless they check the quiet default log itself. It is
        started once its log matches `started` (a pattern), by default once it watches: once it leads."""
        env = {
            **os.environ,
            "KUBECONFIG": str(kubeconfig),
            "GYMSANDBOX_RESYNC_SECONDS": RESYNC_SECONDS,
        }
        argv = [gymsandbox_cli(), "operator", "--policy", str(policy_file)]
        argv += ["--operator-namespace", OPERATOR_NAMESPACE, *(["--verbose"] if verbose else [])]
        metrics_port = free_port()
        argv += ["--metrics-listen", f"127.0.0.1:{metrics_port}", *extra]
        for pattern in namespaces:
            argv += ["--namespace", pattern]
        offset = log.stat().st_size if log.exists() else 0  # a restart appends to the same log
        with log.open("ab") as out:
            process = subprocess.Popen(
                [*DIE_WITH_PARENT, *argv], stdout=out, stderr=subprocess.STDOUT, env=env
            )
        handle = cls(process, log, f"http://127.0.0.1:{metrics_port}/metrics")
        deadline = time.monotonic() + 30
        # Once it leads, it lists every kind, then says what it watches (handlers/engine.py).
        while not re.search(WATCHING if started is None else started, handle.output()[offset:]):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the operator did not start:\n{handle.output()[-3000:]}")
            time.sleep(0.2)
        return handle

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        stop(self.process, grace_seconds=20)

    def kill(self) -> None:
        """SIGKILL: no clean-up, no chance to store progress."""
        kill(self.process)


@dataclass
class BrokerProcess:
    """One `gymsandbox broker` CLI process on a free loopback port."""

    process: subprocess.Popen[bytes]
    url: str
    log: Path
    metrics_url: str

    ca_bundle: str | None = None  # with TLS: the CA its certificate is checked against

    @classmethod
    def launch(
        cls,
        kubeconfig: Path,
        policy_file: Path,
        log: Path,
        port: int | None = None,
        *,
        tls_dir: Path | None = None,
        ca_bundle: str | None = None,
    ) -> BrokerProcess:
        """On `port` when given (a restarted replica behind the same address), else on a free one; HTTPS with
        the certificate in `tls_dir` (signed by `ca_bundle`) when given."""
        port = port or free_port()
        metrics_port = free_port()
        env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
        argv = [gymsandbox_cli(), "broker", "--policy", str(policy_file)]
        argv += ["--operator-namespace", OPERATOR_NAMESPACE, "--listen", f"127.0.0.1:{port}"]
        argv += ["--metrics-listen", f"127.0.0.1:{metrics_port}"]
        if tls_dir:
            argv += ["--tls-dir", str(tls_dir)]
        with log.open("ab") as out:
            process = subprocess.Popen(
                [*DIE_WITH_PARENT, *argv], stdout=out, stderr=subprocess.STDOUT, env=env
            )
        scheme = "https" if tls_dir else "http"
        handle = cls(
            process,
            f"{scheme}://127.0.0.1:{port}",
            log,
            f"http://127.0.0.1:{metrics_port}/metrics",
            ca_bundle,
        )
        deadline = time.monotonic() + 30
        while not handle.healthy():
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the broker did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)
        return handle

    def healthy(self) -> bool:
        verify: ssl.SSLContext | bool = True
        if self.ca_bundle:  # the certificate names the broker's Service, not 127.0.0.1: the chain is checked
            verify = ssl.create_default_context(cadata=self.ca_bundle)
            verify.check_hostname = False
        try:
            return httpx.get(f"{self.url}/healthz", timeout=1, verify=verify).status_code == 200
        except httpx.TransportError:
            return False

    def stop(self) -> None:
        stop(self.process, grace_seconds=40)

    def kill(self) -> None:
        """SIGKILL: in-flight calls are cut off, nothing is drained."""
        kill(self.process)

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])
