"""EpisodeSandbox conditions from one observation: Admitted, PodScheduled, Ready, and a classified failure."""

from __future__ import annotations

from typing import Any

import pytest

from gymsandbox.api.conditions import ConditionType, FailureKind, Reason
from gymsandbox.policy.admission import Refusal
from gymsandbox.status.conditions import ConditionState
from gymsandbox.status.episode import (
    EpisodeObservation,
    EpisodeVerdict,
    compute_episode_conditions,
    ready_is_stale,
)

CONDITION_ORDER = [
    ConditionType.ADMITTED,
    ConditionType.POD_SCHEDULED,
    ConditionType.READY,
    ConditionType.RECONCILING,
    ConditionType.STALLED,
]
NODE = "kata-node-1"


def ready_pod() -> dict[str, Any]:
    """A sandbox pod as the kubelet reports it once its container runs and is ready."""
    return {
        "metadata": {"name": "ep-0001-sandbox", "namespace": "evals"},
        "spec": {"nodeName": NODE, "containers": [{"name": "sandbox"}]},
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": "PodScheduled", "status": "True"},
                {"type": "Initialized", "status": "True"},
                {"type": "ContainersReady", "status": "True"},
                {"type": "Ready", "status": "True"},
            ],
            "containerStatuses": [
                {"name": "sandbox", "ready": True, "restartCount": 0, "state": {"running": {}}}
            ],
        },
    }


def crashing_pod() -> dict[str, Any]:
    pod = ready_pod()
    pod["status"]["conditions"][-1]["status"] = "False"
    pod["status"]["containerStatuses"] = [
        {
            "name": "sandbox",
            "ready": False,
            "restartCount": 4,
            "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s"}},
            "lastState": {"terminated": {"reason": "Error", "exitCode": 2}},
        }
    ]
    return pod


def unscheduled_pod() -> dict[str, Any]:
    return {
        "metadata": {"name": "ep-0001-sandbox"},
        "spec": {"containers": [{"name": "sandbox"}]},
        "status": {"phase": "Pending"},
    }


def verdict(**observed: Any) -> EpisodeVerdict:
    return compute_episode_conditions(EpisodeObservation(**observed))


def by_type(result: EpisodeVerdict) -> dict[str, ConditionState]:
    return {c.type: c for c in result.conditions}


OBSERVATIONS: dict[str, dict[str, Any]] = {
    "refused": {"refusal": Refusal(Reason.IMAGE_NOT_APPROVED, "no")},
    "timed-out": {"timed_out": True},
    "queued": {"queue_position": 3},
    "expired": {"admitted": True, "expired": True},
    "runtime-class-missing": {"admitted": True, "runtime_class_missing": "RuntimeClass kata-qemu not found"},
    "no-pod": {"admitted": True},
    "ready": {"admitted": True, "pod": ready_pod()},
    "crashing": {"admitted": True, "pod": crashing_pod()},
}


@pytest.mark.parametrize("case", OBSERVATIONS)
def test_conditions_are_admitted_pod_scheduled_ready_in_that_order(case: str) -> None:
    assert [c.type for c in verdict(**OBSERVATIONS[case]).conditions] == CONDITION_ORDER


# --- refused --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "reason",
    [
        Reason.IMAGE_NOT_APPROVED,
        Reason.UNKNOWN_RUNTIME,
        Reason.RESOURCES_OVER_CAP,
        Reason.TTL_OVER_CAP,
        Reason.EGRESS_INVALID,
        Reason.EGRESS_NOT_SUBSET,
    ],
)
def test_refusal_sets_admitted_and_ready_false_with_its_reason_and_message(reason: Reason) -> None:
    conditions = by_type(verdict(refusal=Refusal(reason, "why it was refused")))
    for condition_type in (ConditionType.ADMITTED, ConditionType.READY):
        condition = conditions[condition_type]
        assert (condition.status, condition.reason, condition.message) == (
            False,
            reason,
            "why it was refused",
        )


