"""The pinned binaries, built or found cached by hack/build-binaries.sh (under ~/.cache/gymsandbox), and
kubectl run with them."""

from __future__ import annotations

import subprocess
from pathlib import Path

from hack.localcluster.paths import HACK

# The real node's components, by the name build-binaries.sh knows them by.
NODE_COMPONENTS = ("kubelet", "containerd", "gvisor", "knp", "coredns")


def binaries() -> dict[str, Path]:
    """Build (or find cached) binaries; returns tool name -> path."""
    out = subprocess.run(
        [str(HACK / "build-binaries.sh")], check=True, stdout=subprocess.PIPE, text=True
    ).stdout
    dirs = dict(line.split("=", 1) for line in out.split())
    tools = {
        "etcd": "etcd",
        "kwok": "kwok",
        "helm": "helm",
        "kube-apiserver": "kubernetes",
        "kube-controller-manager": "kubernetes",
        "kube-scheduler": "kubernetes",
        "kubectl": "kubernetes",
    }
    return {tool: Path(dirs[component]) / tool for tool, component in tools.items()}


def node_binaries() -> dict[str, Path]:
    """The real node's components: name -> the directory of its binaries."""
    out = subprocess.run(
        [str(HACK / "build-binaries.sh"), *NODE_COMPONENTS], check=True, stdout=subprocess.PIPE, text=True
    ).stdout
    return {name: Path(d) for name, d in (line.split("=", 1) for line in out.split())}


def kubectl(bins: dict[str, Path], kubeconfig: Path, *args: str, stdin: str | None = None) -> str:
    result = subprocess.run(
        [str(bins["kubectl"]), f"--kubeconfig={kubeconfig}", *args],
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
    return result.stdout
