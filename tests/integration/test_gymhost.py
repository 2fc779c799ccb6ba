"""GymHost end to end on the real control plane, with the operator running as its own process."""

from __future__ import annotations

import base64
import json
import threading
from typing import Any

import pytest
from hack.localcluster.kwok import enable_exec
from hack.localcluster.paths import cluster_paths
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from gymsandbox.client import GymHostFailedError, wait_ready
from tests.support.chart import OPERATOR_NAMESPACE, RELEASE
from tests.support.cluster import Cluster
from tests.support.gymhosts import Hosts, apply, eventually, host_wait_seconds, sample, set_path
from tests.support.processes import OperatorProcess

pytestmark = pytest.mark.integration

NAME = "swe-gym-run-1"
POD, SECRET, POLICY, SERVICE = f"{NAME}-host", f"{NAME}-lease", f"{NAME}-egress", f"{NAME}-host"


@pytest.fixture
def ready_sample(cluster: Cluster, operator: OperatorProcess, namespace: str, hosts: Hosts) -> dict[str, Any]:
    apply(cluster, namespace, *sample())
    return hosts.wait_reason(NAME, "HostReady")


def test_sample_becomes_ready_and_kubectl_wait_returns(
    cluster: Cluster, operator: OperatorProcess, namespace: str, api_client: client.ApiClient
) -> None:
    apply(cluster, namespace, *sample())
    waited = cluster.kubectl_run(
        "wait", "-n", namespace, "--for=condition=Ready", f"gymhost/{NAME}",
        f"--timeout={host_wait_seconds(60)}s", check=False,
    )  # fmt: skip
    assert waited.returncode == 0, waited.stderr
    assert wait_ready(NAME, namespace, timeout=10, api=api_client) == f"http://{SERVICE}.{namespace}.svc:8080"


def test_pod_runs_in_the_profile_runtime_with_sub_path_mounts_and_restricted_security(
    ready_sample: dict[str, Any], core: client.CoreV1Api, namespace: str
) -> None:
    pod = core.read_namespaced_pod(POD, namespace)
    spec = pod.spec
    assert spec.runtime_class_name == "kata-qemu"
    assert spec.node_name == "kwok-kata-0"
    assert spec.automount_service_account_token is False
    # No service-account token volume; the one Secret volume is the host's own lease.
    assert [(v.name, v.secret.secret_name) for v in spec.volumes if v.projected or v.secret] == [
        ("lease", SECRET)
    ]
    container = spec.containers[0]
    mounts = {m.mount_path: (m.sub_path, bool(m.read_only)) for m in container.volume_mounts}
    assert mounts["/env"] == ("environments/swe-env-1.4.2", True)
    uid = pod.metadata.owner_references[0].uid
    assert mounts["/workspace"] == (f".gymsandbox/hosts/{uid}/workspace", False)
    assert mounts["/episodes"] == (f".gymsandbox/hosts/{uid}/episodes", True)
    security = container.security_context
    assert security.allow_privilege_escalation is False
    assert security.capabilities.drop == ["ALL"]
    assert not security.capabilities.add
    assert security.run_as_non_root is True
    assert security.run_as_user != 0
    assert security.seccomp_profile.type == "RuntimeDefault"
    env = {e.name: e for e in container.env}
    assert env["GYM_TASK_SET"].value == "verified-50"
    # The chart serves the broker over HTTPS by default, and hands hosts the CA it made for it.
    assert env["GYMSANDBOX_BROKER_URL"].value == "https://gymsandbox-broker.gymsandbox-system.svc:8443"
    ca = core.read_namespaced_secret("gymsandbox-broker-tls", "gymsandbox-system").data["ca.crt"]
    assert env["GYMSANDBOX_BROKER_CA"].value == base64.b64decode(ca).decode()
    token_ref = env["GYMSANDBOX_LEASE_TOKEN"].value_from.secret_key_ref
    assert (token_ref.name, token_ref.key) == (SECRET, "token")
    assert env["GYMSANDBOX_LEASE_TOKEN"].value is None


