"""1,000 episodes whose TTLs run out in the same second, across 20 hosts: every one is reaped within seconds
of its expiresAt, so is its pod (the operator deletes those itself), and nothing of them is left afterwards
(no pod, Secret or NetworkPolicy).

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
from tests.cluster_fixtures import Cluster, OperatorProcess
from tests.integration.episodes import Episodes, episode
from tests.integration.gymhosts import GROUP, VERSION, Hosts, apply, eventually, sample, set_path

HOSTS = 20
PER_HOST = 50
ADMIT_SECONDS = 420
LEAD_SECONDS = 30  # from the last ttlSeconds change to the common expiry
REAPED_WITHIN_SECONDS = 45
POD_GONE_SECONDS = 60
GONE_SECONDS = 300  # the collector deletes some 20 objects a second here: 2,000 Secrets and policies


def test_1000_episodes_expiring_in_the_same_second_are_all_reaped_within_seconds(
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
        ttl = int((target - admitted_at).total_seconds())
        body = {"spec": {"lifetime": {"ttlSeconds": ttl}}}
        custom.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, "episodesandboxes", e["metadata"]["name"], body
        )

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(expire_at_target, items))
    stamp = target.strftime("%Y-%m-%dT%H:%M:%SZ")
    patched_in = LEAD_SECONDS - (target - datetime.now(UTC)).total_seconds()
    while datetime.now(UTC) < target:
        time.sleep(0.2)
    expired = time.monotonic()

    def remaining() -> bool:
        left = len(episodes.all())
        print(f"DEBUG {time.monotonic() - expired:.1f} {left}", flush=True)
        return left == 0

    eventually(remaining, REAPED_WITHIN_SECONDS, f"all {len(manifests)} reaped")
    reaped_in = time.monotonic() - expired
    # The operator ends the pods itself; the Secrets and NetworkPolicies are the garbage collector's.
    eventually(lambda: not hosts.children_of_episodes()["pods"], POD_GONE_SECONDS, "every sandbox pod gone")
    pods_gone_in = time.monotonic() - expired
    eventually(
        lambda: not any(hosts.children_of_episodes().values()), GONE_SECONDS, "every episode's children gone"
    )
    gone_in = time.monotonic() - expired
    print(
        f"\n{len(manifests)} episodes under {HOSTS} hosts: admitted in {admitted_in:.0f} s, TTLs set in "
        f"{patched_in:.0f} s; all expiring at {stamp} were reaped {reaped_in:.1f} s after it, their pods "
        f"gone after {pods_gone_in:.1f} s, every other child (the garbage collector's) after {gone_in:.1f} s"
    )
    assert_no_traceback(operator, log_offset)