@pytest.mark.parametrize(
    "reason",
    [Reason.IMAGE_NOT_APPROVED, Reason.UNKNOWN_RUNTIME, Reason.EGRESS_NOT_SUBSET, Reason.TTL_OVER_CAP],
)
def test_refusal_of_the_episode_spec_is_a_policy_failure(reason: Reason) -> None:
    failure = verdict(refusal=Refusal(reason, "why")).failure
    assert failure is not None
    assert (failure.kind, failure.reason, failure.message) == (FailureKind.POLICY, reason, "why")


@pytest.mark.parametrize(
    "reason", [Reason.HOST_NOT_FOUND, Reason.HOST_NOT_READY, Reason.DNS_RESOLUTION_FAILED]
)
def test_refusal_for_want_of_a_usable_host_or_dns_is_an_infrastructure_failure(reason: Reason) -> None:
    failure = verdict(refusal=Refusal(reason, "GymHost swe-gym-run-1 not found")).failure
    assert failure is not None
    assert (failure.kind, failure.reason) == (FailureKind.INFRASTRUCTURE, reason)


def test_refusal_leaves_pod_scheduled_unknown() -> None:
    scheduled = by_type(verdict(refusal=Refusal(Reason.UNKNOWN_RUNTIME, "why")))[ConditionType.POD_SCHEDULED]
    assert (scheduled.status, scheduled.reason) == (None, Reason.NOT_ACCEPTED)


def test_refusal_wins_over_every_other_observation() -> None:
    result = verdict(
        refusal=Refusal(Reason.EGRESS_NOT_SUBSET, "why"),
        admitted=True,
        timed_out=True,
        expired=True,
        pod=ready_pod(),
    )
    assert by_type(result)[ConditionType.READY].reason == Reason.EGRESS_NOT_SUBSET


# --- waiting for a slot ---------------------------------------------------------------------------


def test_timed_out_episode_reports_admission_timeout_on_admitted_and_ready() -> None:
    conditions = by_type(verdict(timed_out=True))
    for condition_type in (ConditionType.ADMITTED, ConditionType.READY):
        condition = conditions[condition_type]
        assert (condition.status, condition.reason) == (False, Reason.ADMISSION_TIMEOUT)


def test_admission_timeout_is_a_policy_failure() -> None:
    failure = verdict(timed_out=True).failure
    assert failure is not None
    assert (failure.kind, failure.reason) == (FailureKind.POLICY, Reason.ADMISSION_TIMEOUT)


def test_queued_episode_is_not_admitted_and_not_ready() -> None:
    conditions = by_type(verdict(queue_position=3))
    for condition_type in (ConditionType.ADMITTED, ConditionType.READY):
        condition = conditions[condition_type]
        assert (condition.status, condition.reason) == (False, Reason.QUEUED_CONCURRENCY_LIMIT)


@pytest.mark.parametrize("position", [1, 2, 17])
def test_queued_message_names_the_queue_position(position: int) -> None:
    conditions = by_type(verdict(queue_position=position))
    for condition in conditions.values():
        if condition.type != ConditionType.STALLED:  # False, so without a message
            assert f"position {position}" in condition.message


def test_queued_episode_has_no_failure() -> None:
    assert verdict(queue_position=1).failure is None


# --- admitted -------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", ["expired", "runtime-class-missing", "no-pod", "ready", "crashing"])
def test_admitted_episode_shows_admitted_true(case: str) -> None:
    admitted = by_type(verdict(**OBSERVATIONS[case]))[ConditionType.ADMITTED]
    assert (admitted.status, admitted.reason) == (True, Reason.ADMITTED)


def test_expired_episode_is_not_ready_with_reason_expired() -> None:
    ready = by_type(verdict(admitted=True, expired=True))[ConditionType.READY]
    assert (ready.status, ready.reason) == (False, Reason.EXPIRED)


def test_expiry_wins_over_a_ready_pod() -> None:
    ready = by_type(verdict(admitted=True, expired=True, pod=ready_pod()))[ConditionType.READY]
    assert (ready.status, ready.reason) == (False, Reason.EXPIRED)


