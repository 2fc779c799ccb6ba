"""The local control plane as a whole: `up` (in named steps: state directory and credentials, etcd, the API
server, the controllers, kwok and its fake nodes, then the real node), `down` and `status`.

etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok (fake nodes) run on 127.0.0.1 from the
binaries hack/build-binaries.sh builds; their state, logs and the admin kubeconfig live in the state directory
(.cluster/ unless GYMSANDBOX_CLUSTER_DIR says otherwise).
"""

from __future__ import annotations

import json
import shutil
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from hack.localcluster import kwok, node
from hack.localcluster.console import logger
from hack.localcluster.kubeconfig import admin_token, write_token_kubeconfig
from hack.localcluster.paths import Paths
from hack.localcluster.pki import make_pki
from hack.localcluster.processes import Processes, alive, free_port, stop_pid, wait_until
from hack.localcluster.tools import binaries, kubectl

log = logger("cluster")

# Each process's loopback port, chosen free at `up` and recorded in the state file.
PORTS = ("etcd", "etcd-peer", "apiserver", "kcm", "scheduler", "kwok")
# How long a repaired cluster (its dead components started again) may take to answer before it is replaced.
REPAIR_SECONDS = 90.0
# The control-plane components that reach the API server with a kubeconfig (and a token) of their own.
COMPONENTS = ("kube-controller-manager", "kube-scheduler", "kwok")


@dataclass(frozen=True)
class Launch:
    """What the steps of one `up` share: where the state goes, the binaries, the ports, the credentials, and
    the processes started so far."""

    paths: Paths
    bins: dict[str, Path]
    ports: dict[str, int]
    tokens: dict[str, str]
    procs: Processes
    real_node: bool

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports['apiserver']}"

    @property
    def pki(self) -> Path:
        return self.paths.pki

    def kubeconfig(self, component: str) -> Path:
        return self.paths.root / f"{component}.kubeconfig"

    def kubectl(self, *args: str, stdin: str | None = None) -> str:
        return kubectl(self.bins, self.paths.kubeconfig, *args, stdin=stdin)


def up(paths: Paths) -> None:
    """Start the cluster, or reuse the one running from this state directory, or repair it (a component that
    died is started again as it was: its objects are kept). Only a cluster that cannot be repaired is
    replaced, and `up` says so first."""
    if status(paths):
        log(f"reusing the running cluster; KUBECONFIG={paths.kubeconfig}")
        return
    if repair(paths):
        return
    if paths.state.exists():
        log(
            f"replacing the cluster of {paths.root}: it cannot be repaired, so every object in it (GymHosts,"
            " episodes, the chart release) is lost"
        )
    down(paths, quiet=True)
    launch = prepare(paths, real_node_wanted(), binaries())
    try:
        start_etcd(launch)
        start_api_server(launch)
        start_controllers(launch)
        kwok_objects = start_kwok(launch)
        add_fake_nodes(launch, kwok_objects)
        if launch.real_node:
            node.up(paths)
    except BaseException:
        log(f"start-up failed; logs are in {paths.logs}")
        down(paths, quiet=True, keep_logs=True)
        raise
    log(f"cluster is up: {launch.server}")
    log(f"export KUBECONFIG={paths.kubeconfig}")


def prepare(paths: Paths, real_node: bool, bins: dict[str, Path]) -> Launch:
    """The state directory: certificates, tokens, a port per process, the kubeconfigs, and the state file
    that records them (and each process as it starts)."""
    paths.root.mkdir(parents=True, exist_ok=True)
    paths.logs.mkdir(parents=True, exist_ok=True)
    tokens = make_pki(paths.pki)
    ports = {name: free_port() for name in PORTS}
    server = f"https://127.0.0.1:{ports['apiserver']}"
    ca = paths.pki / "ca.crt"
    for component in COMPONENTS:
        write_token_kubeconfig(
            paths.root / f"{component}.kubeconfig", server, ca, tokens[component], component
        )
    write_token_kubeconfig(paths.kubeconfig, server, ca, tokens["admin"], "admin")
    procs = Processes(paths.state, paths.logs, {"ports": ports, "server": server, "real_node": real_node})
    procs.save()
    return Launch(paths, bins, ports, tokens, procs, real_node)


