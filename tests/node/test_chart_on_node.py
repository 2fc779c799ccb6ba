"""The chart as a user installs it: the operator and the broker run as real pods on the real node, from the
image built from the project's Dockerfile (hack/localcluster/images.py), and serve a GymHost end to end. The
host pod itself opens an episode through the in-cluster broker (HTTPS, with the certificate the chart made)
with its own lease and the project's Python client, and runs a command in it.

Its own release, watching only its own namespace (`incluster-...`, which the session's operator process does
not watch), so nothing here competes with the processes the rest of the suite runs.
"""

from __future__ import annotations

import json
import os
import shlex
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from hack.localcluster.node import load_images
from hack.localcluster.nodeconfig import REAL_NODE_LABEL
from hack.localcluster.paths import cluster_paths
from kubernetes import client
from tests.node.conftest import (
    SHELL_IMAGE,
    exec_in,
    make_volume,
    node_host,
    shell_pod,
    wait_pod_ready,
)
from tests.support.chart import CHART, chart_values
from tests.support.cluster import Cluster
from tests.support.gymhosts import Hosts, apply, eventually
from tests.support.namespaces import restricted_namespace
from tests.support.scrape import parse

RELEASE = "gs-incluster"
RELEASE_NAMESPACE = "gymsandbox-incluster"
HOST = "incluster"


@pytest.fixture(scope="module")
def image(cluster: Cluster, real_node: str) -> str:
    """The project's image where the cluster's nodes have it: built and loaded into the local real node, or
    GYMSANDBOX_TEST_IMAGE on another cluster (an image its nodes can pull or already hold)."""
    if cluster.local:
        return str(load_images(cluster_paths(), "gymsandbox")["gymsandbox"])
    if not os.environ.get("GYMSANDBOX_TEST_IMAGE"):
        pytest.skip(
            "KUBECONFIG's cluster: set GYMSANDBOX_TEST_IMAGE to the project's image its nodes can pull"
        )
    return os.environ["GYMSANDBOX_TEST_IMAGE"]


def release_values(image: str, watched: str) -> dict[str, object]:
    """The suite's policy, watching only `watched`, both Deployments pinned to the real node."""
    repository, tag = image.rsplit(":", 1)
    taint = REAL_NODE_LABEL
    placement = {
        "nodeSelector": {taint: "true"},
        "tolerations": [{"key": taint, "operator": "Equal", "value": "true", "effect": "NoSchedule"}],
    }
    values = chart_values()
    values["policy"]["watchNamespaces"] = [watched]
    values["policy"]["approvedImages"].append(image)  # the in-cluster host runs it (its Python client)
    never_pull = "Never" if image.startswith("localhost/") else "IfNotPresent"
    values["image"] = {"repository": repository, "tag": tag, "pullPolicy": never_pull}
    values["operator"] = placement
    values["broker"] = {"replicas": 1, **placement}
    return values