def test_secret_and_network_policy_are_created_before_the_pod(
    cluster: Cluster, operator: OperatorProcess, namespace: str, api_client: client.ApiClient, hosts: Hosts
) -> None:
    # Each ADDED event carries the object's creation resourceVersion. On an etcd-backed API server that is
    # the global etcd revision, so it orders creations across kinds (opaque by API contract; fine in a test).
    core, networking = client.CoreV1Api(api_client), client.NetworkingV1Api(api_client)
    listers = {
        "Secret": core.list_namespaced_secret,
        "NetworkPolicy": networking.list_namespaced_network_policy,
        "Pod": core.list_namespaced_pod,
    }
    created: dict[str, int] = {}
    watches = []

    def record(kind: str, lister: Any) -> None:
        w = watch.Watch()
        watches.append(w)
        start = lister(namespace).metadata.resource_version
        for event in w.stream(lister, namespace, resource_version=start, timeout_seconds=30):
            if event["type"] == "ADDED":
                created.setdefault(kind, int(event["object"].metadata.resource_version))
                w.stop()

    threads = [threading.Thread(target=record, args=item, daemon=True) for item in listers.items()]
    for t in threads:
        t.start()
    apply(cluster, namespace, *sample())
    hosts.wait_reason(NAME, "HostReady")
    for t in threads:
        t.join(timeout=30)
    assert set(created) == {"Secret", "NetworkPolicy", "Pod"}, created
    assert created["Secret"] < created["Pod"]
    assert created["NetworkPolicy"] < created["Pod"]


def test_network_policy_allows_exactly_dns_the_broker_and_the_allowlist(
    ready_sample: dict[str, Any], api_client: client.ApiClient, namespace: str
) -> None:
    policy = client.NetworkingV1Api(api_client).read_namespaced_network_policy(POLICY, namespace)
    assert policy.spec.policy_types == ["Egress"]
    host_uid = ready_sample["metadata"]["uid"]
    # The host's pod by its owner's uid, which no other object can take (a name can be chosen to collide).
    assert policy.spec.pod_selector.match_labels == {
        "app.kubernetes.io/component": "gymhost",
        "gymsandbox.dev/gymhost-uid": host_uid,
    }
    rules = client.ApiClient().sanitize_for_serialization(policy.spec.egress)
    assert rules == [
        {
            "to": [
                {
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                    "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
                }
            ],
            "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
        },
        {
            "to": [
                {
                    # The chart's broker pods, in the chart's namespace.
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": OPERATOR_NAMESPACE}},
                    "podSelector": {
                        "matchLabels": {
                            "app.kubernetes.io/name": "gymsandbox-broker",
                            "app.kubernetes.io/instance": RELEASE,
                        }
                    },
                }
            ],
            "ports": [{"protocol": "TCP", "port": 8443}],
        },
        {"to": [{"ipBlock": {"cidr": "203.0.113.0/24"}}], "ports": [{"protocol": "TCP", "port": 443}]},
        {
            "to": [{"ipBlock": {"cidr": "198.51.100.7/32"}}, {"ipBlock": {"cidr": "198.51.100.8/32"}}],
            "ports": [{"protocol": "TCP", "port": 443}],
        },
    ]
    resolved = {r["entry"]: r["addresses"] for r in ready_sample["status"]["resolvedEgress"]}
    assert resolved == {
        "203.0.113.0/24:443": ["203.0.113.0/24"],
        "models.example.com:443": ["198.51.100.7/32", "198.51.100.8/32"],
    }


def _patch_container_status(core: client.CoreV1Api, namespace: str, status: dict[str, Any]) -> None:
    """Write the pod's status the way a kubelet would (kwok runs no containers, so nothing can crash)."""
    pod = core.read_namespaced_pod(POD, namespace)
    body = {
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": "Ready", "status": "False", "reason": "ContainersNotReady"},
                {"type": "ContainersReady", "status": "False", "reason": "ContainersNotReady"},
                {"type": "PodScheduled", "status": "True"},
            ],
            "containerStatuses": [
                {
                    "name": "gym",
                    "image": pod.spec.containers[0].image,
                    "imageID": "",
                    "ready": False,
                    "restartCount": 3,
                    **status,
                }
            ],
        }
    }
    core.patch_namespaced_pod_status(POD, namespace, body)