def test_missing_runtime_class_is_an_infrastructure_failure() -> None:
    result = verdict(admitted=True, runtime_class_missing="RuntimeClass kata-qemu not found")
    ready = by_type(result)[ConditionType.READY]
    assert (ready.status, ready.reason) == (False, Reason.RUNTIME_CLASS_NOT_FOUND)
    assert result.failure is not None
    assert (result.failure.kind, result.failure.reason, result.failure.message) == (
        FailureKind.INFRASTRUCTURE,
        Reason.RUNTIME_CLASS_NOT_FOUND,
        "RuntimeClass kata-qemu not found",
    )


def test_missing_runtime_class_wins_over_a_ready_pod() -> None:
    result = verdict(admitted=True, runtime_class_missing="gone", pod=ready_pod())
    assert by_type(result)[ConditionType.READY].reason == Reason.RUNTIME_CLASS_NOT_FOUND


def test_admitted_episode_without_a_pod_is_pod_pending() -> None:
    result = verdict(admitted=True)
    conditions = by_type(result)
    for condition_type in (ConditionType.POD_SCHEDULED, ConditionType.READY):
        condition = conditions[condition_type]
        assert (condition.status, condition.reason) == (False, Reason.POD_PENDING)
    assert result.failure is None


def test_ready_pod_makes_the_episode_ready() -> None:
    result = verdict(admitted=True, pod=ready_pod())
    ready = by_type(result)[ConditionType.READY]
    assert (ready.status, ready.reason) == (True, Reason.SANDBOX_READY)
    assert result.failure is None


def test_scheduled_pod_names_its_node() -> None:
    scheduled = by_type(verdict(admitted=True, pod=ready_pod()))[ConditionType.POD_SCHEDULED]
    assert (scheduled.status, scheduled.reason) == (True, Reason.SCHEDULED)
    assert NODE in scheduled.message


def test_pod_not_yet_scheduled_is_pending_without_failure() -> None:
    result = verdict(admitted=True, pod=unscheduled_pod())
    conditions = by_type(result)
    assert conditions[ConditionType.POD_SCHEDULED].status is False
    assert conditions[ConditionType.READY].status is False
    assert conditions[ConditionType.READY].reason == Reason.POD_NOT_READY
    assert result.failure is None


def test_crashing_pod_is_a_workload_failure() -> None:
    result = verdict(admitted=True, pod=crashing_pod())
    ready = by_type(result)[ConditionType.READY]
    assert (ready.status, ready.reason) == (False, Reason.CRASH_LOOP_BACK_OFF)
    assert result.failure is not None
    assert (result.failure.kind, result.failure.reason) == (FailureKind.WORKLOAD, Reason.CRASH_LOOP_BACK_OFF)
    assert result.failure.container == "sandbox"


def stored(status: str, reason: str) -> dict[str, Any]:
    return {"conditions": [{"type": "Ready", "status": status, "reason": reason}]}


def test_stored_ready_that_its_pod_contradicts_is_stale() -> None:
    # The pod became Ready, but the event that says so was lost: the episode still reads PodNotReady.
    not_ready = by_type(verdict(admitted=True, pod=unscheduled_pod()))[ConditionType.READY]
    assert ready_is_stale(stored("False", not_ready.reason), ready_pod())
    assert ready_is_stale(stored("True", "SandboxReady"), crashing_pod())  # it crashed since


def test_stored_ready_that_matches_its_pod_is_not_stale() -> None:
    for pod in (ready_pod(), crashing_pod(), unscheduled_pod()):
        ready = by_type(verdict(admitted=True, pod=pod))[ConditionType.READY]
        assert not ready_is_stale(stored(ready.status_text, ready.reason), pod)


@pytest.mark.parametrize("reason", [Reason.EXPIRED, Reason.HOST_NOT_READY, Reason.DNS_RESOLUTION_FAILED])
def test_the_episodes_own_states_are_not_the_pods_to_contradict(reason: Reason) -> None:
    assert not ready_is_stale(stored("False", reason), ready_pod())
