"""Where the local cluster keeps everything: the repository it runs from, the build cache, and its state
directory (GYMSANDBOX_CLUSTER_DIR, default .cluster/) with the real node's beneath it."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HACK = ROOT / "hack"
STATE_DIR = Path(os.environ.get("GYMSANDBOX_CLUSTER_DIR", ROOT / ".cluster"))
CACHE = Path(os.environ.get("GYMSANDBOX_CACHE", Path.home() / ".cache" / "gymsandbox"))


@dataclass(frozen=True)
class Paths:
    """The control plane's state directory."""

    root: Path

    @property
    def pki(self) -> Path:
        return self.root / "pki"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

    @property
    def state(self) -> Path:
        return self.root / "state.json"

    @property
    def exec(self) -> Path:
        return self.root / "exec"

    @property
    def audit_log(self) -> Path:
        """The API server's audit log of exec requests (controlplane.py AUDIT_POLICY), out of logs/: it is
        read by tests, not shown in failure reports."""
        return self.root / "audit" / "exec.log"

    @property
    def node(self) -> NodePaths:
        return NodePaths(self.root / "node")


@dataclass(frozen=True)
class NodePaths:
    """The real node's state directory."""

    root: Path  # <cluster state dir>/node

    @property
    def logs(self) -> Path:
        return self.root.parent / "logs"  # beside the control plane's, so failure reports show them too

    @property
    def state(self) -> Path:
        return self.root / "state.json"

    @property
    def containerd(self) -> Path:
        return self.root / "containerd"

    @property
    def kubelet(self) -> Path:
        return self.root / "kubelet"

    @property
    def cni(self) -> Path:
        return self.root / "cni"

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    @property
    def socket(self) -> Path:
        return self.containerd / "containerd.sock"


def cluster_paths() -> Paths:
    """The state directory this checkout's commands use (GYMSANDBOX_CLUSTER_DIR, default .cluster/)."""
    return Paths(STATE_DIR)
