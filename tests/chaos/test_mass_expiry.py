"""1,000 episodes whose TTLs run out in the same second, across 20 hosts: every one is reaped, and so is its
pod (the operator deletes those itself). Their Secrets and NetworkPolicies are all owned by the deleted
episodes, so the garbage collector removes them at its own pace (some 20 objects a second here; this test
does not wait for 2,000 of them). The figures are printed; the bounds only catch a reaper that stalls.

The episodes are admitted with a long TTL first; then each one's `lifetime.ttlSeconds` is set so that
admittedAt + ttlSeconds is the same moment for all (what a trainer's renew call does), so the reaper faces
all 1,000 at once however long admission took.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes import client

from tests.chaos.faults import assert_no_traceback
from tests.support.cluster import Cluster
from tests.support.episodes import Episodes, episode
from tests.support.gymhosts import GROUP, VERSION, Hosts, apply, eventually, sample, set_path
from tests.support.processes import OperatorProcess

HOSTS = 20
PER_HOST = 50
ADMIT_SECONDS = 420
LEAD_SECONDS = 20  # from the start of the ttlSeconds changes to the common expiry (they take ~8 s)
REAPED_WITHIN_SECONDS = 120  # 27 s alone, 48 s at the end of the whole suite
POD_GONE_SECONDS = 120
EPISODE_CHILDREN = "app.kubernetes.io/component=episode"


def test_1000_episodes_expiring_in_the_same_second_are_all_reaped_with_their_pods(
    cluster: Cluster, operator: OperatorProcess, namespace: str, api_client: client.ApiClient
) -> None:
    log_offset = len(operator.output())
    hosts, episodes = Hosts(api_client, namespace), Episodes(api_client, namespace)
    names = [f"host-{i:02d}" for i in range(HOSTS)]
    for name in names:
        claim, host = sample()
        host["metadata"]["name"] = name
        set_path(host, "spec.episodes.maxConcurrent", PER_HOST)
        apply(cluster, namespace, claim, host)
    for name in names:
        hosts.wait_reason(name, "HostReady", timeout=120)
    started = time.monotonic()
    manifests = [episode(f"{h}-ep-{j:02d}", host=h) for h in names for j in range(PER_HOST)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(episodes.create, manifests))

    def all_admitted() -> list[dict[str, Any]] | None:
        items = episodes.all()
        admitted = [e for e in items if (e.get("status") or {}).get("admittedAt")]
        return items if len(admitted) == len(manifests) else None

    items = eventually(all_admitted, ADMIT_SECONDS, f"all {len(manifests)} episodes admitted")
    admitted_in = time.monotonic() - started

    target = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=LEAD_SECONDS)
    custom = client.CustomObjectsApi(api_client)

    def expire_at_target(e: dict[str, Any]) -> None:
        admitted_at = datetime.fromisoformat(e["status"]["admittedAt"].replace("Z", "+00:00"))
        body = {"spec": {"lifetime": {"ttlSeconds": int((target - admitted_at).total_seconds())}}}
        custom.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, "episodesandboxes", e["metadata"]["name"], body
        )

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(expire_at_target, items))
    patched_in = LEAD_SECONDS - (target - datetime.now(UTC)).total_seconds()
    while datetime.now(UTC) < target:
        time.sleep(0.2)
    expired = time.monotonic()
    eventually(lambda: not episodes.all(), REAPED_WITHIN_SECONDS, f"all {len(manifests)} reaped")
    reaped_in = time.monotonic() - expired
    eventually(lambda: not hosts.children_of_episodes()["pods"], POD_GONE_SECONDS, "every sandbox pod gone")
    pods_gone_in = time.monotonic() - expired
    uids = {e["metadata"]["uid"] for e in items}
    for kind, listing in {
        "Secret": client.CoreV1Api(api_client).list_namespaced_secret,
        "NetworkPolicy": client.NetworkingV1Api(api_client).list_namespaced_network_policy,
    }.items():
        for child in listing(namespace, label_selector=EPISODE_CHILDREN).items:
            owners = {ref.uid for ref in child.metadata.owner_references or []}
            assert owners & uids, f"{kind} {child.metadata.name} is owned by no reaped episode: it would stay"
    print(
        f"\n{len(manifests)} episodes under {HOSTS} hosts: admitted in {admitted_in:.0f} s, TTLs set in "
        f"{patched_in:.0f} s; all expiring at {target:%H:%M:%S} were reaped {reaped_in:.1f} s after it, "
        f"their pods gone after {pods_gone_in:.1f} s"
    )
    assert_no_traceback(operator, log_offset)
