"""metav1.Condition bookkeeping: replace by type, move lastTransitionTime only when the status flips."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gymsandbox.status.conditions import ConditionState, find, merge_conditions

EARLIER = "2024-05-01T10:00:00Z"
NOW = datetime(2024, 5, 1, 12, 30, 45, tzinfo=UTC)
NOW_TEXT = "2024-05-01T12:30:45Z"


def existing(
    condition_type: str, status: str, reason: str = "Old", message: str = "old"
) -> dict[str, object]:
    return {
        "type": condition_type,
        "status": status,
        "reason": reason,
        "message": message,
        "observedGeneration": 1,
        "lastTransitionTime": EARLIER,
    }


def only(merged: list[dict[str, object]], condition_type: str) -> dict[str, object]:
    matches = [c for c in merged if c["type"] == condition_type]
    assert len(matches) == 1
    return matches[0]


def test_new_condition_gets_the_current_time() -> None:
    merged = merge_conditions([], [ConditionState("Ready", True, "HostReady")], 3, NOW)
    assert merged[0]["lastTransitionTime"] == NOW_TEXT


def test_timestamp_is_rfc3339_in_utc_without_fraction() -> None:
    moment = datetime(2024, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    merged = merge_conditions([], [ConditionState("Ready", True, "HostReady")], 1, moment)
    assert merged[0]["lastTransitionTime"] == "2024-01-02T03:04:05Z"


@pytest.mark.parametrize(
    ("status", "text"),
    [(True, "True"), (False, "False"), (None, "Unknown")],
)
def test_status_is_written_as_true_false_or_unknown(status: bool | None, text: str) -> None:
    merged = merge_conditions([], [ConditionState("Ready", status, "R")], 1, NOW)
    assert merged[0]["status"] == text


def test_condition_of_the_same_type_is_replaced_not_appended() -> None:
    merged = merge_conditions(
        [existing("Ready", "False")], [ConditionState("Ready", True, "HostReady")], 2, NOW
    )
    assert [(c["type"], c["status"], c["reason"]) for c in merged] == [("Ready", "True", "HostReady")]


def test_conditions_come_out_in_computed_order() -> None:
    merged = merge_conditions(
        [existing("Ready", "True"), existing("Accepted", "True")],
        [ConditionState("Accepted", True, "Accepted"), ConditionState("Ready", True, "HostReady")],
        2,
        NOW,
    )
    assert [c["type"] for c in merged] == ["Accepted", "Ready"]


def test_last_transition_time_is_kept_when_the_status_is_unchanged() -> None:
    merged = merge_conditions(
        [existing("Ready", "False")], [ConditionState("Ready", False, "Old", "old")], 2, NOW
    )
    assert only(merged, "Ready")["lastTransitionTime"] == EARLIER


def test_last_transition_time_is_kept_when_only_reason_and_message_change() -> None:
    merged = merge_conditions(
        [existing("Ready", "False", "PodPending", "the pod is being created")],
        [ConditionState("Ready", False, "CrashLoopBackOff", "container gym keeps crashing")],
        2,
        NOW,
    )
    assert only(merged, "Ready")["lastTransitionTime"] == EARLIER


def test_reason_and_message_are_updated_when_the_status_is_unchanged() -> None:
    merged = merge_conditions(
        [existing("Ready", "False", "PodPending", "the pod is being created")],
        [ConditionState("Ready", False, "CrashLoopBackOff", "container gym keeps crashing")],
        2,
        NOW,
    )
    ready = only(merged, "Ready")
    assert (ready["reason"], ready["message"]) == ("CrashLoopBackOff", "container gym keeps crashing")


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ("True", False),
        ("False", True),
        ("Unknown", True),
        ("True", None),
        ("False", None),
    ],
)
def test_last_transition_time_moves_when_the_status_flips(before: str, after: bool | None) -> None:
    merged = merge_conditions([existing("Ready", before)], [ConditionState("Ready", after, "New")], 2, NOW)
    assert only(merged, "Ready")["lastTransitionTime"] == NOW_TEXT


@pytest.mark.parametrize("previous", [[], [existing("Ready", "True")], [existing("Ready", "False")]])
def test_observed_generation_is_set_to_the_given_generation(previous: list[dict[str, object]]) -> None:
    merged = merge_conditions(previous, [ConditionState("Ready", True, "HostReady")], 7, NOW)
    assert only(merged, "Ready")["observedGeneration"] == 7


def test_types_no_longer_computed_are_dropped() -> None:
    merged = merge_conditions(
        [existing("Ready", "True"), existing("Legacy", "True"), existing("Accepted", "True")],
        [ConditionState("Ready", True, "HostReady")],
        2,
        NOW,
    )
    assert [c["type"] for c in merged] == ["Ready"]


def test_each_type_keeps_its_own_transition_time() -> None:
    merged = merge_conditions(
        [existing("Accepted", "True"), existing("Ready", "False")],
        [ConditionState("Accepted", True, "Accepted"), ConditionState("Ready", True, "HostReady")],
        2,
        NOW,
    )
    assert (only(merged, "Accepted")["lastTransitionTime"], only(merged, "Ready")["lastTransitionTime"]) == (
        EARLIER,
        NOW_TEXT,
    )


def test_merged_condition_has_exactly_the_metav1_condition_fields() -> None:
    merged = merge_conditions([], [ConditionState("Ready", True, "HostReady", "serving")], 1, NOW)
    assert set(merged[0]) == {
        "type",
        "status",
        "reason",
        "message",
        "observedGeneration",
        "lastTransitionTime",
    }


def test_message_is_capped_at_the_metav1_limit() -> None:
    merged = merge_conditions([], [ConditionState("Ready", False, "PodFailed", "x" * 40_000)], 1, NOW)
    assert len(str(merged[0]["message"])) == 32768


def test_find_returns_the_condition_of_a_type() -> None:
    conditions = [existing("Accepted", "True"), existing("Ready", "False")]
    assert find(conditions, "Ready") == existing("Ready", "False")


def test_find_returns_none_for_an_absent_type() -> None:
    assert find([existing("Accepted", "True")], "Ready") is None
