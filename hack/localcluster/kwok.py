"""kwok's side of the local cluster: the fake nodes (one per runtime) and the RuntimeClasses that pick them,
the stages that make their pods Running and Ready, the CRDs of kwok's per-pod Exec and Logs objects, and
`kubectl exec` into a fake node's pod (run as a local process)."""

from __future__ import annotations

import json
import textwrap
import time
from pathlib import Path

from hack.localcluster.nodeconfig import REAL_NODE_LABEL
from hack.localcluster.paths import Paths
from hack.localcluster.tools import binaries, kubectl

# Fake nodes: one per runtime, labelled so each RuntimeClass schedules onto its own node only.
RUNTIME_LABEL = "gymsandbox.dev/runtime"
NODES = {"kwok-kata-0": "kata", "kwok-crun-0": "crun"}
RUNTIME_CLASSES = {"kata-qemu": "kata", "crun": "crun"}
# The real node (node.py) carries this taint; pods of a RuntimeClass here tolerate it; others stay on
# the kwok nodes.
REAL_NODE_TAINT = REAL_NODE_LABEL
# kwok's stock stages: nodes become Ready and keep a lease; scheduled pods become Running and Ready;
# claims of the default StorageClass `kwok-volume` get a volume and bind.
KWOK_STAGE_SETS = ["node/fast", "node/heartbeat-with-lease", "pod/fast", "volume/fast"]
# Plus what a real kubelet does and kwok's stock stages do not: when the node controller marks a running pod
# not Ready (its node's lease went stale, as in a long API server stall), the kubelet writes its own Ready
# back at its next status sync. Without it a kwok pod stays not Ready for good once that happens.
KWOK_POD_READY_AGAIN = """\
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-ready-again
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: .metadata.deletionTimestamp
      operator: DoesNotExist
    - key: .status.phase
      operator: In
      values: [Running]
    - key: '.status.conditions.[] | select( .type == "ContainersReady" ) | .status'
      operator: In
      values: ["True"]
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: NotIn
      values: ["True"]
  next:
    statusTemplate: |
      conditions:
      - lastTransitionTime: {{ Now | Quote }}
        status: "True"
        type: Ready
"""
# And after the node controller marked a fake node NotReady, kwok's stock node-initialize stage runs again and
# its status patch drops the node's addresses: the API server then has no address to reach kwok's kubelet
# server at (`kubectl exec`: "no preferred addresses found"). This stage puts them back.
KWOK_NODE_ADDRESSES_AGAIN = """\
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: node-addresses-again
spec:
  resourceRef:
    apiGroup: v1
    kind: Node
  selector:
    matchExpressions:
    - key: .status.addresses
      operator: DoesNotExist
  next:
    statusTemplate: |
      addresses:
      {{ with NodeIP }}
      - address: {{ . | Quote }}
        type: InternalIP
      {{ end }}
      {{ with NodeName }}
      - address: {{ . | Quote }}
        type: Hostname
      {{ end }}
"""
KWOK_REPAIRS = [KWOK_POD_READY_AGAIN, KWOK_NODE_ADDRESSES_AGAIN]
# kwok kinds read from the API (not from its --config file), so they can be created per pod at any time.
KWOK_CRD_KINDS = {"Exec": "execs", "Logs": "logs"}
# The only environment kwok (and so every command it runs for `kubectl exec`) gets: not the caller's.
KWOK_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}


def kwok_documents(bins: dict[str, Path]) -> tuple[list[str], list[str]]:
    """kwok's stock files for our sets, plus KWOK_REPAIRS: (Stage documents for kwok, API objects such as the
    StorageClass)."""
    stage_root = bins["kwok"].parent.parent / "stages"
    stages: list[str] = []
    objects: list[str] = []
    for stage_set in KWOK_STAGE_SETS:
        for file in sorted((stage_root / stage_set).glob("*.yaml")):
            if file.name == "kustomization.yaml":
                continue
            text = file.read_text()
            if file.name == "pod-ready.yaml":
                text = keep_pod_ip(text)
            (stages if "\nkind: Stage\n" in f"\n{text}" else objects).append(text)
    return [*stages, *KWOK_REPAIRS], objects


def keep_pod_ip(pod_ready_stage: str) -> str:
    """kwok's stock pod-ready stage, setting podIP(s) only on a pod that has none. A pod whose ready patch
    landed in a dying etcd without kwok seeing the answer is patched again with a newly allocated IP, which
    the API server merges into a second one of the same family and refuses: the pod would stay unready for
    good. (Seen when etcd is killed right under a burst of pod starts.)"""
    opening = "{{ with $podIPs }}\n      podIP:"
    if pod_ready_stage.count(opening) != 1:
        raise RuntimeError("kwok's pod-ready stage changed: review keep_pod_ip")
    head, tail = pod_ready_stage.split(opening)
    body, closing, rest = tail.partition("{{ end }}\n      {{ end }}")
    if not closing:
        raise RuntimeError("kwok's pod-ready stage changed: review keep_pod_ip")
    guarded = "{{ if not .status.podIP }}" + opening + body + closing + "\n      {{ end }}"
    return head + guarded + rest


