"""The operator SIGKILLed at seeded random points of 500 episode creates and deletes across two hosts, and
started again each time: afterwards no child is orphaned or duplicated, every queue is in FIFO order with
the right positions, every slot is used, and every expired episode is gone.

The sweep is repeatable: SEED fixes the operations, their hosts and TTLs, and the kill points.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.chaos.faults import assert_no_traceback, children_problems, is_admitted
from tests.support.cluster import Cluster
from tests.support.episodes import Episodes, episode
from tests.support.gymhosts import GROUP, VERSION, Hosts, apply, eventually, sample, set_path
from tests.support.processes import OperatorProcess

SEED = 15
OPERATIONS = 500
KILLS = 6
HOSTS = {"host-a": 6, "host-b": 4}  # name: maxConcurrent
TTLS = [None, None, 4, 8]  # None: the host's default (long); the short ones expire during the sweep
PACE_SECONDS = 0.03
SETTLE_SECONDS = 120
REAP_SLACK_SECONDS = 10
EPISODES = "episodesandboxes"


def test_operator_killed_at_random_points_of_500_creates_and_deletes_leaves_a_consistent_state(
    cluster: Cluster,
    own_namespace: str,
    start_operator: Callable[[], OperatorProcess],
    api_client: client.ApiClient,
) -> None:
    rng = random.Random(SEED)  # noqa: S311 - a seeded, repeatable sweep, not a secret
    hosts, episodes = Hosts(api_client, own_namespace), Episodes(api_client, own_namespace)
    operator = start_operator()
    for name, slots in HOSTS.items():
        claim, host = sample()
        host["metadata"]["name"] = name
        set_path(host, "spec.episodes.maxConcurrent", slots)
        apply(cluster, own_namespace, claim, host)
    for name in HOSTS:
        hosts.wait_reason(name, "HostReady")
    custom = client.CustomObjectsApi(api_client)
    kill_points = set(rng.sample(range(1, OPERATIONS), KILLS))
    alive: list[str] = []
    created = deleted = 0
    for step in range(OPERATIONS):
        if alive and rng.random() < 0.35:
            name = alive.pop(rng.randrange(len(alive)))
            try:
                custom.delete_namespaced_custom_object(GROUP, VERSION, own_namespace, EPISODES, name)
                deleted += 1
            except ApiException as e:
                if e.status != 404:  # else its TTL ran out first and the reaper removed it
                    raise
        else:
            name = f"ep-{step:03d}"
            ttl = rng.choice(TTLS)
            lifetime = {"lifetime": {"ttlSeconds": ttl}} if ttl else {}
            episodes.create(episode(name, host=rng.choice(list(HOSTS)), **lifetime))
            alive.append(name)
            created += 1
        if step in kill_points:
            operator.kill()
            operator = start_operator()
        time.sleep(PACE_SECONDS)
    done = time.monotonic()
    problems: list[str] = []

    def consistent() -> bool:
        problems[:] = inconsistencies(api_client, own_namespace)
        return not problems

    try:
        eventually(consistent, SETTLE_SECONDS, "a consistent state")
    except AssertionError:
        raise AssertionError("\n".join(problems)) from None
    print(
        f"\n{created} creates, {deleted} deletes, {KILLS} kills (seed {SEED}): consistent "
        f"{time.monotonic() - done:.1f} s after the last operation"
    )
    assert_no_traceback(operator, 0)


def inconsistencies(api_client: client.ApiClient, namespace: str) -> list[str]:
    """Everything that is wrong now, as sentences (empty when the state is consistent)."""
    items = Episodes(api_client, namespace).all()
    live = [e for e in items if not e["metadata"].get("deletionTimestamp")]
    uids = {e["metadata"]["name"]: e["metadata"]["uid"] for e in items}
    problems = children_problems(api_client, namespace, live, uids)
    for host, slots in HOSTS.items():
        problems += _queue_problems(host, slots, [e for e in live if e["spec"]["hostRef"]["name"] == host])
    overdue = datetime.now(UTC) - timedelta(seconds=REAP_SLACK_SECONDS)
    for e in items:
        expires = (e.get("status") or {}).get("expiresAt")
        if expires and datetime.fromisoformat(expires.replace("Z", "+00:00")) < overdue:
            problems.append(f"{e['metadata']['name']} expired at {expires} and is still there")
    return problems


def _queue_problems(host: str, slots: int, episodes: list[dict[str, Any]]) -> list[str]:
    """FIFO by (creationTimestamp, name): every admitted episode came before every waiting one, waiting ones
    hold positions 1..n in that order, and no slot stays free while one waits."""
    order = sorted(episodes, key=lambda e: (e["metadata"]["creationTimestamp"], e["metadata"]["name"]))
    admitted = [e["metadata"]["name"] for e in order if is_admitted(e)]
    waiting = [e for e in order if not is_admitted(e)]
    problems = []
    if len(admitted) != min(slots, len(order)):
        problems.append(f"{host}: {len(admitted)} admitted of {len(order)} with {slots} slots")
    if admitted and waiting and order.index(waiting[0]) < len(admitted):
        problems.append(f"{host}: {waiting[0]['metadata']['name']} waits behind a later episode")
    positions = [(e.get("status") or {}).get("queuePosition") for e in waiting]
    if positions != list(range(1, len(waiting) + 1)):
        names = [e["metadata"]["name"] for e in waiting]
        problems.append(f"{host}: queue positions {list(zip(names, positions, strict=True))}")
    not_ready = [e["metadata"]["name"] for e in order if is_admitted(e) and not _ready(e)]
    if not_ready:
        problems.append(f"{host}: admitted but not Ready: {not_ready}")
    return problems


def _ready(e: dict[str, Any]) -> bool:
    return Episodes.condition(e, "Ready").get("reason") == "SandboxReady"