CRASH_LOG = (
    'Traceback (most recent call last):\n  File "/env/server.py", line 7\nValueError: gym config missing'
)

POD_FAILURES = {
    "CrashLoopBackOff": {
        "state": {
            "waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s restarting failed container"}
        },
        "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "message": CRASH_LOG}},
    },
    "OOMKilled": {
        "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}},
        "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled", "message": "killed"}},
    },
    "ImagePullBackOff": {
        "state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image"}},
    },
}


@pytest.mark.parametrize("reason", sorted(POD_FAILURES))
def test_container_failure_shows_as_not_ready_with_its_reason(
    ready_sample: dict[str, Any], core: client.CoreV1Api, namespace: str, hosts: Hosts, reason: str
) -> None:
    _patch_container_status(core, namespace, POD_FAILURES[reason])
    host = hosts.wait_reason(NAME, reason, timeout=10)
    failure = host["status"]["failure"]
    assert failure["reason"] == reason
    assert failure["kind"] == ("Infrastructure" if reason == "ImagePullBackOff" else "Workload")


def test_crash_loop_reports_the_last_log_lines_and_the_sdk_raises_with_them(
    ready_sample: dict[str, Any],
    core: client.CoreV1Api,
    namespace: str,
    hosts: Hosts,
    api_client: client.ApiClient,
) -> None:
    _patch_container_status(core, namespace, POD_FAILURES["CrashLoopBackOff"])
    host = hosts.wait_reason(NAME, "CrashLoopBackOff", timeout=10)
    assert "ValueError: gym config missing" in host["status"]["failure"]["logsTail"]
    assert "last exit code 1" in host["status"]["failure"]["message"]
    with pytest.raises(GymHostFailedError) as failed:
        wait_ready(NAME, namespace, timeout=10, api=api_client)
    assert failed.value.reason == "CrashLoopBackOff"
    assert failed.value.kind == "Workload"


def test_failure_log_tail_is_read_from_the_container_log(
    ready_sample: dict[str, Any], cluster: Cluster, core: client.CoreV1Api, namespace: str, hosts: Hosts
) -> None:
    """The log (pods/log, served by kwok from a file) wins over the kubelet's termination message."""
    paths = cluster_paths()
    lines = ("loading SWE-Gym tasks", "KeyError: 'reward_model'")
    enable_exec(paths, namespace, f"{NAME}-host", lines)

    def served() -> bool:
        try:
            return bool(core.read_namespaced_pod_log(f"{NAME}-host", namespace, container="gym"))
        except client.exceptions.ApiException:
            return False

    eventually(served, what="kwok serving the pod's log")
    _patch_container_status(core, namespace, POD_FAILURES["CrashLoopBackOff"])
    host = hosts.wait_reason(NAME, "CrashLoopBackOff", timeout=10)
    assert host["status"]["failure"]["logsTail"] == "\n".join(lines)


@pytest.mark.parametrize(
    ("mutation", "reason", "pod_created"),
    [
        ({"spec.runtime": "ghost"}, "RuntimeClassNotFound", False),
        ({"spec.runtime": "nowhere"}, "Unschedulable", True),
    ],
    ids=["missing-runtime-class", "no-matching-node"],
)
def test_infrastructure_problem_shows_as_not_ready_with_its_reason(
    cluster: Cluster,
    operator: OperatorProcess,
    namespace: str,
    hosts: Hosts,
    mutation: dict[str, str],
    reason: str,
    pod_created: bool,
) -> None:
    claim, host = sample()
    for path, value in mutation.items():
        set_path(host, path, value)
    apply(cluster, namespace, claim, host)
    obj = hosts.wait_reason(NAME, reason)
    assert obj["status"]["failure"]["kind"] == "Infrastructure"
    assert bool(hosts.children()["pods"]) is pod_created