def start_etcd(launch: Launch) -> None:
    port, peer_port = launch.ports["etcd"], launch.ports["etcd-peer"]
    launch.procs.start(
        "etcd",
        [
            str(launch.bins["etcd"]),
            "--name=local",
            f"--data-dir={launch.paths.root / 'etcd'}",
            f"--listen-client-urls=http://127.0.0.1:{port}",
            f"--advertise-client-urls=http://127.0.0.1:{port}",
            f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
            f"--initial-cluster=local=http://127.0.0.1:{peer_port}",
            "--unsafe-no-fsync",
            "--log-level=warn",
        ],
    )
    launch.procs.wait("etcd", lambda: http_ok(f"http://127.0.0.1:{port}/health"), 60)


# Every exec and attach request at Metadata level (its URL, with the command in it, and who asked), nothing
# else: what a cluster's audit log keeps of an exec, which the security tier reads (the broker's commands
# must not be in it). A few hundred bytes per exec, rotated at 20 MB.
AUDIT_POLICY = """apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
    resources: [{group: "", resources: [pods/exec, pods/attach]}]
  - level: None
"""


def start_api_server(launch: Launch) -> None:
    pki = launch.pki
    audit_policy = launch.paths.root / "audit-policy.yaml"
    audit_policy.write_text(AUDIT_POLICY)
    launch.paths.audit_log.parent.mkdir(parents=True, exist_ok=True)
    launch.procs.start(
        "kube-apiserver",
        [
            str(launch.bins["kube-apiserver"]),
            f"--etcd-servers=http://127.0.0.1:{launch.ports['etcd']}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={launch.ports['apiserver']}",
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
            f"--audit-policy-file={audit_policy}",
            f"--audit-log-path={launch.paths.audit_log}",
            "--audit-log-maxsize=20",
            "--audit-log-maxbackup=1",
            "--profiling=false",
            "--v=1",
        ],
    )
    readyz = f"{launch.server}/readyz"
    launch.procs.wait(
        "kube-apiserver /readyz", lambda: https_ok(readyz, pki / "ca.crt", launch.tokens["admin"]), 120
    )


def start_controllers(launch: Launch) -> None:
    """kube-controller-manager and kube-scheduler (no leader election: there is one of each)."""
    kcm = launch.kubeconfig("kube-controller-manager")
    launch.procs.start(
        "kube-controller-manager",
        [
            str(launch.bins["kube-controller-manager"]),
            f"--kubeconfig={kcm}",
            f"--authentication-kubeconfig={kcm}",
            f"--authorization-kubeconfig={kcm}",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            f"--secure-port={launch.ports['kcm']}",
            f"--service-account-private-key-file={launch.pki / 'sa.key'}",
            f"--root-ca-file={launch.pki / 'ca.crt'}",
            "--use-service-account-credentials=true",
            "--profiling=false",
            "--v=1",
        ],
    )
    scheduler = launch.kubeconfig("kube-scheduler")
    launch.procs.start(
        "kube-scheduler",
        [
            str(launch.bins["kube-scheduler"]),
            f"--kubeconfig={scheduler}",
            f"--authentication-kubeconfig={scheduler}",
            f"--authorization-kubeconfig={scheduler}",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            f"--secure-port={launch.ports['scheduler']}",
            "--profiling=false",
            "--v=1",
        ],
    )