def kwok_crds() -> str:
    """CRDs for KWOK_CRD_KINDS. kwok reads them with its own typed client, so no schema is needed here
    (kwok's full CRDs live only in its module source, which the binary cache does not keep)."""
    docs = []
    for kind, plural in KWOK_CRD_KINDS.items():
        docs.append(
            textwrap.dedent(f"""\
            apiVersion: apiextensions.k8s.io/v1
            kind: CustomResourceDefinition
            metadata:
              name: {plural}.kwok.x-k8s.io
            spec:
              group: kwok.x-k8s.io
              names: {{kind: {kind}, listKind: {kind}List, plural: {plural}, singular: {kind.lower()}}}
              scope: Namespaced
              versions:
              - name: v1alpha1
                served: true
                storage: true
                subresources: {{status: {{}}}}
                schema:
                  openAPIV3Schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}
            """)
        )
    return "---\n".join(docs)


def kwok_nodes(real_node: bool) -> dict[str, str]:
    """The fake nodes: with the real node up, `crun` pods run there for real instead of on kwok-crun-0."""
    return {name: runtime for name, runtime in NODES.items() if not (real_node and runtime == "crun")}


def cluster_objects(real_node: bool) -> str:
    """The fake nodes and the RuntimeClasses that schedule onto them (and tolerate the real node)."""
    docs = []
    for node, runtime in kwok_nodes(real_node).items():
        docs.append(
            textwrap.dedent(f"""\
            apiVersion: v1
            kind: Node
            metadata:
              name: {node}
              annotations:
                kwok.x-k8s.io/node: fake
              labels:
                kubernetes.io/hostname: {node}
                kubernetes.io/os: linux
                kubernetes.io/arch: amd64
                type: kwok
                {RUNTIME_LABEL}: {runtime}
            status:
              allocatable: {{cpu: "4000", memory: 8Ti, pods: "6000", ephemeral-storage: 100Ti}}
              capacity: {{cpu: "4000", memory: 8Ti, pods: "6000", ephemeral-storage: 100Ti}}
            """)
        )
    for name, runtime in RUNTIME_CLASSES.items():
        docs.append(
            textwrap.dedent(f"""\
            apiVersion: node.k8s.io/v1
            kind: RuntimeClass
            metadata:
              name: {name}
            handler: {name}
            scheduling:
              nodeSelector:
                {RUNTIME_LABEL}: {runtime}
              tolerations:
              - {{key: {REAL_NODE_TAINT}, operator: Equal, value: "true", effect: NoSchedule}}
            """)
        )
    return "---\n".join(docs)


def enable_exec(
    paths: Paths, namespace: str, pod: str, log_lines: tuple[str, ...] = (), served: bool = False
) -> Path:
    """Let `kubectl exec` and `kubectl logs` reach pod NAMESPACE/POD on a fake node; returns its directory.

    kwok runs each exec command as a local process (same OS user, same host, kwok's environment) in this
    pod's own directory, with HOME set to it; `log_lines` become its container log. kwok's workDir is a
    literal path (no per-pod templating), so each pod needs its own Exec object, keyed by its name: it
    may be created before the pod, and a pod without one gets no exec and no logs.

    kwok learns of the Exec object from a watch, so an exec sent right after the apply may still find
    none ("no exec found for container"). `served=True` (the pod must be running) returns only once kwok
    has run a command in the pod, and raises with kwok's last answer if that takes over a minute.
    """
    workdir = paths.exec / namespace / pod
    workdir.mkdir(parents=True, exist_ok=True)
    log_file = paths.exec / namespace / f"{pod}.log"
    # kwok reads logs in the CRI format: "<RFC 3339 time> <stream> <F(ull)|P(artial)> <text>".
    now = time.strftime("%Y-%m-%dT%H:%M:%S.000000000Z", time.gmtime())
    log_file.write_text("".join(f"{now} stdout F {line}\n" for line in log_lines))
    meta = {"name": pod, "namespace": namespace}
    objects = [
        {
            "apiVersion": "kwok.x-k8s.io/v1alpha1",
            "kind": "Exec",
            "metadata": meta,
            "spec": {
                "execs": [
                    {"local": {"workDir": str(workdir), "envs": [{"name": "HOME", "value": str(workdir)}]}}
                ]
            },
        },
        {
            "apiVersion": "kwok.x-k8s.io/v1alpha1",
            "kind": "Logs",
            "metadata": meta,
            "spec": {"logs": [{"logsFile": str(log_file)}]},
        },
    ]
    kubectl(
        binaries(),
        paths.kubeconfig,
        "apply",
        "-f",
        "-",
        stdin=json.dumps({"kind": "List", "apiVersion": "v1", "items": objects}),
    )
    if served:
        _wait_exec_served(paths, namespace, pod)
    return workdir


def _wait_exec_served(paths: Paths, namespace: str, pod: str, timeout: float = 60) -> None:
    bins, deadline, answer = binaries(), time.monotonic() + timeout, ""
    while time.monotonic() < deadline:
        try:
            kubectl(bins, paths.kubeconfig, "exec", "-n", namespace, pod, "--", "true")
            return
        except RuntimeError as failed:
            answer = str(failed)
        time.sleep(0.2)
    raise RuntimeError(f"kwok did not serve exec in {namespace}/{pod} within {timeout:.0f} s: {answer}")
