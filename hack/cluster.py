#!/usr/bin/env python3
"""A real local Kubernetes control plane on 127.0.0.1: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and kwok (fake nodes), from the binaries hack/build-binaries.sh builds.

    hack/cluster.py up      start (or reuse a running one); writes .cluster/kubeconfig
    hack/cluster.py down    stop every process `up` started, by PID, and remove .cluster/
    hack/cluster.py status  exit 0 when the recorded cluster is up and answering
    hack/cluster.py enable-exec NAMESPACE POD
                            let `kubectl exec` and `kubectl logs` reach that pod on a fake node

Standard library only, so it runs before the project's virtualenv exists.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
STATE_DIR = Path(os.environ.get("GYMSANDBOX_CLUSTER_DIR", ROOT / ".cluster"))
HACK = ROOT / "hack"

# Fake nodes: one per runtime, labelled so each RuntimeClass schedules onto its own node only.
RUNTIME_LABEL = "gymsandbox.dev/runtime"
NODES = {"kwok-kata-0": "kata", "kwok-crun-0": "crun"}
RUNTIME_CLASSES = {"kata-qemu": "kata", "crun": "crun"}
# The real node (hack/node.py) carries this taint; pods of a RuntimeClass here tolerate it; others stay on
# the kwok nodes.
REAL_NODE_TAINT = "gymsandbox.dev/real-node"
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


def log(message: str) -> None:
    print(f"[cluster {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Paths:
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


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def make_pki(pki: Path) -> dict[str, str]:
    """CA, serving cert, service-account key pair and bearer tokens. Returns tokens by user."""
    pki.mkdir(parents=True, exist_ok=True)
    openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "365",
        "-subj",
        "/CN=gymsandbox-local-ca",
        "-keyout",
        str(pki / "ca.key"),
        "-out",
        str(pki / "ca.crt"),
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
    )
    serving_cert(
        pki,
        "server",
        "kube-apiserver",
        "IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,"
        "DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local",
    )
    # kwok's kubelet server (exec, logs), so the API server can verify whom it sends exec streams to.
    serving_cert(pki, "kwok", "kwok-kubelet", "IP:127.0.0.1")
    # The API server's identity towards kubelets (exec, logs): the real node accepts no anonymous client.
    issue_cert(pki, "kubelet-client", "/CN=kube-apiserver-kubelet-client", "clientAuth")
    openssl("genrsa", "-out", str(pki / "sa.key"), "2048")
    openssl("rsa", "-in", str(pki / "sa.key"), "-pubout", "-out", str(pki / "sa.pub"))
    users = {
        "admin": ("admin", "system:masters"),
        "kube-controller-manager": ("system:kube-controller-manager", ""),
        "kube-scheduler": ("system:kube-scheduler", ""),
        "kwok": ("kwok", "system:masters"),
    }
    tokens = {name: secrets.token_hex(24) for name in users}
    lines = [f'{tokens[name]},{user},{user},"{groups}"' for name, (user, groups) in users.items()]
    (pki / "tokens.csv").write_text("\n".join(lines) + "\n")
    for path in pki.iterdir():
        path.chmod(0o600)
    return tokens


def serving_cert(pki: Path, name: str, common_name: str, alt_names: str) -> None:
    """NAME.crt and NAME.key: a TLS server certificate for `alt_names`, signed by the cluster CA."""
    issue_cert(pki, name, f"/CN={common_name}", "serverAuth", alt_names)


def issue_cert(pki: Path, name: str, subject: str, usage: str, alt_names: str = "") -> None:
    """NAME.crt and NAME.key in `pki`, signed by the cluster CA: `usage` is serverAuth or clientAuth."""
    ext = pki / f"{name}.ext"
    ext.write_text(
        "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
        f"extendedKeyUsage={usage}\n" + (f"subjectAltName={alt_names}\n" if alt_names else "")
    )
    openssl(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        subject,
        "-keyout",
        str(pki / f"{name}.key"),
        "-out",
        str(pki / f"{name}.csr"),
    )
    openssl(
        "x509",
        "-req",
        "-in",
        str(pki / f"{name}.csr"),
        "-CA",
        str(pki / "ca.crt"),
        "-CAkey",
        str(pki / "ca.key"),
        "-CAcreateserial",
        "-days",
        "365",
        "-extfile",
        str(ext),
        "-out",
        str(pki / f"{name}.crt"),
    )
    (pki / f"{name}.key").chmod(0o600)


def write_kubeconfig(path: Path, server: str, ca: Path, token: str, user: str) -> None:
    ca_data = base64.b64encode(ca.read_bytes()).decode()
    path.write_text(
        textwrap.dedent(f"""\
        apiVersion: v1
        kind: Config
        clusters:
        - name: gymsandbox-local
          cluster:
            server: {server}
            certificate-authority-data: {ca_data}
        users:
        - name: {user}
          user:
            token: {token}
        contexts:
        - name: gymsandbox-local
          context:
            cluster: gymsandbox-local
            user: {user}
        current-context: gymsandbox-local
        """)
    )
    path.chmod(0o600)


# Started processes outlive this script; holding their Popen objects keeps a long-lived caller (the test
# session) from warning about them being garbage-collected while they run.
_STARTED: list[subprocess.Popen[bytes]] = []


def start(name: str, argv: list[str], logs: Path, env: dict[str, str] | None = None) -> int:
    """Start a process in its own session (it outlives this script); returns its PID."""
    with (logs / f"{name}.log").open("ab") as log_file:
        proc = subprocess.Popen(
            argv,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=env,
        )
    _STARTED.append(proc)
    log(f"started {name} (pid {proc.pid})")
    return proc.pid


class Processes:
    """Processes started by name and recorded in a state file as they start: each one's PID and how it was
    started, so that `restart` can start any of them again as it was (the chaos tier kills and restarts
    them)."""

    def __init__(self, state_file: Path, logs: Path, initial: dict[str, object] | None = None) -> None:
        self.state_file, self.logs = state_file, logs
        if initial is None:
            initial = json.loads(state_file.read_text()) if state_file.exists() else {}
        self.state: dict[str, Any] = {"pids": {}, "commands": {}, **initial}

    @property
    def pids(self) -> dict[str, int]:
        return self.state["pids"]  # type: ignore[no-any-return]

    def save(self) -> None:
        self.state_file.write_text(json.dumps(self.state, indent=2))

    def start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> int:
        pid = start(name, argv, self.logs, env=env)
        self.pids[name] = pid
        self.state["commands"][name] = {"argv": argv, "env": env}
        self.save()
        return pid

    def restart(self, name: str) -> int:
        """Stop `name` if it still runs (or reap it if it was killed), and start it again as it was."""
        stop_pid(name, self.pids[name])
        command = self.state["commands"][name]
        return self.start(name, command["argv"], command["env"])

    def wait(self, what: str, check: object, timeout: float) -> None:
        wait_until(what, check, timeout, self.pids)


def wait_until(what: str, check: object, timeout: float, pids: dict[str, int]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for name, pid in pids.items():
            if not alive(pid):
                raise RuntimeError(f"{name} (pid {pid}) exited while waiting for {what}; see its log")
        if check():  # type: ignore[operator]
            return
        time.sleep(0.25)
    raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is not alive; it only waits for its parent to reap it.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def https_ok(url: str, ca: Path, token: str | None = None) -> bool:
    ctx = ssl.create_default_context(cafile=str(ca))
    request = urllib.request.Request(url)  # noqa: S310 - an https URL we built
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, context=ctx, timeout=2) as response:  # noqa: S310 - https URL we built
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


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


def kwok_documents(bins: dict[str, Path]) -> tuple[list[str], list[str]]:
    """kwok's stock files for our sets, plus KWOK_REPAIRS: (Stage documents for kwok, API objects such as the
    StorageClass)."""
    stage_root = bins["kwok"].parent.parent / "stages"
    stages, objects = [], []
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


def node_script() -> Any:
    """hack/node.py (the real node), imported on first use: it imports this file in turn."""
    sys.path.insert(0, str(HACK))
    import node  # noqa: PLC0415 - hack/ is not a package, and node.py imports this module

    return node


def up(paths: Paths) -> None:
    if status(paths):
        log(f"reusing the running cluster; KUBECONFIG={paths.kubeconfig}")
        return
    down(paths, quiet=True)
    real_node = real_node_wanted()
    bins = binaries()
    paths.root.mkdir(parents=True, exist_ok=True)
    paths.logs.mkdir(parents=True, exist_ok=True)
    tokens = make_pki(paths.pki)
    pki = paths.pki
    ports = {name: free_port() for name in ("etcd", "etcd-peer", "apiserver", "kcm", "scheduler", "kwok")}
    server = f"https://127.0.0.1:{ports['apiserver']}"
    for component in ("kube-controller-manager", "kube-scheduler", "kwok"):
        write_kubeconfig(
            paths.root / f"{component}.kubeconfig", server, pki / "ca.crt", tokens[component], component
        )
    write_kubeconfig(paths.kubeconfig, server, pki / "ca.crt", tokens["admin"], "admin")
    procs = Processes(paths.state, paths.logs, {"ports": ports, "server": server, "real_node": real_node})
    procs.save()
    try:
        procs.start(
            "etcd",
            [
                str(bins["etcd"]),
                "--name=local",
                f"--data-dir={paths.root / 'etcd'}",
                f"--listen-client-urls=http://127.0.0.1:{ports['etcd']}",
                f"--advertise-client-urls=http://127.0.0.1:{ports['etcd']}",
                f"--listen-peer-urls=http://127.0.0.1:{ports['etcd-peer']}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{ports['etcd-peer']}",
                f"--initial-cluster=local=http://127.0.0.1:{ports['etcd-peer']}",
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
        )
        procs.wait("etcd", lambda: _http_ok(f"http://127.0.0.1:{ports['etcd']}/health"), 60)
        procs.start(
            "kube-apiserver",
            [
                str(bins["kube-apiserver"]),
                f"--etcd-servers=http://127.0.0.1:{ports['etcd']}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={ports['apiserver']}",
                f"--tls-cert-file={pki / 'server.crt'}",
                f"--tls-private-key-file={pki / 'server.key'}",
                f"--client-ca-file={pki / 'ca.crt'}",
                # Without a request-header CA every component logs its absence. No certificate we issue is
                # named front-proxy-client, so none can assert identities through proxy headers.
                f"--requestheader-client-ca-file={pki / 'ca.crt'}",
                "--requestheader-allowed-names=front-proxy-client",
                f"--token-auth-file={pki / 'tokens.csv'}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={pki / 'sa.pub'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                "--authorization-mode=Node,RBAC",
                # exec and logs go to the node's kubelet, here kwok on 127.0.0.1 (the fake nodes have no
                # other address); verify its certificate rather than trust whoever holds the port.
                f"--kubelet-certificate-authority={pki / 'ca.crt'}",
                f"--kubelet-client-certificate={pki / 'kubelet-client.crt'}",
                f"--kubelet-client-key={pki / 'kubelet-client.key'}",
                "--kubelet-preferred-address-types=InternalIP",
                "--allow-privileged=true",
                "--endpoint-reconciler-type=none",
                "--service-cluster-ip-range=10.0.0.0/24",
                "--profiling=false",
                "--v=1",
            ],
        )
        readyz = f"{server}/readyz"
        procs.wait("kube-apiserver /readyz", lambda: https_ok(readyz, pki / "ca.crt", tokens["admin"]), 120)
        procs.start(
            "kube-controller-manager",
            [
                str(bins["kube-controller-manager"]),
                f"--kubeconfig={paths.root / 'kube-controller-manager.kubeconfig'}",
                f"--authentication-kubeconfig={paths.root / 'kube-controller-manager.kubeconfig'}",
                f"--authorization-kubeconfig={paths.root / 'kube-controller-manager.kubeconfig'}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={ports['kcm']}",
                f"--service-account-private-key-file={pki / 'sa.key'}",
                f"--root-ca-file={pki / 'ca.crt'}",
                "--use-service-account-credentials=true",
                "--profiling=false",
                "--v=1",
            ],
        )
        procs.start(
            "kube-scheduler",
            [
                str(bins["kube-scheduler"]),
                f"--kubeconfig={paths.root / 'kube-scheduler.kubeconfig'}",
                f"--authentication-kubeconfig={paths.root / 'kube-scheduler.kubeconfig'}",
                f"--authorization-kubeconfig={paths.root / 'kube-scheduler.kubeconfig'}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={ports['scheduler']}",
                "--profiling=false",
                "--v=1",
            ],
        )
        stages, kwok_objects = kwok_documents(bins)
        stage_file = paths.root / "kwok-stages.yaml"
        stage_file.write_text("\n---\n".join(stages))
        # Before kwok starts, so it finds them when it begins to watch per-pod Exec and Logs objects.
        crds = kwok_crds()
        kubectl(bins, paths.kubeconfig, "apply", "-f", "-", stdin=crds)
        kubectl(bins, paths.kubeconfig, "wait", "--for=condition=Established", "-f", "-", stdin=crds)
        procs.start(
            "kwok",
            [
                str(bins["kwok"]),
                f"--kubeconfig={paths.root / 'kwok.kubeconfig'}",
                f"--config={stage_file}",
                "--manage-all-nodes=false",
                "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
                "--node-ip=127.0.0.1",
                "--node-lease-duration-seconds=40",
                "--cidr=10.244.0.0/16",
                # The kubelet server (exec, logs) on loopback only; --node-port alone would listen on
                # 0.0.0.0. The same port goes into each node's status.daemonEndpoints, which is where the
                # API server sends exec and logs requests (else to 10250).
                f"--server-address=127.0.0.1:{ports['kwok']}",
                f"--node-port={ports['kwok']}",
                f"--tls-cert-file={pki / 'kwok.crt'}",
                f"--tls-private-key-file={pki / 'kwok.key'}",
                f"--enable-crds={','.join(KWOK_CRD_KINDS)}",
            ],
            env={**KWOK_ENV, "HOME": str(paths.root)},
        )
        kubectl(
            bins,
            paths.kubeconfig,
            "apply",
            "-f",
            "-",
            stdin="\n---\n".join([cluster_objects(real_node), *kwok_objects]),
        )
        procs.wait("nodes Ready", lambda: _nodes_ready(bins, paths, len(kwok_nodes(real_node))), 120)
        procs.wait("service accounts", lambda: _default_sa_exists(bins, paths), 120)
        if real_node:
            node_script().up(paths)
    except BaseException:
        log(f"start-up failed; logs are in {paths.logs}")
        down(paths, quiet=True, keep_logs=True)
        raise
    log(f"cluster is up: {server}")
    log(f"export KUBECONFIG={paths.kubeconfig}")


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310 - loopback http URL we built
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def _nodes_ready(bins: dict[str, Path], paths: Paths, count: int) -> bool:
    out = kubectl(
        bins,
        paths.kubeconfig,
        "get",
        "nodes",
        "-o",
        'jsonpath={range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\\n"}{end}',
    )
    statuses = out.split()
    return len(statuses) == count and all(s == "True" for s in statuses)


def real_node_wanted() -> bool:
    """Whether `up` starts the real node: asked for (GYMSANDBOX_REAL_NODE, default on) and possible here."""
    node = node_script()
    if not node.enabled():
        log("GYMSANDBOX_REAL_NODE=0: no real node; kwok nodes only")
        return False
    why = node.missing_capability()
    if why:
        log(f"no real node on this machine ({why}); carrying on with kwok nodes only")
        return False
    return True


def _default_sa_exists(bins: dict[str, Path], paths: Paths) -> bool:
    try:
        kubectl(bins, paths.kubeconfig, "get", "serviceaccount", "default", "-n", "default")
    except RuntimeError:
        return False
    return True


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


def status(paths: Paths) -> bool:
    if not paths.state.exists():
        return False
    state = json.loads(paths.state.read_text())
    if not all(alive(pid) for pid in state["pids"].values()):
        return False
    if state.get("real_node") and not node_script().running(paths):
        return False
    token = _admin_token(paths)
    return https_ok(f"{state['server']}/readyz", paths.pki / "ca.crt", token)


def _admin_token(paths: Paths) -> str | None:
    for line in paths.kubeconfig.read_text().splitlines():
        if line.strip().startswith("token:"):
            return line.split(":", 1)[1].strip()
    return None


def down(paths: Paths, *, quiet: bool = False, keep_logs: bool = False) -> None:
    node_script().down(paths)  # before the control plane: it drains the node's pods through the API
    if paths.state.exists():
        state = json.loads(paths.state.read_text())
        # Stop in reverse start order: nodes and controllers before the API server, etcd last.
        for name, pid in reversed(list(state["pids"].items())):
            stop_pid(name, pid)
    elif not quiet:
        log("no cluster recorded; nothing to stop")
    if keep_logs:
        for child in paths.root.iterdir() if paths.root.exists() else []:
            if child != paths.logs:
                shutil.rmtree(child) if child.is_dir() else child.unlink()
    else:
        shutil.rmtree(paths.root, ignore_errors=True)


def stop_pid(name: str, pid: int, grace: float = 10) -> None:
    if not alive(pid):
        reap(pid, grace)
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if alive(pid):
        os.kill(pid, signal.SIGKILL)
    # What it left running in its process group too: kwok's exec commands outlive a client that gave up.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    reap(pid, grace)
    log(f"stopped {name} (pid {pid})")


def reap(pid: int, timeout: float) -> None:
    """Wait for our own child, so it leaves no zombie (a child another process killed is one until then)."""
    for proc in _STARTED:
        if proc.pid == pid:
            proc.wait(timeout=timeout)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("command", choices=["up", "down", "status", "enable-exec"])
    parser.add_argument("target", nargs="*", metavar="NAMESPACE POD", help="the pod, for enable-exec")
    args = parser.parse_args()
    paths = Paths(STATE_DIR)
    if args.command == "up":
        up(paths)
    elif args.command == "down":
        down(paths)
    elif args.command == "enable-exec":
        if len(args.target) != 2:
            parser.error("enable-exec takes NAMESPACE POD")
        print(enable_exec(paths, *args.target))
    else:
        ok = status(paths)
        print("up" if ok else "down")
        return 0 if ok else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
