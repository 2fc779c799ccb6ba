"""The sample Gym host on the local cluster's real node, as `make run` shows it.

    python -m hack.sample up         the chart (operator and broker as pods, from the image built here), a
                               restricted namespace with a claim, and examples/gym-host/gymhost.yaml under
                               gVisor; waits for it to be Ready
    python -m hack.sample rollout    post one rollout to the host (from inside its pod) and print the answer
    python -m hack.sample check      exit 0 when the real node runs, else say why not and exit 1

Needs the local cluster with its real node (`python -m hack.localcluster up`) and the project's virtualenv
(PyYAML, gymsandbox): unlike hack/localcluster/, it is not standard library only. Everything it makes is named
below, so `up` again replaces it and `python -m hack.localcluster down` removes it with the cluster.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import yaml  # the project's virtualenv: `make run` runs this with it

from gymsandbox.policy.cluster import USABLE_BY_LABEL
from hack.localcluster import node as real_node
from hack.localcluster import tools
from hack.localcluster.nodeconfig import REAL_NODE_LABEL, TAINT
from hack.localcluster.paths import ROOT, Paths, cluster_paths

CHART = ROOT / "charts" / "gymsandbox-operator"
HOST_MANIFEST = ROOT / "examples" / "gym-host" / "gymhost.yaml"
POLICY = ROOT / "examples" / "policy.yaml"
RELEASE, RELEASE_NAMESPACE = "gymsandbox", "gymsandbox-system"
NAMESPACE, CLAIM = "gym-demo", "gym-storage"
ENVIRONMENT = "environments/sample"
IMAGES = ("gymsandbox", "gym-host", "swe-episode")
RESTRICTED = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
}
USABLE_BY = {USABLE_BY_LABEL: "gymhosts"}  # the sample policy's references.claimSelector


def log(message: str) -> None:
    print(f"[sample {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Sample:
    """Where the sample lives; the tests make their own (another release, namespace and volume)."""

    paths: Paths
    release: str = RELEASE
    release_namespace: str = RELEASE_NAMESPACE
    namespace: str = NAMESPACE

    @property
    def volume(self) -> Path:
        return self.paths.root / f"volume-{self.namespace}"

    @cached_property
    def tools(self) -> dict[str, Path]:
        return tools.binaries()

    def kubectl(self, *args: str, stdin: str | None = None) -> str:
        return tools.kubectl(self.tools, self.paths.kubeconfig, *args, stdin=stdin)

    def apply(self, *documents: dict[str, Any]) -> None:
        self.kubectl("apply", "-f", "-", stdin="\n".join(json.dumps(d) for d in documents))


def chart_values(image: str, watched: str) -> dict[str, Any]:
    """The sample policy with the locally built images approved; both Deployments on the real node."""
    policy = yaml.safe_load(POLICY.read_text())
    policy.pop("broker")  # the chart sets it
    policy["approvedImages"].append("localhost/gymsandbox/")
    policy["watchNamespaces"] = [watched]
    placement = {
        "nodeSelector": {REAL_NODE_LABEL: "true"},
        "tolerations": [{**TAINT, "operator": "Equal"}],
    }
    repository, tag = image.rsplit(":", 1)
    return {
        "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
        "operator": placement,
        "broker": {"replicas": 1, **placement},
        "policy": policy,
    }


def gym_host(images: dict[str, str]) -> dict[str, Any]:
    """examples/gym-host/gymhost.yaml with the tags just built."""
    host: dict[str, Any] = yaml.safe_load(HOST_MANIFEST.read_text())
    host["spec"]["image"] = images.get("gym-host", host["spec"]["image"])
    for variable in host["spec"]["env"]:
        if variable["name"] == "GYM_EPISODE_IMAGE":
            variable["value"] = images.get("swe-episode", variable["value"])
    return host


def volume(sample: Sample, node: str) -> list[dict[str, Any]]:
    """A directory on the real node as the claim the host mounts: its environment tree and workspaces."""
    root = sample.volume
    (root / ENVIRONMENT).mkdir(parents=True, exist_ok=True)
    (root / ENVIRONMENT / "README").write_text("the sample Gym host's environment (mounted read-only)\n")
    for parent in (root, *root.parents):  # the kubelet (root) mounts it; the pods reach it as 65532
        parent.chmod(parent.stat().st_mode | 0o711)
    return local_volume(sample.namespace, root, node)


def local_volume(namespace: str, root: Path, node: str) -> list[dict[str, Any]]:
    """The claim CLAIM in `namespace`, bound to the directory `root` on `node` through a local
    PersistentVolume (`pv-<namespace>`), labelled for hosts as the sample policy asks."""
    name = f"pv-{namespace}"[:63]
    affinity = {"required": {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}}  # fmt: skip
    pv = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "claimRef": {"namespace": namespace, "name": CLAIM},
            "local": {"path": str(root)},
            "nodeAffinity": affinity,
        },
    }
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": CLAIM, "namespace": namespace, "labels": USABLE_BY},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "",
            "volumeName": name,
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }
    return [pv, claim]


def up(sample: Sample, timeout: float = 300) -> str:
    """Deploy it all and wait for the host to be Ready; returns the host's pod."""
    if not real_node.running(sample.paths):
        raise SystemExit("sample.py: the real node is not running (python -m hack.localcluster up starts it)")
    images = real_node.load_images(sample.paths, *IMAGES)
    node = sample.kubectl("get", "nodes", "-l", f"{REAL_NODE_LABEL}=true", "-o", "name")
    node = node.strip().removeprefix("node/")
    metadata = {"name": sample.namespace, "labels": RESTRICTED}
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": metadata}
    sample.apply(namespace, *volume(sample, node))
    values = sample.paths.root / f"values-{sample.release}.json"
    values.write_text(json.dumps(chart_values(images["gymsandbox"], sample.namespace)))
    log(f"helm upgrade --install {sample.release} (operator and broker on {node})")
    subprocess.run(
        [str(sample.tools["helm"]), f"--kubeconfig={sample.paths.kubeconfig}", "upgrade", "--install",
         sample.release, str(CHART), "--namespace", sample.release_namespace, "--create-namespace",
         "--values", str(values), "--wait", "--timeout", "300s"],
        check=True, stdout=sys.stderr,
    )  # fmt: skip
    host = gym_host(images)
    sample.kubectl("apply", "-n", sample.namespace, "-f", "-", stdin=json.dumps(host))
    name = host["metadata"]["name"]
    log(f"waiting for GymHost {sample.namespace}/{name} to be Ready (gVisor)")
    return wait_ready(sample, name, timeout)