@pytest.fixture(scope="module")
def release(
    cluster: Cluster, image: str, namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    values = tmp_path_factory.mktemp("incluster") / "values.yaml"
    values.write_text(yaml.safe_dump(release_values(image, namespace)))
    install = cluster.helm(
        "upgrade", "--install", RELEASE, str(CHART), "--namespace", RELEASE_NAMESPACE, "--create-namespace",
        "--values", str(values), "--wait", "--timeout", "150s",
    )  # fmt: skip
    try:
        assert install.returncode == 0, f"helm install failed:\n{install.stdout}\n{install.stderr}"
        yield RELEASE
    finally:
        cluster.helm("uninstall", RELEASE, "--namespace", RELEASE_NAMESPACE, "--wait", "--timeout", "120s")
        cluster.kubectl_run("delete", "namespace", RELEASE_NAMESPACE, "--ignore-not-found", "--wait=false")


@pytest.fixture(scope="module")
def namespace(core: client.CoreV1Api, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The one namespace the in-cluster operator watches."""
    suffix = tmp_path_factory.getbasetemp().name[-6:].lower().replace("_", "-")
    yield from restricted_namespace(core, f"incluster-{suffix}")


@pytest.fixture(scope="module")
def host_pod(
    release: str,
    image: str,
    cluster: Cluster,
    namespace: str,
    real_node: str,
    api_client: client.ApiClient,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[str]:
    """A GymHost applied after the chart, HostReady through the in-cluster operator: its pod's name. It runs
    the project's image, so that its code can use the project's Python client as a Gym environment would."""
    for _ in make_volume(cluster, namespace, real_node, tmp_path_factory.mktemp("incluster-volume")):
        host = node_host(
            HOST, "crun", image=image, command=["python", "-m", "http.server", "8080", "-d", "/env"]
        )
        apply(cluster, namespace, host)
        yield Hosts(api_client, namespace).wait_reason(HOST, "HostReady", timeout=180)["status"]["podName"]


def test_chart_pods_run_on_the_real_node_from_the_built_image(
    release: str, image: str, real_node: str, core: client.CoreV1Api
) -> None:
    def chart_pods() -> list[Any]:
        listed = core.list_namespaced_pod(
            RELEASE_NAMESPACE, label_selector="app.kubernetes.io/managed-by=Helm"
        )
        return list(listed.items)

    # helm --wait returns once replicas less maxUnavailable are Ready: one of two operators may not be yet.
    eventually(
        lambda: all(
            p.status.container_statuses and p.status.container_statuses[0].ready for p in chart_pods()
        ),
        timeout=60,
        what="every chart pod Ready",
    )
    pods = chart_pods()
    running = {p.metadata.name: (p.spec.node_name, p.spec.containers[0].image) for p in pods}
    assert len(running) == 3, running  # two operators (one leads, one stands by), one broker
    assert set(running.values()) == {(real_node, image)}, running
    # The standby answers its probes too: no restart, both Ready.
    states = {
        (p.metadata.name, s.ready, s.restart_count, str(s.last_state.terminated or "")[:300])
        for p in pods
        for s in p.status.container_statuses
    }
    assert all(ready and restarts == 0 for _, ready, restarts, _ in states), states
    operators = {
        p.metadata.name for p in pods if p.metadata.labels["app.kubernetes.io/name"] == "gymsandbox-operator"
    }
    assert leader_pod(core) in operators


def test_a_host_applied_after_the_chart_becomes_ready_and_runs_an_episode_through_the_broker(
    cluster: Cluster, namespace: str, host_pod: str
) -> None:
    pod = host_pod
    # The host's own view: the broker's https URL, its lease and the broker's CA from its environment, as
    # BrokerClient.from_environment() reads them; the certificate is the one the chart made.
    env = exec_in(cluster, namespace, pod, 'echo "$GYMSANDBOX_BROKER_URL"; test -n "$GYMSANDBOX_BROKER_CA"')
    assert (env.returncode, env.stdout.strip()) == (
        0,
        f"https://{RELEASE}-broker.{RELEASE_NAMESPACE}.svc:8443",
    )
    created = broker_call(
        cluster, namespace, pod, "create_episode", "r-1", SHELL_IMAGE, command=["sleep", "600"]
    )
    episode = created["id"]
    eventually(
        lambda: broker_call(cluster, namespace, pod, "get_episode", episode)["ready"],
        120,
        f"episode {episode} Ready through the in-cluster broker",
    )
    result = broker_call(cluster, namespace, pod, "exec", episode, shell="echo from $(hostname); exit 7")
    assert result["exit_code"] == 7, result
    assert str(result["stdout"]).startswith("from "), result


def test_metrics_reach_a_scraper_but_no_pod_labelled_as_gymsandboxs_own(
    cluster: Cluster, namespace: str, host_pod: str, core: client.CoreV1Api
) -> None:
    """The chart's NetworkPolicy admits metrics.scrapers (by default any pod but the ones gymsandbox runs,
    which run untrusted code) to the metrics port, enforced by the node's NetworkPolicy engine."""
    impostor = shell_pod("impostor", "crun", ["sleep", "600"])
    impostor["metadata"]["labels"] = {"app.kubernetes.io/managed-by": "gymsandbox"}  # as host pods are
    for pod in (shell_pod("scraper", "crun", ["sleep", "600"]), impostor):
        core.create_namespaced_pod(namespace, pod)
        wait_pod_ready(core, namespace, pod["metadata"]["name"])
    chart_pods = core.list_namespaced_pod(
        RELEASE_NAMESPACE, label_selector="app.kubernetes.io/managed-by=Helm"
    )
    addresses = {p.metadata.name: p.status.pod_ip for p in chart_pods.items}
    pages = {}
    for name, address in addresses.items():  # the standby's metrics too: it is scraped like the leader
        pages[name] = metrics_page(cluster, namespace, "scraper", address)
        denied = exec_in(cluster, namespace, "impostor", fetch_metrics(address))
        # Dropped (the timeout's 143) or refused (wget's 1); anything else is no proof of a policy.
        assert denied.returncode in (1, 143), (name, denied.returncode, denied.stderr)
        assert "gymsandbox_" not in denied.stdout
    (broker_pod,) = [name for name in addresses if name.startswith(f"{RELEASE}-broker-")]
    operator, broker = parse(pages[leader_pod(core)]), parse(pages[broker_pod])
    assert operator.value("gymsandbox_gymhosts", namespace=namespace, phase="ready") >= 1
    assert operator.value("gymsandbox_ready_seconds_count", resource="gymhosts") >= 1
    assert "gymsandbox_broker_requests_in_flight" in broker.sample_names()


def leader_pod(core: client.CoreV1Api) -> str:
    """The operator pod holding the release's Lease (an identity begins with its hostname: the pod's name)."""
    leases = client.CoordinationV1Api(core.api_client).list_namespaced_lease(RELEASE_NAMESPACE).items
    (holder,) = [
        lease.spec.holder_identity
        for lease in leases
        if lease.metadata.name.startswith("gymsandbox-operator-")
    ]
    return str(holder).split("_", 1)[0]


def fetch_metrics(address: str) -> str:
    """busybox wget's own -T crashes (SIGSEGV) in Debian's 1.35 on these replies: timeout(1) instead."""
    return f"timeout 5 wget -q -O - http://{address}:9090/metrics"


def metrics_page(cluster: Cluster, namespace: str, pod: str, address: str, timeout: float = 30) -> str:
    """GET http://ADDRESS:9090/metrics from inside `pod`, retried (a NetworkPolicy takes a moment)."""
    deadline = time.monotonic() + timeout
    while True:
        result = exec_in(cluster, namespace, pod, fetch_metrics(address))
        if result.returncode == 0:
            return result.stdout
        assert time.monotonic() < deadline, f"no metrics from {address} in {pod}: {result.stderr}"
        time.sleep(1)


# Run inside the host pod: one BrokerClient call, its arguments as JSON, the answer as JSON on stdout.
CLIENT_CALL = """
import json, sys
from gymsandbox.client import BrokerClient
method, args, kwargs = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
with BrokerClient.from_environment() as broker:
    print(getattr(broker, method)(*args, **kwargs).model_dump_json())
"""


def broker_call(
    cluster: Cluster, namespace: str, pod: str, method: str, *args: object, **kwargs: object
) -> Any:
    """`BrokerClient.from_environment().<method>(*args, **kwargs)` run by Python inside the host pod."""
    command = ["python", "-c", CLIENT_CALL, method, json.dumps(args), json.dumps(kwargs)]
    result = exec_in(cluster, namespace, pod, shlex.join(command))
    assert result.returncode == 0, f"{method}: {result.stderr}"
    return json.loads(result.stdout)
