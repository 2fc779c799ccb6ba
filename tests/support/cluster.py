"""The cluster a run uses: KUBECONFIG's when it is set, else the local control plane
(hack/localcluster), reused when it runs and started otherwise."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from hack.localcluster import controlplane
from hack.localcluster.paths import ROOT, Paths, cluster_paths
from hack.localcluster.tools import binaries

CRDS = ROOT / "crds"


@dataclass(frozen=True)
class Cluster:
    kubeconfig: Path
    kubectl: Path
    local: bool  # True when this run uses the local control plane (hack/localcluster), not KUBECONFIG's
    paths: Paths  # the local control plane's state directory (exec directories, logs, its kwok)

    @property
    def logs(self) -> Path | None:
        """The local control plane's logs; None on KUBECONFIG's cluster."""
        return self.paths.logs if self.local else None

    def kubectl_run(
        self, *args: str, stdin: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.kubectl), f"--kubeconfig={self.kubeconfig}", *args],
            input=stdin,
            capture_output=True,
            text=True,
            check=check,
            timeout=120,
        )

    def helm(self, *args: str) -> subprocess.CompletedProcess[str]:
        """The pinned helm against this cluster; the caller checks its return code."""
        return subprocess.run(
            [str(binaries()["helm"]), f"--kubeconfig={self.kubeconfig}", *args],
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
        )


def find_cluster() -> tuple[Cluster, bool]:
    """KUBECONFIG's cluster if set; else the local control plane, reused if up, else started. Returns it and
    whether this call started it (a test session stops what it started; a benchmark leaves it running)."""
    kubectl, paths = binaries()["kubectl"], cluster_paths()
    if os.environ.get("KUBECONFIG"):
        return Cluster(Path(os.environ["KUBECONFIG"]), kubectl, local=False, paths=paths), False
    started_here = not controlplane.status(paths)
    if started_here:
        controlplane.up(paths)
    return Cluster(paths.kubeconfig, kubectl, local=True, paths=paths), started_here


def install_crds(cluster: Cluster) -> None:
    """The generated CRDs (crds/), applied and Established."""
    cluster.kubectl_run("apply", "--server-side", "--force-conflicts", "-f", str(CRDS))
    cluster.kubectl_run("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