def wait_ready(sample: Sample, name: str, timeout: float) -> str:
    """The host's pod, once its status speaks of its current spec (a re-applied host may still show the
    Ready of its previous pod) and says Ready."""
    deadline = time.monotonic() + timeout
    while True:
        host = json.loads(sample.kubectl("get", "-n", sample.namespace, f"gymhost/{name}", "-o", "json"))
        status = host.get("status") or {}
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions") or [])
        if ready and status.get("observedGeneration") == host["metadata"]["generation"]:
            return str(status["podName"])
        if time.monotonic() > deadline:
            conditions = {c["type"]: (c["status"], c.get("reason")) for c in status.get("conditions") or []}
            raise SystemExit(f"sample.py: GymHost {name} not Ready in {timeout:g} s: {conditions}")
        time.sleep(1)


def down(sample: Sample) -> None:
    """Remove what `up` made (the tests' samples; `make run`'s goes with the cluster)."""
    helm = [str(sample.tools["helm"]), f"--kubeconfig={sample.paths.kubeconfig}"]
    sample.kubectl("delete", "gymhosts", "--all", "-n", sample.namespace, "--ignore-not-found", "--wait=true")
    subprocess.run(
        [*helm, "uninstall", sample.release, "-n", sample.release_namespace, "--wait", "--ignore-not-found"],
        check=False,
        stdout=sys.stderr,
    )
    for kind, name in (("namespace", sample.namespace), ("namespace", sample.release_namespace)):
        sample.kubectl("delete", kind, name, "--ignore-not-found", "--wait=false")
    sample.kubectl("delete", "pv", f"pv-{sample.namespace}"[:63], "--ignore-not-found", "--wait=false")
    shutil.rmtree(sample.volume, ignore_errors=True)


def rollout(sample: Sample, pod: str, solution: str | None = None) -> dict[str, Any]:
    """One rollout, posted from inside the host's pod to its own server: its answer with its HTTP `status`
    (a 503 names why no sandbox could run it). Raises when no answer came."""
    post = "python3 /opt/gym-host/server.py post"
    script = f"cat > /tmp/solution.py && {post} /tmp/solution.py" if solution is not None else post
    done = subprocess.run(
        [str(sample.tools["kubectl"]), f"--kubeconfig={sample.paths.kubeconfig}", "exec", "-i",
         "-n", sample.namespace, pod, "--", "sh", "-c", script],
        input=solution or "", capture_output=True, text=True, check=False, timeout=600,
    )  # fmt: skip
    lines = done.stdout.strip().splitlines()
    if not lines:
        raise RuntimeError(f"no answer from the sample host {pod}: {done.stderr.strip()}")
    parsed: dict[str, Any] = json.loads(lines[-1])
    return parsed


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="python -m hack.sample",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("command", choices=["up", "rollout", "check"])
    args = parser.parse_args()
    sample = Sample(cluster_paths())
    if args.command == "check":
        if real_node.running(sample.paths):
            return 0
        why = real_node.missing_capability()
        if why is None and not real_node.enabled():
            why = "GYMSANDBOX_REAL_NODE=0"
        why = why or "python -m hack.localcluster up did not start it"
        print(f"the real node is not running: {why}", file=sys.stderr)
        return 1
    if args.command == "up":
        print(up(sample))
    else:
        pod = sample.kubectl(
            "get", "-n", sample.namespace, "gymhosts", "-o", "jsonpath={.items[0].status.podName}"
        )
        print(json.dumps(rollout(sample, pod)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
