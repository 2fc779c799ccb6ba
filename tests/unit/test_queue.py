"""FIFO admission under episodes.maxConcurrent: one pure plan from one listing of a host's episodes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gymsandbox.api.names import LABEL_EPISODE_UID
from gymsandbox.policy.queue import (
    EpisodeSlot,
    Lingering,
    QueuePlan,
    lingering_sandboxes,
    plan_queue,
    position_due,
)

NOW = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)


def at(seconds: int) -> datetime:
    """A moment `seconds` after NOW (negative: before)."""
    return NOW + timedelta(seconds=seconds)


def waiting(name: str, created: int = -60, **fields: Any) -> EpisodeSlot:
    return EpisodeSlot(name=name, created=at(created), **fields)


def holding(name: str, created: int = -600, **fields: Any) -> EpisodeSlot:
    return EpisodeSlot(name=name, created=at(created), admitted=True, **fields)


def holding_after(plan: QueuePlan, episodes: list[EpisodeSlot]) -> int:
    """Slots held once the plan is applied: admitted and not closing, plus what the plan admits."""
    return sum(1 for e in episodes if e.admitted and not e.closing) + len(plan.admit)


def test_empty_host_plans_nothing() -> None:
    assert plan_queue([], 4, NOW) == QueuePlan()


def test_waiting_episodes_are_admitted_oldest_first() -> None:
    episodes = [waiting("c", created=-10), waiting("a", created=-30), waiting("b", created=-20)]
    assert plan_queue(episodes, 3, NOW).admit == ["a", "b", "c"]


def test_episodes_created_in_the_same_instant_are_ordered_by_name() -> None:
    episodes = [waiting("ep-b", created=-5), waiting("ep-a", created=-5), waiting("ep-c", created=-5)]
    plan = plan_queue(episodes, 1, NOW)
    assert plan.admit == ["ep-a"]
    assert plan.positions == {"ep-b": 1, "ep-c": 2}


def test_oldest_waiting_episode_takes_the_only_free_slot() -> None:
    episodes = [waiting("young", created=-1), waiting("old", created=-100)]
    plan = plan_queue(episodes, 1, NOW)
    assert plan.admit == ["old"]
    assert plan.positions == {"young": 1}


@pytest.mark.parametrize(
    ("held", "waiting_count", "max_concurrent"),
    [(0, 5, 1), (0, 5, 3), (2, 5, 3), (3, 5, 3), (1, 0, 2), (0, 2, 5), (4, 3, 2)],
)
def test_plan_never_leaves_more_than_max_concurrent_holding(
    held: int, waiting_count: int, max_concurrent: int
) -> None:
    episodes = [holding(f"held-{i}", created=-1000 + i) for i in range(held)]
    episodes += [waiting(f"wait-{i}", created=-100 + i) for i in range(waiting_count)]
    plan = plan_queue(episodes, max_concurrent, NOW)
    assert holding_after(plan, episodes) <= max(max_concurrent, held)
    assert len(plan.admit) == max(0, min(waiting_count, max_concurrent - held))


def test_full_host_admits_nothing() -> None:
    episodes = [holding("a"), holding("b"), waiting("c")]
    plan = plan_queue(episodes, 2, NOW)
    assert plan.admit == []
    assert plan.positions == {"c": 1}


def test_host_over_a_lowered_limit_admits_nothing() -> None:
    episodes = [holding("a"), holding("b"), holding("c"), waiting("d")]
    plan = plan_queue(episodes, 1, NOW)
    assert plan.admit == []
    assert plan.active == 3


def test_closing_episode_gives_its_slot_to_the_next_waiting_one() -> None:
    episodes = [holding("old", closing=True), waiting("next")]
    plan = plan_queue(episodes, 1, NOW)
    assert plan.admit == ["next"]
    assert plan.active == 1


def test_closing_episode_that_never_held_a_slot_does_not_queue() -> None:
    plan = plan_queue([waiting("gone", closing=True)], 1, NOW)
    assert plan.admit == []
    assert plan.positions == {}
    assert plan.queued == 0


def test_inadmissible_episode_is_neither_admitted_nor_queued() -> None:
    episodes = [waiting("refused", created=-100, admissible=False), waiting("fine", created=-1)]
    plan = plan_queue(episodes, 5, NOW)
    assert plan.admit == ["fine"]
    assert "refused" not in plan.positions
    assert "refused" not in plan.timed_out


def test_inadmissible_episode_does_not_take_a_queue_position() -> None:
    episodes = [holding("a"), waiting("refused", created=-100, admissible=False), waiting("b", created=-1)]
    assert plan_queue(episodes, 1, NOW).positions == {"b": 1}


def test_queue_positions_are_one_based_and_contiguous_in_fifo_order() -> None:
    episodes = [holding("h")]
    episodes += [waiting(f"w{i}", created=-50 + i) for i in range(5)]
    episodes += [
        waiting("refused", created=-49, admissible=False),
        waiting("gone", created=-48, closing=True),
    ]
    plan = plan_queue(episodes, 1, NOW)
    assert plan.positions == {"w0": 1, "w1": 2, "w2": 3, "w3": 4, "w4": 5}


def test_admitted_episode_past_expiry_is_listed_as_expired() -> None:
    plan = plan_queue([holding("old", expires_at=at(-1)), holding("fresh", expires_at=at(60))], 4, NOW)
    assert plan.expired == ["old"]


def test_admitted_episode_expires_at_its_expiry_instant() -> None:
    assert plan_queue([holding("edge", expires_at=NOW)], 4, NOW).expired == ["edge"]


def test_expired_episode_keeps_its_slot_until_deleted() -> None:
    episodes = [holding("old", expires_at=at(-1)), waiting("next")]
    plan = plan_queue(episodes, 1, NOW)
    assert plan.admit == []
    assert plan.positions == {"next": 1}
    assert plan.active == 1


def test_closing_expired_episode_is_not_listed_again() -> None:
    assert plan_queue([holding("old", expires_at=at(-1), closing=True)], 1, NOW).expired == []


def test_admitted_episode_without_expiry_never_expires() -> None:
    assert plan_queue([holding("forever")], 1, NOW).expired == []


def test_waiting_episode_past_its_deadline_times_out() -> None:
    plan = plan_queue([holding("a"), waiting("late", wait_deadline=at(-1))], 1, NOW)
    assert plan.timed_out == ["late"]
    assert plan.positions == {}


def test_waiting_episode_times_out_at_its_deadline_instant() -> None:
    assert plan_queue([holding("a"), waiting("edge", wait_deadline=NOW)], 1, NOW).timed_out == ["edge"]


def test_timed_out_episode_is_never_admitted_even_when_a_slot_is_free() -> None:
    plan = plan_queue([waiting("late", wait_deadline=at(-1))], 4, NOW)
    assert plan.timed_out == ["late"]
    assert plan.admit == []
    assert plan.active == 0


def test_timed_out_episode_leaves_the_free_slot_to_the_next_in_line() -> None:
    episodes = [waiting("late", created=-100, wait_deadline=at(-1)), waiting("next", created=-1)]
    plan = plan_queue(episodes, 1, NOW)
    assert plan.admit == ["next"]


def test_waiting_episode_before_its_deadline_stays_in_the_queue() -> None:
    plan = plan_queue([holding("a"), waiting("patient", wait_deadline=at(1))], 1, NOW)
    assert plan.timed_out == []
    assert plan.positions == {"patient": 1}


def test_admitted_episode_past_its_wait_deadline_is_not_timed_out() -> None:
    plan = plan_queue([holding("in", wait_deadline=at(-1))], 1, NOW)
    assert plan.timed_out == []
    assert plan.active == 1


@pytest.mark.parametrize(
    ("episodes", "max_concurrent", "active", "queued"),
    [
        ([], 3, 0, 0),
        ([holding("a"), holding("b")], 3, 2, 0),
        ([holding("a"), waiting("b"), waiting("c", created=-1)], 2, 2, 1),
        ([waiting("a"), waiting("b", created=-1), waiting("c", created=-2)], 2, 2, 1),
        ([holding("a", closing=True), waiting("b")], 1, 1, 0),
        ([holding("a", expires_at=at(-1)), waiting("b")], 1, 1, 1),
        ([holding("a"), waiting("late", wait_deadline=at(-1))], 1, 1, 0),
        ([holding("a"), waiting("refused", admissible=False)], 1, 1, 0),
    ],
    ids=[
        "empty",
        "all-holding",
        "one-admitted-one-queued",
        "fresh-host",
        "closing-frees",
        "expired-holds",
        "timed-out-not-queued",
        "inadmissible-not-queued",
    ],
)
def test_plan_counts_active_and_queued_after_the_plan(
    episodes: list[EpisodeSlot], max_concurrent: int, active: int, queued: int
) -> None:
    plan = plan_queue(episodes, max_concurrent, NOW)
    assert (plan.active, plan.queued) == (active, queued)


def test_queued_count_equals_the_number_of_positions() -> None:
    episodes = [waiting(f"w{i}", created=-i) for i in range(7)]
    plan = plan_queue(episodes, 3, NOW)
    assert plan.queued == len(plan.positions) == 4


def test_pods_lingering_without_an_open_episode_hold_slots() -> None:
    """A deleted episode's pod still running (a foreign finalizer, --cascade=orphan) is not a free slot."""
    episodes = [holding("a"), EpisodeSlot(name="b", created=at(-500), admitted=True, closing=True)]
    episodes += [waiting("c", created=-30), waiting("d", created=-20)]
    plan = plan_queue(episodes, 3, NOW, lingering=1)
    assert (plan.admit, plan.positions) == (["c"], {"d": 1})
    assert plan_queue(episodes, 3, NOW, lingering=0).admit == ["c", "d"]
    assert plan_queue(episodes, 1, NOW, lingering=2).admit == []


