"""Cluster fixtures (tests/integration, tests/node, tests/chaos): a real control plane (local, or
KUBECONFIG's), the operator and broker as the chart's ServiceAccounts, and a fresh namespace per test."""

from __future__ import annotations

import hashlib
import os
import re
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from kubernetes import client, config

from tests import hack_scripts
from tests.integration.gymhosts import Hosts, read_token, ready_host
from tests.namespaces import restricted_namespace

ROOT = Path(__file__).resolve().parents[1]
LOG_TAIL_LINES = 15
# Processes the tests start get SIGTERM when this pytest dies, even without teardown (a killed run), so no
# operator or broker outlives its session and acts on a later run's objects. util-linux, Essential in Debian.
DIE_WITH_PARENT = ["setpriv", "--pdeathsig", "TERM", "--"]


cluster_script = hack_scripts.load("cluster")


@dataclass(frozen=True)
class Cluster:
    kubeconfig: Path
    kubectl: Path
    local: bool  # True when this run uses the local control plane from hack/cluster.py
    logs: Path | None

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


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    """KUBECONFIG's cluster if set; else the local control plane: reused if up, else started and stopped."""
    tools = cluster_script.binaries()  # type: ignore[attr-defined]
    if os.environ.get("KUBECONFIG"):
        yield Cluster(Path(os.environ["KUBECONFIG"]), tools["kubectl"], local=False, logs=None)
        return
    paths = cluster_script.Paths(cluster_script.STATE_DIR)  # type: ignore[attr-defined]
    started_here = not cluster_script.status(paths)  # type: ignore[attr-defined]
    if started_here:
        cluster_script.up(paths)  # type: ignore[attr-defined]
    try:
        yield Cluster(paths.kubeconfig, tools["kubectl"], local=True, logs=paths.logs)
    finally:
        if started_here:
            cluster_script.down(paths)  # type: ignore[attr-defined]


@pytest.fixture(scope="session")
def api_client(cluster: Cluster) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(cluster.kubeconfig))


@pytest.fixture(scope="session")
def core(api_client: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api_client)


# Namespaces of ordinary tests start with SHARED_PREFIX (the shared operator watches `SHARED_PREFIX-*`); tests
# that run their own operator use OWN_PREFIX. tests/integration/test_chart_rbac.py reruns tests with other
# prefixes so that its operators never see this session's namespaces.
SHARED_PREFIX = os.environ.get("GYMSANDBOX_TEST_SHARED_PREFIX", "t")
OWN_PREFIX = os.environ.get("GYMSANDBOX_TEST_OWN_PREFIX", "o")


def _namespace_name(nodeid: str, prefix: str) -> str:
    digest = hashlib.sha256(f"{nodeid}{os.getpid()}{os.urandom(4).hex()}".encode()).hexdigest()[:8]
    test = nodeid.rsplit("::", maxsplit=1)[-1].lower().replace("_", "-")
    cleaned = "".join(ch for ch in test if ch.isalnum() or ch == "-").strip("-")[:40].strip("-")
    return f"{prefix}-{cleaned}-{digest}"


@pytest.fixture
def namespace(request: pytest.FixtureRequest, core: client.CoreV1Api) -> Iterator[str]:
    """A fresh namespace enforcing Pod Security `restricted`, deleted after the test."""
    yield from _fresh_namespace(request, core, SHARED_PREFIX)


def _fresh_namespace(request: pytest.FixtureRequest, core: client.CoreV1Api, prefix: str) -> Iterator[str]:
    yield from restricted_namespace(core, _namespace_name(request.node.nodeid, prefix))


@pytest.fixture
def hosts(api_client: client.ApiClient, namespace: str) -> Hosts:
    return Hosts(api_client, namespace)


@pytest.fixture
def host_token(
    cluster: Cluster, operator: OperatorProcess, namespace: str, hosts: Hosts, core: client.CoreV1Api
) -> str:
    """The lease token of the sample GymHost (three episode slots), HostReady in the test's namespace."""
    ready_host(cluster, namespace, hosts, spec__episodes__maxConcurrent=3)
    return read_token(core, namespace, "swe-gym-run-1-lease")  # examples/gymhost.yaml's name


