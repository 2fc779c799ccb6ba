"""Active/standby (handlers/leader.py): two operators of one scope, as the chart's two replicas run. Started
together, exactly one acts; SIGKILLed mid-burst, the leader is replaced by the standby within 15 s, which then
converges every episode with no child duplicated or orphaned; stopped in order, it hands over at once."""

from __future__ import annotations

import re
import time
from collections.abc import Callable

import pytest
from kubernetes import client

from gymsandbox.handlers.leader import RETRY_SECONDS, lease_name
from tests.chaos.faults import HOST, assert_no_traceback, children_problems, wait_all_ready
from tests.support.chart import OPERATOR_NAMESPACE
from tests.support.cluster import Cluster
from tests.support.episodes import Episodes, episode
from tests.support.gymhosts import Hosts, apply, eventually, sample, set_path
from tests.support.processes import OperatorProcess

EPISODES = 40
TAKEOVER_SECONDS = 15  # the bound: LEASE_SECONDS (10) and a look every RETRY_SECONDS (2)
CONVERGE_SECONDS = 60  # after the kill: the takeover, then a burst of 40 on kwok
LEADING = r"gymsandbox operator leading \(Lease \S+, as (\S+)\)"
WAITING = "gymsandbox operator waiting"
# The work queue's debug line for a handled key (--verbose): only an instance that acts has them.
ACTS = re.compile(r": handled by \w+")

Launch = Callable[..., OperatorProcess]


@pytest.fixture
def launch(start_operator: Callable[..., OperatorProcess]) -> Launch:
    """Operators for `own_namespace`, each logging to a file of its own."""

    def start(name: str, *, wait: bool = True) -> OperatorProcess:
        """Started once it leads or waits; with `wait=False` at once (each is this thread's child: its
        death signal follows the thread that started it, so none is started from a thread of its own)."""
        return start_operator(name, started_when=f"{LEADING}|{WAITING}" if wait else "")

    return start


def leading(handle: OperatorProcess) -> str | None:
    """The identity the instance leads as, once its log says it leads."""
    found = re.search(LEADING, handle.output())
    return found.group(1) if found else None


def lease_holder(api_client: client.ApiClient, own_namespace: str) -> str:
    lease = client.CoordinationV1Api(api_client).read_namespaced_lease(
        lease_name([own_namespace]), OPERATOR_NAMESPACE
    )
    return str(lease.spec.holder_identity)


def ready_host(cluster: Cluster, namespace: str, api_client: client.ApiClient, slots: int) -> None:
    claim, host = sample()
    set_path(host, "spec.episodes.maxConcurrent", slots)
    apply(cluster, namespace, claim, host)
    Hosts(api_client, namespace).wait_reason(HOST, "HostReady", timeout=60)


def test_two_operators_started_together_exactly_one_acts_and_a_stop_hands_over_at_once(
    cluster: Cluster, launch: Launch, own_namespace: str, api_client: client.ApiClient
) -> None:
    handles = {name: launch(name, wait=False) for name in ("a", "b")}
    for handle in handles.values():
        eventually(lambda h=handle: re.search(f"{LEADING}|{WAITING}", h.output()), timeout=30, what="a start")
    time.sleep(2 * RETRY_SECONDS)  # a second leader, if the election let one through, would say so by now
    leaders = [h for h in handles.values() if leading(h)]
    assert len(leaders) == 1, {name: h.output()[-2000:] for name, h in handles.items()}
    (leader,) = leaders
    (standby,) = [h for h in handles.values() if h is not leader]
    assert WAITING in standby.output()
    assert lease_holder(api_client, own_namespace) == leading(leader)

    ready_host(cluster, own_namespace, api_client, slots=2)
    episodes = Episodes(api_client, own_namespace)
    episodes.create(episode("ep-0"))
    episodes.wait_ready("ep-0", timeout=60)
    assert ACTS.search(leader.output())
    assert not ACTS.search(standby.output()), standby.output()[-3000:]
    assert own_namespace not in standby.output().split(WAITING, 1)[1]  # nothing about its objects

    stopped = time.monotonic()
    leader.stop()  # SIGTERM: the engine stops, then the Lease is released
    eventually(lambda: leading(standby), timeout=10, what="the standby leading")
    print(f"\nhanded over {time.monotonic() - stopped:.1f} s after the leader's SIGTERM")
    assert lease_holder(api_client, own_namespace) == leading(standby)
    episodes.create(episode("ep-1"))
    episodes.wait_ready("ep-1", timeout=60)
    assert_no_traceback(standby, 0)


def test_the_leader_killed_mid_burst_is_replaced_within_15_s_and_every_episode_converges(
    cluster: Cluster, launch: Launch, own_namespace: str, api_client: client.ApiClient
) -> None:
    leader = launch("a")
    assert leading(leader)
    standby = launch("b")
    assert WAITING in standby.output()
    ready_host(cluster, own_namespace, api_client, slots=EPISODES)
    episodes = Episodes(api_client, own_namespace)
    for i in range(EPISODES):
        episodes.create(episode(f"ep-{i:02d}"))
        if i == EPISODES // 2:
            leader.kill()  # SIGKILL: no release, the Lease runs out
            killed = time.monotonic()
    eventually(lambda: leading(standby), timeout=TAKEOVER_SECONDS + 5, what="the standby leading")
    took_over = time.monotonic() - killed
    assert took_over <= TAKEOVER_SECONDS, f"the standby took over {took_over:.1f} s after the kill"
    assert lease_holder(api_client, own_namespace) == leading(standby)
    converged = wait_all_ready(episodes, EPISODES, killed, CONVERGE_SECONDS)
    print(f"\nthe standby led {took_over:.1f} s after the SIGKILL; after the kill: {converged}")
    items = episodes.all()
    uids = {e["metadata"]["name"]: e["metadata"]["uid"] for e in items}
    assert children_problems(api_client, own_namespace, items, uids) == []
    assert_no_traceback(standby, 0)