def volume_for_the_claim(namespace: str, storage_class: str) -> dict[str, Any]:
    """A PersistentVolume kept for the sample's claim `gym-storage` (deleted by the test, cluster-scoped)."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": f"pv-{namespace}"},
        "spec": {
            "capacity": {"storage": "10Gi"},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": storage_class,
            "csi": {"driver": "kwok.x-k8s.io", "volumeHandle": namespace},
            "claimRef": {"namespace": namespace, "name": "gym-storage"},
        },
    }


def test_unbound_claim_shows_as_not_ready_and_recovers_once_bound(
    cluster: Cluster, operator: OperatorProcess, namespace: str, hosts: Hosts
) -> None:
    claim, host = sample()
    claim["spec"]["storageClassName"] = "manual"  # no provisioner: stays Pending
    apply(cluster, namespace, claim, host)
    obj = hosts.wait_reason(NAME, "PersistentVolumeClaimNotBound")
    assert "gym-storage" in obj["status"]["failure"]["message"]
    apply(cluster, namespace, volume_for_the_claim(namespace, "manual"))
    try:
        hosts.wait_reason(NAME, "HostReady", timeout=60)
    finally:
        cluster.kubectl_run("delete", "pv", f"pv-{namespace}", "--wait=false", check=False)


def test_a_claim_that_binds_on_first_use_is_not_reported_as_a_failure(
    cluster: Cluster, operator: OperatorProcess, namespace: str, hosts: Hosts, core: client.CoreV1Api
) -> None:
    """kind's and most clouds' default StorageClasses bind a claim only once a pod uses it: until then the
    host is starting (PodNotReady), not failing (PersistentVolumeClaimNotBound would make the SDK give up)."""
    storage_class = f"first-use-{namespace}"[:63]
    first_use = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": storage_class},
        "provisioner": "example.com/test-provisioner",  # the scheduler waits for it to provision
        "volumeBindingMode": "WaitForFirstConsumer",
    }
    claim, host = sample()
    claim["spec"]["storageClassName"] = storage_class
    try:
        apply(cluster, namespace, first_use, claim)

        def claim_events() -> list[str]:
            involving = "involvedObject.name=gym-storage"
            return [e.reason for e in core.list_namespaced_event(namespace, field_selector=involving).items]

        # The volume controller says it waits for a pod, and leaves the claim Pending.
        eventually(lambda: "WaitForFirstConsumer" in claim_events(), what="WaitForFirstConsumer event")
        claim_phase = core.read_namespaced_persistent_volume_claim("gym-storage", namespace).status.phase
        assert claim_phase == "Pending"
        apply(cluster, namespace, host)
        starting = hosts.wait_reason(NAME, "PodNotReady")  # "waiting to be scheduled"
        assert "failure" not in starting["status"], starting["status"]
        assert (
            core.read_namespaced_persistent_volume_claim("gym-storage", namespace).status.phase == "Pending"
        )
        # What the provisioner does for the node the scheduler picked.
        apply(cluster, namespace, volume_for_the_claim(namespace, storage_class))
        hosts.wait_reason(NAME, "HostReady", timeout=60)
        assert core.read_namespaced_persistent_volume_claim("gym-storage", namespace).status.phase == "Bound"
    finally:
        cluster.kubectl_run("delete", "pv", f"pv-{namespace}", "--wait=false", check=False)
        cluster.kubectl_run("delete", "storageclass", storage_class, "--wait=false", check=False)


@pytest.mark.parametrize("child", ["pod", "secret", "networkpolicy", "service"])
def test_deleted_child_comes_back(
    ready_sample: dict[str, Any], cluster: Cluster, namespace: str, hosts: Hosts, child: str
) -> None:
    name = {"pod": POD, "secret": SECRET, "networkpolicy": POLICY, "service": SERVICE}[child]
    before = cluster.kubectl_run("get", child, name, "-n", namespace, "-o", "jsonpath={.metadata.uid}").stdout
    cluster.kubectl_run("delete", child, name, "-n", namespace, "--wait=true")

    def recreated() -> str | None:
        got = cluster.kubectl_run(
            "get", child, name, "-n", namespace, "-o", "jsonpath={.metadata.uid}", check=False
        )
        return got.stdout if got.returncode == 0 and got.stdout and got.stdout != before else None

    eventually(recreated, timeout=15, what=f"{child} {name} to be recreated")
    hosts.wait_reason(NAME, "HostReady")


def test_edited_network_policy_is_restored(
    ready_sample: dict[str, Any], cluster: Cluster, namespace: str, api_client: client.ApiClient
) -> None:
    networking = client.NetworkingV1Api(api_client)
    original = networking.read_namespaced_network_policy(POLICY, namespace).spec.egress
    open_everything = [{"op": "replace", "path": "/spec/egress", "value": [{}]}]
    cluster.kubectl_run(
        "patch", "networkpolicy", POLICY, "-n", namespace, "--type=json", "-p", json.dumps(open_everything)
    )
    eventually(
        lambda: networking.read_namespaced_network_policy(POLICY, namespace).spec.egress == original,
        timeout=15,
        what="the NetworkPolicy to be restored",
    )


def test_deleting_the_gymhost_removes_every_child(
    ready_sample: dict[str, Any], cluster: Cluster, namespace: str, hosts: Hosts
) -> None:
    cluster.kubectl_run("delete", "gymhost", NAME, "-n", namespace, "--timeout=30s")
    assert hosts.get(NAME) is None
    eventually(lambda: not any(hosts.children().values()), timeout=30, what="every child to be deleted")


@pytest.mark.parametrize("policy", ["Delete", "Retain"])
def test_expiry_removes_the_pod_and_reports_expired(
    cluster: Cluster, operator: OperatorProcess, namespace: str, hosts: Hosts, policy: str
) -> None:
    claim, host = sample()
    set_path(host, "spec.lifetime", {"ttlSeconds": 4, "expiryPolicy": policy})
    apply(cluster, namespace, claim, host)
    if policy == "Delete":
        eventually(lambda: hosts.get(NAME) is None, timeout=20, what="the expired GymHost to be deleted")
    else:
        obj = hosts.wait_reason(NAME, "Expired", timeout=20)
        assert obj["status"]["expiresAt"]
        eventually(lambda: not hosts.children()["pods"], timeout=15, what="the expired pod to be deleted")
        cluster.kubectl_run("get", "gymhost", NAME, "-n", namespace)  # the record is retained


def test_lease_token_appears_nowhere_but_the_secret(
    ready_sample: dict[str, Any],
    cluster: Cluster,
    operator: OperatorProcess,
    core: client.CoreV1Api,
    namespace: str,
    hosts: Hosts,
) -> None:
    # Drive a failure too, so the status carries a message and a log tail and events are posted.
    _patch_container_status(core, namespace, POD_FAILURES["CrashLoopBackOff"])
    hosts.wait_reason(NAME, "CrashLoopBackOff", timeout=10)
    token = base64.b64decode(core.read_namespaced_secret(SECRET, namespace).data["token"]).decode()
    assert len(token) >= 43
    host = hosts.get(NAME)
    events = cluster.kubectl_run("get", "events", "-n", namespace, "-o", "json").stdout
    pod = cluster.kubectl_run("get", "pod", POD, "-n", namespace, "-o", "json").stdout
    places = {
        "GymHost annotations": json.dumps(host["metadata"].get("annotations")),
        "GymHost status": json.dumps(host["status"]),
        "GymHost spec": json.dumps(host["spec"]),
        "events": events,
        "pod": pod,
        "operator log": operator.output(),
    }
    for place, text in places.items():
        assert token not in text, f"the lease token leaked into the {place}"


def test_deleting_the_namespace_of_a_host_is_not_held_up_by_its_finalizer(
    ready_sample: dict[str, Any], core: client.CoreV1Api, namespace: str
) -> None:
    core.delete_namespace(namespace)

    def gone() -> bool:
        try:
            core.read_namespace(namespace)
        except ApiException as e:
            return e.status == 404
        return False

    eventually(gone, timeout=60, what=f"namespace {namespace} to be deleted")