def start_kwok(launch: Launch) -> list[str]:
    """kwok with its stages, once the CRDs of its per-pod Exec and Logs objects are Established; returns the
    API objects among kwok's stock files (its StorageClass), for add_fake_nodes."""
    stages, kwok_objects = kwok.kwok_documents(launch.bins)
    stage_file = launch.paths.root / "kwok-stages.yaml"
    stage_file.write_text("\n---\n".join(stages))
    # Before kwok starts, so it finds them when it begins to watch per-pod Exec and Logs objects.
    crds = kwok.kwok_crds()
    launch.kubectl("apply", "-f", "-", stdin=crds)
    launch.kubectl("wait", "--for=condition=Established", "-f", "-", stdin=crds)
    port, pki = launch.ports["kwok"], launch.pki
    launch.procs.start(
        "kwok",
        [
            str(launch.bins["kwok"]),
            f"--kubeconfig={launch.kubeconfig('kwok')}",
            f"--config={stage_file}",
            "--manage-all-nodes=false",
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
            "--node-ip=127.0.0.1",
            "--node-lease-duration-seconds=40",
            "--cidr=10.244.0.0/16",
            # The kubelet server (exec, logs) on loopback only; --node-port alone would listen on
            # 0.0.0.0. The same port goes into each node's status.daemonEndpoints, which is where the
            # API server sends exec and logs requests (else to 10250).
            f"--server-address=127.0.0.1:{port}",
            f"--node-port={port}",
            f"--tls-cert-file={pki / 'kwok.crt'}",
            f"--tls-private-key-file={pki / 'kwok.key'}",
            f"--enable-crds={','.join(kwok.KWOK_CRD_KINDS)}",
        ],
        env={**kwok.KWOK_ENV, "HOME": str(launch.paths.root)},
    )
    return kwok_objects


def add_fake_nodes(launch: Launch, kwok_objects: list[str]) -> None:
    """The fake nodes, the RuntimeClasses and kwok's API objects; returns once the nodes are Ready and the
    default ServiceAccount exists (pods can be created)."""
    launch.kubectl(
        "apply", "-f", "-", stdin="\n---\n".join([kwok.cluster_objects(launch.real_node), *kwok_objects])
    )
    count = len(kwok.kwok_nodes(launch.real_node))
    launch.procs.wait("nodes Ready", lambda: _nodes_ready(launch.bins, launch.paths, count), 120)
    launch.procs.wait("service accounts", lambda: _default_sa_exists(launch.bins, launch.paths), 120)


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310 - loopback http URL we built
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
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


def repair(paths: Paths, timeout: float = REPAIR_SECONDS) -> bool:
    """Start again, as they were started (same flags, ports and data), the recorded processes that are not
    running, in their start order, and bring the real node back if it is down; True once the cluster answers
    within `timeout`. False when there is nothing to repair from (no state, or etcd's data gone)."""
    if not paths.state.exists() or not (paths.root / "etcd").is_dir():
        return False
    procs = Processes(paths.state, paths.logs)
    dead = [name for name, pid in procs.pids.items() if not alive(pid)]
    for name in dead:
        log(f"{name} (pid {procs.pids[name]}) is not running: starting it again as it was")
        procs.restart(name)
    node_down = bool(procs.state.get("real_node")) and not node.running(paths)
    if node_down:
        log("the real node is not running: bringing it up again (its pods are made anew)")
        node.down(paths)
        if not node.up(paths):
            return False
    try:
        wait_until("the repaired cluster to answer", lambda: status(paths), timeout, {})
    except TimeoutError:
        log(f"the cluster did not answer within {timeout:.0f} s of its repair")
        return False
    repaired = [*dead, *(["the real node"] if node_down else [])]
    log(f"repaired the cluster ({', '.join(repaired) or 'nothing was down'}); every object in it is kept")
    return True


def status(paths: Paths) -> bool:
    if not paths.state.exists():
        return False
    state = json.loads(paths.state.read_text())
    if not all(alive(pid) for pid in state["pids"].values()):
        return False
    if state.get("real_node") and not node.running(paths):
        return False
    token = admin_token(paths)
    return https_ok(f"{state['server']}/readyz", paths.pki / "ca.crt", token)


def down(paths: Paths, *, quiet: bool = False, keep_logs: bool = False) -> None:
    node.down(paths)  # before the control plane: it drains the node's pods through the API
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