@pytest.fixture(scope="session")
def crds(cluster: Cluster) -> None:
    """The generated CRDs, installed and Established."""
    cluster.kubectl_run("apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "crds"))
    cluster.kubectl_run("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")


# Profiles beyond the sample's, for failure tests: a RuntimeClass that does not exist, one whose handler the
# real node lacks (tests/node/test_failures.py makes it), and a node pool that no node has.
TEST_PROFILES: dict[str, Any] = {
    "ghost": {"runtimeClassName": "ghost-runtime"},
    "handlerless": {"runtimeClassName": "gs-handlerless"},
    "nowhere": {"runtimeClassName": "crun", "nodeSelector": {"gymsandbox.dev/pool": "none-such"}},
}
RESYNC_SECONDS = "3"
# The Helm release the operator and broker get their identities (ServiceAccounts, RBAC) and policy from.
OPERATOR_NAMESPACE = os.environ.get("GYMSANDBOX_TEST_RELEASE_NAMESPACE", "gymsandbox-system")
RELEASE = os.environ.get("GYMSANDBOX_TEST_RELEASE", "gymsandbox")
CHART = ROOT / "charts" / "gymsandbox-operator"
TOKEN_SECONDS = 4 * 3600


@dataclass(frozen=True)
class Identities:
    """Kubeconfigs that act as the chart's ServiceAccounts, from TokenRequest: nothing more than its RBAC."""

    operator: Path
    broker: Path


# The node tier's images (hack/images.py, loaded into the real node without a registry) and test servers
# (network namespaces on the node's test network, tests/node/servers.py).
TEST_IMAGE_PREFIX = "localhost/gymsandbox/"
TEST_SERVER_CIDR = "10.89.1.0/24"


def chart_values() -> dict[str, Any]:
    """The sample policy (minus `broker`, which the chart sets) plus the test-only runtime profiles, images
    and test-server network."""
    policy = yaml.safe_load((ROOT / "examples" / "policy.yaml").read_text())
    policy.pop("broker")
    policy["runtimeProfiles"].update(TEST_PROFILES)
    policy["approvedImages"].append(TEST_IMAGE_PREFIX)
    policy["egress"]["allowedPrivateCIDRs"].append(TEST_SERVER_CIDR)
    return {"policy": policy}


def helm(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    tools = cluster_script.binaries()  # type: ignore[attr-defined]
    return subprocess.run(
        [str(tools["helm"]), f"--kubeconfig={cluster.kubeconfig}", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


@pytest.fixture(scope="session")
def chart_release(cluster: Cluster, crds: None, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The chart installed (or upgraded) as release RELEASE in OPERATOR_NAMESPACE.

    On the local control plane kwok plays its pods, so `--wait` proves they become Available. On another
    cluster (KUBECONFIG) its Deployments are scaled to zero: the processes under test run here, as the chart's
    ServiceAccounts, and in-cluster copies would compete with them (or never pull the placeholder image).
    With GYMSANDBOX_TEST_RELEASE_READY=1 the release is used as it is (test_chart_rbac.py edits its RBAC).
    """
    if os.environ.get("GYMSANDBOX_TEST_RELEASE_READY") == "1":
        return RELEASE
    values = tmp_path_factory.mktemp("chart") / "values.yaml"
    values.write_text(yaml.safe_dump(chart_values()))
    wait = ["--wait", "--timeout", "180s"] if cluster.local else []
    result = helm(
        cluster,
        "upgrade", "--install", RELEASE, str(CHART),
        "--namespace", OPERATOR_NAMESPACE, "--create-namespace", "--values", str(values), *wait,
    )  # fmt: skip
    assert result.returncode == 0, f"helm install failed:\n{result.stdout}\n{result.stderr}"
    if not cluster.local:
        deployments = [f"deployment/{RELEASE}-operator", f"deployment/{RELEASE}-broker"]
        cluster.kubectl_run("scale", "--namespace", OPERATOR_NAMESPACE, "--replicas=0", *deployments)
    return RELEASE


def _service_account_kubeconfig(cluster: Cluster, core: client.CoreV1Api, name: str, path: Path) -> Path:
    request = client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=TOKEN_SECONDS)
    )
    token = core.create_namespaced_service_account_token(name, OPERATOR_NAMESPACE, request).status.token
    admin = yaml.safe_load(cluster.kubeconfig.read_text())
    context = next(c for c in admin["contexts"] if c["name"] == admin["current-context"])["context"]
    server = next(c for c in admin["clusters"] if c["name"] == context["cluster"])
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{**server, "name": "cluster"}],
        "users": [{"name": name, "user": {"token": token}}],
        "contexts": [{"name": name, "context": {"cluster": "cluster", "user": name}}],
        "current-context": name,
    }
    path.write_text(yaml.safe_dump(kubeconfig))
    path.chmod(0o600)
    return path


@pytest.fixture(scope="session")
def identities(
    cluster: Cluster, core: client.CoreV1Api, chart_release: str, tmp_path_factory: pytest.TempPathFactory
) -> Identities:
    directory = tmp_path_factory.mktemp("identities")
    return Identities(
        operator=_service_account_kubeconfig(
            cluster, core, f"{chart_release}-operator", directory / "operator.kubeconfig"
        ),
        broker=_service_account_kubeconfig(
            cluster, core, f"{chart_release}-broker", directory / "broker.kubeconfig"
        ),
    )


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
    ) -> OperatorProcess:
        """Tests read its handler log (--verbose) unless they check the quiet default log itself."""
        env = {
            **os.environ,
            "KUBECONFIG": str(kubeconfig),
            "GYMSANDBOX_RESYNC_SECONDS": RESYNC_SECONDS,
        }
        argv = [str(Path(sys.executable).parent / "gymsandbox"), "operator", "--policy", str(policy_file)]
        argv += ["--operator-namespace", OPERATOR_NAMESPACE, *(["--verbose"] if verbose else [])]
        metrics_port = cluster_script.free_port()  # type: ignore[attr-defined]
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
        # Watching begins with gymhosts (cluster-wide) or with namespaces (when given patterns); the quiet
        # log says only that it starts.
        started = r"Starting the watch-stream for (gymhosts|namespaces)" if verbose else "operator starting"
        while not re.search(started, handle.output()[offset:]):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the operator did not start:\n{handle.output()[-3000:]}")
            time.sleep(0.2)
        return handle

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()

    def kill(self) -> None:
        """SIGKILL: no clean-up, no chance to store progress."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()


@pytest.fixture(scope="session")
def policy_file(core: client.CoreV1Api, chart_release: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The policy exactly as the chart renders it into its ConfigMap (which the chart's pods mount)."""
    config_map = core.read_namespaced_config_map(f"{chart_release}-policy", OPERATOR_NAMESPACE)
    path = tmp_path_factory.mktemp("policy") / "policy.yaml"
    path.write_text(config_map.data["policy.yaml"])
    return path


@pytest.fixture(scope="session")
def operator(
    identities: Identities,
    policy_file: Path,
    api_client: client.ApiClient,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[OperatorProcess]:
    """The operator for ordinary tests, as the chart's operator ServiceAccount: every `t-*` namespace."""
    handle = OperatorProcess.launch(
        identities.operator,
        policy_file,
        tmp_path_factory.mktemp("operator") / "operator.log",
        [f"{SHARED_PREFIX}-*"],
    )
    yield handle
    handle.stop()
    release_finalizers(api_client, (f"{SHARED_PREFIX}-",))  # the last tests' namespaces may still be going


@pytest.fixture
def own_namespace(request: pytest.FixtureRequest, core: client.CoreV1Api) -> Iterator[str]:
    """A namespace no shared operator watches, for tests that stop and start their own operator."""
    yield from _fresh_namespace(request, core, OWN_PREFIX)


def release_finalizers(api: client.ApiClient, namespace_prefixes: tuple[str, ...]) -> None:
    """Drop our finalizer from objects in namespaces no operator watches any more, so that deleting those
    namespaces completes instead of leaving them Terminating on a reused cluster."""
    custom = client.CustomObjectsApi(api)
    for plural in ("gymhosts", "episodesandboxes"):
        for item in custom.list_cluster_custom_object("gymsandbox.dev", "v1alpha1", plural)["items"]:
            meta = item["metadata"]
            if meta["namespace"].startswith(namespace_prefixes) and meta.get("finalizers"):
                custom.patch_namespaced_custom_object(
                    "gymsandbox.dev", "v1alpha1", meta["namespace"], plural, meta["name"],
                    {"metadata": {"finalizers": None}},
                )  # fmt: skip


@pytest.fixture
def start_operator(
    identities: Identities,
    policy_file: Path,
    own_namespace: str,
    api_client: client.ApiClient,
    tmp_path: Path,
) -> Iterator[Any]:
    """Start (and restart) an operator that watches only `own_namespace`; all are stopped at the end."""
    started: list[OperatorProcess] = []

    def start() -> OperatorProcess:
        handle = OperatorProcess.launch(
            identities.operator, policy_file, tmp_path / "operator.log", [own_namespace]
        )
        started.append(handle)
        return handle

    yield start
    for handle in started:
        handle.stop()
    release_finalizers(api_client, (own_namespace,))


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
        port = port or cluster_script.free_port()  # type: ignore[attr-defined]
        metrics_port = cluster_script.free_port()  # type: ignore[attr-defined]
        env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
        argv = [str(Path(sys.executable).parent / "gymsandbox"), "broker", "--policy", str(policy_file)]
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
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=40)
            except subprocess.TimeoutExpired:
                self.kill()

    def kill(self) -> None:
        """SIGKILL: in-flight calls are cut off, nothing is drained."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])


@pytest.fixture(scope="session")
def broker(
    identities: Identities,
    policy_file: Path,
    operator: OperatorProcess,  # creates the signing key the broker reads
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[BrokerProcess]:
    """The broker every broker test talks to, as the chart's broker ServiceAccount."""
    handle = BrokerProcess.launch(
        identities.broker, policy_file, tmp_path_factory.mktemp("broker") / "broker.log"
    )
    yield handle
    handle.stop()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """On a failed integration test, attach the tail of every control-plane log to the report."""
    report = yield
    if report.failed and call.when in ("setup", "call") and "cluster" in getattr(item, "fixturenames", ()):
        logs = cluster_script.Paths(cluster_script.STATE_DIR).logs  # type: ignore[attr-defined]
        for log_file in sorted(logs.glob("*.log")) if logs.exists() else []:
            lines = log_file.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
            report.sections.append((f"control-plane log tail: {log_file.name}", "\n".join(lines)))
    return report
