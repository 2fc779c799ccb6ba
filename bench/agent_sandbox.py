"""kubernetes-sigs/agent-sandbox's controller, the reference bench/episodes.py measures in the same run as the
operator (--agent-sandbox): a cold `Sandbox` is one Pod made by its controller, Ready once the Pod is.

Its controller is built from the Go module proxy (`hack/build-binaries.sh agent-sandbox`, pinned in
hack/versions.env) and runs here, as the operator does, with the same kubeconfig; its CRD is the module's
own. Both are there only for the phase: the controller is stopped by its PID, and the CRD (with every
Sandbox) is deleted.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from hack.localcluster.paths import ROOT
from hack.localcluster.processes import free_port
from prometheus_client.parser import text_string_to_metric_families
from tests.support.cluster import Cluster

from bench.common import log

GROUP, VERSION, PLURAL = "agents.x-k8s.io", "v1beta1", "sandboxes"
CRD = f"{PLURAL}.{GROUP}"
CRD_SECONDS = 300  # for a CRD being deleted (with a thousand Sandboxes) to go, or for it to be Established
# Its client's request counter (client-go's, by HTTP method) on its metrics endpoint.
REQUESTS_METRIC = "rest_client_requests"
WRITE_METHODS = ("POST", "PUT", "PATCH", "DELETE")
WORKERS_STARTED = '"msg":"Starting workers"'  # controller-runtime logs it once a controller's caches synced


def build() -> Path:
    """The built (or cached) component's directory: bin/agent-sandbox-controller and crds/."""
    out = subprocess.run(
        [str(ROOT / "hack" / "build-binaries.sh"), "agent-sandbox"],
        check=True,
        stdout=subprocess.PIPE,
        text=True,
    ).stdout
    return Path(out.strip().split("=", 1)[1])


def sandbox(name: str, pod: Mapping[str, Any]) -> dict[str, Any]:
    """A Sandbox whose Pod is `pod` (its labels and spec)."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Sandbox",
        "metadata": {"name": name},
        "spec": {
            "podTemplate": {"metadata": {"labels": dict(pod["metadata"]["labels"])}, "spec": pod["spec"]}
        },
    }


@dataclass
class Controller:
    process: subprocess.Popen[bytes]
    metrics_url: str

    @classmethod
    def start(cls, cluster: Cluster, component: Path, log_path: Path) -> Controller:
        """Install its CRD and start its controller (one replica: no leader election); returns once it
        serves its metrics and has started its workers."""
        # A CRD still being deleted (its Sandboxes go first) would take the apply and then vanish.
        until(lambda: not crd_field(cluster, "{.metadata.deletionTimestamp}"), "the old CRD to be deleted")
        cluster.kubectl_run("apply", "--server-side", "-f", str(component / "crds"))
        until(
            lambda: "True" in crd_field(cluster, '{.status.conditions[?(@.type=="Established")].status}'),
            "its CRD to be Established",
        )
        port = free_port()
        argv = [
            str(component / "bin" / "agent-sandbox-controller"),
            "--leader-elect=false",
            f"--metrics-bind-address=127.0.0.1:{port}",
            "--health-probe-bind-address=0",
            f"--kubeconfig={cluster.kubeconfig}",
        ]
        with log_path.open("ab") as out:
            process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        log(f"agent-sandbox controller pid {process.pid}, log {log_path}")
        controller = cls(process, f"http://127.0.0.1:{port}/metrics")
        deadline = time.monotonic() + 60
        # Ready to compare once it serves its metrics and its informers have synced (its workers started),
        # as the operator's have before the bench creates an episode.
        while controller.requests() is None or WORKERS_STARTED not in log_path.read_text(errors="replace"):
            if process.poll() is not None or time.monotonic() > deadline:
                controller.stop(cluster)
                raise RuntimeError(
                    f"agent-sandbox's controller did not start:\n{log_path.read_text()[-3000:]}"
                )
            time.sleep(0.2)
        return controller

    def requests(self) -> Counter[str] | None:
        """Its API requests so far by HTTP method; None while it does not answer."""
        try:
            text = httpx.get(self.metrics_url, timeout=5).text
        except httpx.HTTPError:
            return None
        counts: Counter[str] = Counter()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == f"{REQUESTS_METRIC}_total":
                    counts[sample.labels["method"]] += int(sample.value)
        return counts

    def stop(self, cluster: Cluster) -> None:
        """SIGTERM (SIGKILL after 20 s) by its PID, then delete its CRD and with it every Sandbox (the API
        server finishes that; the next start waits for it)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=20)
        cluster.kubectl_run("delete", "crd", CRD, "--ignore-not-found", "--wait=false", check=False)


def crd_field(cluster: Cluster, jsonpath: str) -> str:
    """A field of its CRD (empty when the CRD or the field is not there)."""
    return cluster.kubectl_run(
        "get", "crd", CRD, "--ignore-not-found", "-o", f"jsonpath={jsonpath}", check=False
    ).stdout.strip()


def until(done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + CRD_SECONDS
    while not done():
        if time.monotonic() > deadline:
            raise RuntimeError(f"gave up waiting {CRD_SECONDS} s for {what}")
        time.sleep(1)


def writes(before: Counter[str], after: Counter[str]) -> Counter[str]:
    """Write requests between two counts, keyed `METHOD (agent-sandbox)`: its metric names no resource."""
    return Counter({f"{m} (agent-sandbox)": n for m, n in (after - before).items() if m in WRITE_METHODS})