def sandbox_pod(episode_uid: str | None, phase: str = "Running", terminating: bool = False) -> dict[str, Any]:
    labels = {} if episode_uid is None else {LABEL_EPISODE_UID: episode_uid}
    meta: dict[str, Any] = {"labels": labels}
    if terminating:
        meta["deletionTimestamp"] = "2025-01-01T12:00:00Z"
    return {"metadata": meta, "status": {"phase": phase}}


@pytest.mark.parametrize(
    ("pods", "open_episodes", "expected"),
    [
        pytest.param([sandbox_pod("a"), sandbox_pod("b")], {"a", "b"}, Lingering(), id="all-open"),
        pytest.param([sandbox_pod("a")], set(), Lingering(1, ["a"]), id="episode-gone-pod-running"),
        pytest.param(
            [sandbox_pod("a", terminating=True)], set(), Lingering(1, []), id="terminating-still-holds"
        ),
        pytest.param([sandbox_pod("a", phase="Succeeded")], set(), Lingering(0, ["a"]), id="finished"),
        pytest.param([sandbox_pod("a", phase="Failed", terminating=True)], set(), Lingering(), id="over"),
        pytest.param([sandbox_pod("a", phase="Pending")], {"b"}, Lingering(1, ["a"]), id="pending-holds"),
        pytest.param([sandbox_pod(None)], set(), Lingering(1, []), id="unlabelled-holds-not-ended"),
        pytest.param(
            [sandbox_pod("b"), sandbox_pod("a"), sandbox_pod("a"), sandbox_pod("c")],
            {"c"},
            Lingering(3, ["a", "b"]),
            id="each-pod-holds-each-uid-ended-once",
        ),
    ],
)
def test_lingering_sandboxes(
    pods: list[dict[str, Any]], open_episodes: set[str], expected: Lingering
) -> None:
    """Pods of episodes not open hold a slot while they run; those not terminating are ended, by uid."""
    assert lingering_sandboxes(pods, open_episodes) == expected


def test_a_moving_queue_rewrites_positions_near_the_head_or_once_halved() -> None:
    assert position_due(None, 40, still=False)  # a new arrival learns its place at once
    assert not position_due(40, 39, still=False)  # one slot freed far back: not worth a write
    assert not position_due(40, 21, still=False)
    assert position_due(40, 20, still=False)  # halved
    assert position_due(4, 3, still=False)  # near the head every step is written
    assert position_due(2, 1, still=False)
    assert position_due(10, 12, still=False)  # moved back (an earlier episode arrived): at once
    assert not position_due(7, 7, still=False)


def test_a_still_queue_makes_every_position_exact() -> None:
    assert position_due(40, 39, still=True)
    assert not position_due(39, 39, still=True)


def test_writes_per_waiting_episode_grow_with_the_log_of_the_queue_not_its_length() -> None:
    writes, stored = 0, None
    for planned in range(500, 0, -1):  # one admission at a time, never still
        if position_due(stored, planned, still=False):
            writes, stored = writes + 1, planned
    assert stored == 1
    assert writes <= 12, writes  # 500 -> 250 -> 125 -> ... -> 3, 2, 1
