"""EpisodeSandbox end to end: FIFO admission under the host's cap, children, reaping, leases."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import pytest
from kubernetes import client, watch

from tests.support.cluster import Cluster
from tests.support.episodes import Episodes, episode
from tests.support.gymhosts import Hosts, eventually, ready_host
from tests.support.processes import OperatorProcess
from tests.support.scrape import scrape

pytestmark = pytest.mark.integration

HOST = "swe-gym-run-1"
MANY = 500


@pytest.fixture
def episodes(api_client: client.ApiClient, namespace: str) -> Episodes:
    return Episodes(api_client, namespace)


def test_never_more_than_the_cap_are_admitted_and_all_reach_ready_in_fifo_order(
    cluster: Cluster, operator: OperatorProcess, namespace: str, hosts: Hosts, episodes: Episodes
) -> None:
    ready_host(cluster, namespace, hosts, spec__episodes__maxConcurrent=3)
    names = [f"ep-{i:02d}" for i in range(10)]
    for name in names:
        episodes.create(episode(name))
        time.sleep(0.05)  # distinct creation order; FIFO ties break by name anyway
    ever_admitted: set[str] = set()
    ready: set[str] = set()
    max_admitted = 0
    deadline = time.monotonic() + 120
    while len(ready) < len(names):
        assert time.monotonic() < deadline, f"only {sorted(ready)} became Ready"
        current = {e["metadata"]["name"]: e for e in episodes.all()}
        holding = {
            n
            for n, e in current.items()
            if (e.get("status") or {}).get("admittedAt") and not e["metadata"].get("deletionTimestamp")
        }
        max_admitted = max(max_admitted, len(holding))
        ever_admitted |= holding
        # FIFO: whatever has been admitted so far is always the oldest episodes, never one that jumped ahead.
        assert sorted(ever_admitted) == names[: len(ever_admitted)], sorted(ever_admitted)
        for name in sorted(holding - ready):
            if episodes.condition(current[name], "Ready").get("status") == "True":
                ready.add(name)
                episodes.delete(name)  # close it: its slot goes to the next in line
        time.sleep(0.2)
    assert max_admitted <= 3


BURST = 40


def test_a_burst_of_concurrent_creates_admits_no_more_than_the_cap(
    cluster: Cluster, operator: OperatorProcess, namespace: str, hosts: Hosts, episodes: Episodes
) -> None:
    """Creates from many threads at once plan the queue while earlier admissions are decided but not yet
    written: each plan must count those too, or the host runs more episodes than its cap."""
    ready_host(cluster, namespace, hosts, spec__episodes__maxConcurrent=2)
    with ThreadPoolExecutor(max_workers=BURST) as pool:
        list(pool.map(lambda i: episodes.create(episode(f"burst-{i:02d}")), range(BURST)))

    def settled() -> bool:
        return all((e.get("status") or {}).get("observedGeneration") for e in episodes.all())

    eventually(settled, timeout=60, what=f"all {BURST} episodes reconciled")
    time.sleep(2)  # an over-admission's late status writes land too
    current = episodes.all()
    admitted = sorted(e["metadata"]["name"] for e in current if e["status"].get("admittedAt"))
    assert len(admitted) == 2, f"{len(admitted)} admitted under a cap of 2: {admitted}"
    queued = sorted(e["status"].get("queuePosition") for e in current if not e["status"].get("admittedAt"))
    assert queued == list(range(1, BURST - 1)), queued


def test_host_status_counts_active_and_queued_episodes(
    cluster: Cluster, operator: OperatorProcess, namespace: str, hosts: Hosts, episodes: Episodes
) -> None:
    ready_host(cluster, namespace, hosts, spec__episodes__maxConcurrent=2)
    for i in range(5):
        episodes.create(episode(f"ep-{i}"))
    eventually(
        lambda: ((hosts.get(HOST) or {}).get("status") or {}).get("episodes") == {"active": 2, "queued": 3},
        timeout=20,
        what="host status episodes {active: 2, queued: 3}",
    )
    eventually(lambda: episodes.ready_reason("ep-4") == "QueuedConcurrencyLimit", timeout=10, what="queued")
    waiting = episodes.get("ep-4") or {}
    assert waiting["status"]["queuePosition"] == 3
    assert episodes.condition(waiting, "Admitted")["reason"] == "QueuedConcurrencyLimit"


def test_waiting_past_admission_timeout_is_terminal(
    cluster: Cluster, operator: OperatorProcess, namespace: str, hosts: Hosts, episodes: Episodes
) -> None:
    ready_host(cluster, namespace, hosts, spec__episodes__maxConcurrent=1)
    episodes.create(episode("holder"))
    episodes.wait_ready("holder")
    episodes.create(episode("impatient", admissionTimeoutSeconds=2))
    eventually(lambda: episodes.ready_reason("impatient") == "AdmissionTimeout", timeout=20, what="timeout")
    episodes.delete("holder")  # a slot frees up, but giving up was final
    time.sleep(4)
    impatient = episodes.get("impatient") or {}
    assert not impatient["status"].get("admittedAt")
    assert episodes.condition(impatient, "Ready")["reason"] == "AdmissionTimeout"


def test_expired_episode_is_deleted_within_ten_seconds_of_expires_at(
    cluster: Cluster, operator: OperatorProcess, namespace: str, hosts: Hosts, episodes: Episodes
) -> None:
    ready_host(cluster, namespace, hosts)
    episodes.create(episode("short", lifetime={"ttlSeconds": 3}))
    episodes.wait_ready("short")
    expires_at = datetime.fromisoformat(
        (episodes.get("short") or {})["status"]["expiresAt"].replace("Z", "+00:00")
    )
    eventually(lambda: episodes.get("short") is None, timeout=20, what="the expired episode to be deleted")
    assert datetime.now(UTC) - expires_at < timedelta(seconds=10)
    eventually(lambda: not any(hosts.children_of_episodes().values()), timeout=15, what="its children to go")


def test_the_operator_itself_ends_an_expired_episodes_pod_not_the_garbage_collector(
    cluster: Cluster,
    operator: OperatorProcess,
    namespace: str,
    hosts: Hosts,
    episodes: Episodes,
    core: client.CoreV1Api,
) -> None:
    # Many expiring at once would wait for the collector's pace (tests/chaos/test_mass_expiry.py); here the
    # operator's own pods deletecollection, with the episode's name in its selector, is what is checked.
    ready_host(cluster, namespace, hosts)
    deletions = {"verb": "deletecollection", "resource": "pods", "code": "200"}
    before = scrape(operator.metrics_url).value("gymsandbox_api_requests_total", **deletions)
    episodes.create(episode("brief", lifetime={"ttlSeconds": 2}))
    episodes.wait_ready("brief")
    eventually(lambda: episodes.get("brief") is None, timeout=20, what="the expired episode to be deleted")
    eventually(
        lambda: scrape(operator.metrics_url).value("gymsandbox_api_requests_total", **deletions) > before,
        10,
        "the operator's deletecollection of the reaped episode's pod",
    )
    selector = "gymsandbox.dev/episode=brief"
    eventually(
        lambda: not core.list_namespaced_pod(namespace, label_selector=selector).items, 10, "its pod gone"
    )


def test_renewal_moves_expires_at(
    cluster: Cluster, operator: OperatorProcess, namespace: str, hosts: Hosts, episodes: Episodes
) -> None:
    ready_host(cluster, namespace, hosts)
    episodes.create(episode("renewed", lifetime={"ttlSeconds": 6}))
    episodes.wait_ready("renewed")
    before = (episodes.get("renewed") or {})["status"]["expiresAt"]
    episodes.patch("renewed", {"spec": {"lifetime": {"ttlSeconds": 600}}})
    eventually(
        lambda: ((episodes.get("renewed") or {}).get("status") or {}).get("expiresAt") not in (None, before),
        timeout=10,
        what="expiresAt to move",
    )
    time.sleep(8)  # past the original expiry
    assert episodes.get("renewed") is not None


def test_episode_children_are_restricted_and_owned(
    cluster: Cluster,
    operator: OperatorProcess,
    namespace: str,
    hosts: Hosts,
    episodes: Episodes,
    core: client.CoreV1Api,
) -> None:
    ready_host(cluster, namespace, hosts)
    episodes.create(
        episode(
            "tidy",
            user=4242,
            workdir="/workspace",
            env=[{"name": "TASK", "value": "t1"}],
            workspace={"mountPath": "/workspace"},
            egress={"allow": ["203.0.113.7:443"]},
            labels={"team": "rl"},
        )
    )
    episodes.wait_ready("tidy")
    pod = core.read_namespaced_pod("tidy-sandbox", namespace)
    assert pod.spec.runtime_class_name == "kata-qemu"
    assert pod.spec.automount_service_account_token is False
    assert pod.spec.security_context.run_as_user == 4242
    container = pod.spec.containers[0]
    assert container.working_dir == "/workspace"
    assert container.security_context.capabilities.drop == ["ALL"]
    tidy = episodes.get("tidy") or {}
    host_uid, own_uid = tidy["metadata"]["ownerReferences"][0]["uid"], tidy["metadata"]["uid"]
    assert [(m.mount_path, m.sub_path) for m in container.volume_mounts] == [
        ("/workspace", f".gymsandbox/hosts/{host_uid}/episodes/{own_uid}")
    ]
    assert pod.metadata.labels["user.gymsandbox.dev/team"] == "rl"
    assert "team" not in pod.metadata.labels
    assert not any(e.name.startswith("GYMSANDBOX_") for e in container.env or [])
    policy = client.NetworkingV1Api(core.api_client).read_namespaced_network_policy(
        "tidy-sandbox-net", namespace
    )
    cidrs = [block.ip_block.cidr for rule in policy.spec.egress for block in rule.to if block.ip_block]
    assert cidrs == ["203.0.113.7/32"]
    assert tidy["metadata"]["ownerReferences"][0]["kind"] == "GymHost"


def test_every_episodes_secret_and_network_policy_are_created_before_its_pod(
    cluster: Cluster,
    operator: OperatorProcess,
    namespace: str,
    hosts: Hosts,
    episodes: Episodes,
    core: client.CoreV1Api,
) -> None:
    """The two are made at once (neither needs the other), the pod only once both exist. A pod's creation
    revision is its ADDED event's resourceVersion; the Secret and NetworkPolicy are never changed after their
    creation, so theirs is the one they have (etcd revisions: opaque by API contract, ordered in a test)."""
    ready_host(cluster, namespace, hosts, spec__episodes__maxConcurrent=8)
    start = core.list_namespaced_pod(namespace).metadata.resource_version
    names = [f"ordered-{i}" for i in range(8)]
    for name in names:
        episodes.create(episode(name))
    for name in names:
        episodes.wait_ready(name, timeout=60)
    pods_added: dict[str, int] = {}  # the watch replays every event since `start`
    replay = watch.Watch()
    for event in replay.stream(
        core.list_namespaced_pod, namespace, resource_version=start, timeout_seconds=10
    ):
        if event["type"] == "ADDED":
            pods_added.setdefault(
                event["object"].metadata.name, int(event["object"].metadata.resource_version)
            )
        if all(f"{n}-sandbox" in pods_added for n in names):
            replay.stop()
    networking = client.NetworkingV1Api(core.api_client)
    for name in names:
        status = (episodes.get(name) or {})["status"]
        secret = core.read_namespaced_secret(status["leaseSecretName"], namespace)
        policy = networking.read_namespaced_network_policy(f"{name}-sandbox-net", namespace)
        pod_created = pods_added[status["podName"]]
        assert int(secret.metadata.resource_version) < pod_created, name
        assert int(policy.metadata.resource_version) < pod_created, name


def test_episode_without_egress_gets_no_egress_at_all(
    cluster: Cluster,
    operator: OperatorProcess,
    namespace: str,
    hosts: Hosts,
    episodes: Episodes,
    core: client.CoreV1Api,
) -> None:
    ready_host(cluster, namespace, hosts)
    episodes.create(episode("sealed"))
    episodes.wait_ready("sealed")
    policy = client.NetworkingV1Api(core.api_client).read_namespaced_network_policy(
        "sealed-sandbox-net", namespace
    )
    assert policy.spec.policy_types == ["Egress"]
    assert not policy.spec.egress


def test_deleting_an_episode_twice_and_a_host_with_many_leaves_nothing(
    cluster: Cluster, operator: OperatorProcess, namespace: str, hosts: Hosts, episodes: Episodes
) -> None:
    ready_host(cluster, namespace, hosts, spec__episodes__maxConcurrent=16)
    episodes.create(episode("twice"))
    episodes.wait_ready("twice")
    episodes.delete("twice")
    episodes.delete("twice")  # idempotent: already gone is fine
    eventually(lambda: episodes.get("twice") is None, timeout=10, what="the episode to go")
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda i: episodes.create(episode(f"many-{i:03d}")), range(MANY)))
    eventually(
        lambda: ((hosts.get(HOST) or {}).get("status") or {}).get("episodes", {}).get("active") == 16,
        timeout=60,
        what="16 episodes admitted",
    )
    cluster.kubectl_run("delete", "gymhost", HOST, "-n", namespace, "--timeout=60s")
    eventually(lambda: not episodes.all(), timeout=120, what=f"all {MANY} episodes to be deleted")
    eventually(lambda: not any(hosts.children().values()), timeout=60, what="every child to be deleted")


def test_the_runtime_column_shows_the_runtime_an_episode_inherits_from_its_host(
    cluster: Cluster, operator: OperatorProcess, namespace: str, hosts: Hosts, episodes: Episodes
) -> None:
    """No spec.runtime: the episode runs under its host's runtime (the sample's kata), and `kubectl get esb`
    says so instead of leaving the column blank."""
    ready_host(cluster, namespace, hosts)
    episodes.create(episode("inherits"))
    episodes.wait_ready("inherits")
    assert (episodes.get("inherits") or {})["status"]["runtime"] == "kata"
    table = cluster.kubectl_run("get", "esb", "inherits", "-n", namespace).stdout.splitlines()
    header, row = table[0].split(), table[1].split()
    assert row[header.index("RUNTIME")] == "kata", table
