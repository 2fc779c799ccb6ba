"""The pytest fixtures every cluster tier shares (integration, node, security, scale, chaos), loaded by
tests/conftest.py: one cluster, chart release, operator and broker per session, and a fresh namespace per
test. The unit tier requests none of them."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hack.localcluster import controlplane
from hack.localcluster.paths import cluster_paths
from kubernetes import client, config

from tests.support.chart import (
    CHART,
    OPERATOR_NAMESPACE,
    RELEASE,
    Identities,
    chart_values,
    release_finalizers,
    service_account_kubeconfig,
)
from tests.support.cluster import Cluster, find_cluster, install_crds
from tests.support.gymhosts import Hosts, read_token, ready_host
from tests.support.namespaces import restricted_namespace
from tests.support.processes import BrokerProcess, OperatorProcess

LOG_TAIL_LINES = 15


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    """KUBECONFIG's cluster if set; else the local control plane: reused if up, else started and stopped."""
    found, started_here = find_cluster()
    try:
        yield found
    finally:
        if started_here:
            controlplane.down(found.paths)


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
    install_crds(cluster)


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
    result = cluster.helm(
        "upgrade", "--install", RELEASE, str(CHART),
        "--namespace", OPERATOR_NAMESPACE, "--create-namespace", "--values", str(values), *wait,
    )  # fmt: skip
    assert result.returncode == 0, f"helm install failed:\n{result.stdout}\n{result.stderr}"
    if not cluster.local:
        deployments = [f"deployment/{RELEASE}-operator", f"deployment/{RELEASE}-broker"]
        cluster.kubectl_run("scale", "--namespace", OPERATOR_NAMESPACE, "--replicas=0", *deployments)
    return RELEASE


@pytest.fixture(scope="session")
def identities(
    cluster: Cluster, core: client.CoreV1Api, chart_release: str, tmp_path_factory: pytest.TempPathFactory
) -> Identities:
    directory = tmp_path_factory.mktemp("identities")
    return Identities(
        operator=service_account_kubeconfig(
            cluster, core, f"{chart_release}-operator", directory / "operator.kubeconfig"
        ),
        broker=service_account_kubeconfig(
            cluster, core, f"{chart_release}-broker", directory / "broker.kubeconfig"
        ),
    )


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


@pytest.fixture
def start_operator(
    identities: Identities,
    policy_file: Path,
    own_namespace: str,
    api_client: client.ApiClient,
    tmp_path: Path,
) -> Iterator[Any]:
    """Start (and restart) operators that watch only `own_namespace`; all are stopped at the end. Each logs
    to `<name>.log` (a restart under the same name appends); `started` as for OperatorProcess.launch."""
    started: list[OperatorProcess] = []

    def start(name: str = "operator", *, started_when: str | None = None) -> OperatorProcess:
        handle = OperatorProcess.launch(
            identities.operator, policy_file, tmp_path / f"{name}.log", [own_namespace], started=started_when
        )
        started.append(handle)
        return handle

    yield start
    for handle in started:
        handle.stop()
    release_finalizers(api_client, (own_namespace,))


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
        logs = cluster_paths().logs
        for log_file in sorted(logs.glob("*.log")) if logs.exists() else []:
            lines = log_file.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
            report.sections.append((f"control-plane log tail: {log_file.name}", "\n".join(lines)))
    return report
