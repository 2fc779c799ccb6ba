"""GymHost conditions from one observation: four conditions; the first failing check names Ready's reason."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gymsandbox.api.conditions import ConditionType, FailureKind, Reason
from gymsandbox.policy.admission import Refusal
from gymsandbox.status.conditions import ConditionState
from gymsandbox.status.gymhost import HostObservation, HostVerdict, compute_host_conditions

REFUSAL = Refusal(
    Reason.IMAGE_NOT_APPROVED, 'image "docker.io/evil:1" is not on the cluster\'s approved list'
)
EGRESS_ERROR = 'cannot resolve "models.example.com": Name or service not known'
RUNTIME_CLASS_MISSING = "RuntimeClass kata-qemu (profile kata) does not exist"
CLAIM_PROBLEM = "PersistentVolumeClaim gym-storage is Pending, not Bound"
T0 = "2024-05-01T10:00:00Z"


def _pod(
    *, node: str | None, phase: str, conditions: list[dict[str, Any]], statuses: list[dict[str, Any]]
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": "gym", "image": "registry.example.com/gym/swe-env:1.4.2"}]
    }
    if node:
        spec["nodeName"] = node
    return {
        "metadata": {"name": "swe-gym-run-1-host", "namespace": "evals", "uid": "pod-uid"},
        "spec": spec,
        "status": {"phase": phase, "conditions": conditions, "containerStatuses": statuses},
    }


def _cond(
    condition_type: str, status: str, reason: str | None = None, message: str | None = None
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "type": condition_type,
        "status": status,
        "lastProbeTime": None,
        "lastTransitionTime": T0,
    }
    if reason:
        out["reason"] = reason
    if message:
        out["message"] = message
    return out


READY_POD = _pod(
    node="kata-node-1",
    phase="Running",
    conditions=[_cond("PodScheduled", "True"), _cond("Ready", "True"), _cond("ContainersReady", "True")],
    statuses=[{"name": "gym", "ready": True, "restartCount": 0, "state": {"running": {"startedAt": T0}}}],
)
STARTING_POD = _pod(
    node="kata-node-1",
    phase="Running",
    conditions=[_cond("PodScheduled", "True"), _cond("Ready", "False", "ContainersNotReady")],
    statuses=[{"name": "gym", "ready": False, "restartCount": 0, "state": {"running": {"startedAt": T0}}}],
)
CRASHING_POD = _pod(
    node="kata-node-1",
    phase="Running",
    conditions=[_cond("PodScheduled", "True"), _cond("Ready", "False", "ContainersNotReady")],
    statuses=[
        {
            "name": "gym",
            "ready": False,
            "restartCount": 4,
            "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 1m20s restarting"}},
            "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}},
        }
    ],
)
UNSCHEDULABLE_POD = _pod(
    node=None,
    phase="Pending",
    conditions=[
        _cond(
            "PodScheduled",
            "False",
            "Unschedulable",
            "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector.",
        )
    ],
    statuses=[],
)

OBSERVATIONS = {
    "nothing-yet": HostObservation(),
    "refused": HostObservation(refusal=REFUSAL),
    "expired": HostObservation(expired=True),
    "egress-error": HostObservation(egress_error=EGRESS_ERROR),
    "egress-error-with-pod": HostObservation(egress_error=EGRESS_ERROR, pod=READY_POD),
    "runtime-class-missing": HostObservation(runtime_class_missing=RUNTIME_CLASS_MISSING),
    "claim-problem": HostObservation(claim_problem=CLAIM_PROBLEM),
    "ready": HostObservation(pod=READY_POD),
    "starting": HostObservation(pod=STARTING_POD),
    "crashing": HostObservation(pod=CRASHING_POD),
    "unschedulable": HostObservation(pod=UNSCHEDULABLE_POD),
}


def condition(verdict: HostVerdict, condition_type: ConditionType) -> ConditionState:
    return next(c for c in verdict.conditions if c.type == condition_type)


def ready_of(observation: HostObservation) -> ConditionState:
    return condition(compute_host_conditions(observation), ConditionType.READY)


@pytest.mark.parametrize("observation", OBSERVATIONS.values(), ids=OBSERVATIONS.keys())
def test_verdict_always_has_the_six_condition_types_in_order(observation: HostObservation) -> None:
    assert [c.type for c in compute_host_conditions(observation).conditions] == [
        ConditionType.ACCEPTED,
        ConditionType.EGRESS_READY,
        ConditionType.POD_SCHEDULED,
        ConditionType.READY,
        ConditionType.RECONCILING,
        ConditionType.STALLED,
    ]


@pytest.mark.parametrize("name", [n for n in OBSERVATIONS if n != "ready"])
def test_only_a_ready_pod_with_applied_egress_is_ready(name: str) -> None:
    assert compute_host_conditions(OBSERVATIONS[name]).ready is False


# --- refusal ------------------------------------------------------------------------------------------------


def test_refusal_sets_accepted_false_with_its_reason_and_message() -> None:
    accepted = condition(compute_host_conditions(HostObservation(refusal=REFUSAL)), ConditionType.ACCEPTED)
    assert (accepted.status, accepted.reason, accepted.message) == (False, REFUSAL.reason, REFUSAL.message)


def test_refusal_sets_ready_false_with_the_same_reason() -> None:
    ready = ready_of(HostObservation(refusal=REFUSAL))
    assert (ready.status, ready.reason, ready.message) == (False, REFUSAL.reason, REFUSAL.message)


def test_refusal_is_a_policy_failure() -> None:
    failure = compute_host_conditions(HostObservation(refusal=REFUSAL)).failure
    assert failure is not None
    assert (failure.kind, failure.reason) == (FailureKind.POLICY, REFUSAL.reason)


@pytest.mark.parametrize("condition_type", [ConditionType.EGRESS_READY, ConditionType.POD_SCHEDULED])
def test_refusal_leaves_egress_and_scheduling_unknown(condition_type: ConditionType) -> None:
    state = condition(compute_host_conditions(HostObservation(refusal=REFUSAL)), condition_type)
    assert (state.status, state.reason) == (None, Reason.NOT_ACCEPTED)


# --- egress -------------------------------------------------------------------------------------------------


def test_egress_error_without_pod_sets_ready_false_dns_resolution_failed() -> None:
    ready = ready_of(HostObservation(egress_error=EGRESS_ERROR))
    assert (ready.status, ready.reason) == (False, Reason.DNS_RESOLUTION_FAILED)


def test_egress_error_sets_egress_ready_false_with_the_error() -> None:
    egress = condition(
        compute_host_conditions(HostObservation(egress_error=EGRESS_ERROR)), ConditionType.EGRESS_READY
    )
    assert (egress.status, egress.reason, egress.message) == (
        False,
        Reason.DNS_RESOLUTION_FAILED,
        EGRESS_ERROR,
    )


def test_egress_error_without_pod_is_an_infrastructure_failure() -> None:
    failure = compute_host_conditions(HostObservation(egress_error=EGRESS_ERROR)).failure
    assert failure is not None
    assert (failure.kind, failure.reason) == (FailureKind.INFRASTRUCTURE, Reason.DNS_RESOLUTION_FAILED)


def test_egress_error_keeps_a_ready_pod_from_being_ready() -> None:
    ready = ready_of(HostObservation(egress_error=EGRESS_ERROR, pod=READY_POD))
    assert (ready.status, ready.reason) == (False, Reason.EGRESS_NOT_READY)


def test_egress_applied_when_there_is_no_egress_error() -> None:
    egress = condition(compute_host_conditions(HostObservation(pod=READY_POD)), ConditionType.EGRESS_READY)
    assert (egress.status, egress.reason) == (True, Reason.EGRESS_APPLIED)


# --- infrastructure checks ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("observation", "reason", "message"),
    [
        pytest.param(
            HostObservation(runtime_class_missing=RUNTIME_CLASS_MISSING),
            Reason.RUNTIME_CLASS_NOT_FOUND,
            RUNTIME_CLASS_MISSING,
            id="runtime-class",
        ),
        pytest.param(
            HostObservation(claim_problem=CLAIM_PROBLEM), Reason.PVC_NOT_BOUND, CLAIM_PROBLEM, id="claim"
        ),
    ],
)
def test_missing_infrastructure_sets_ready_and_pod_scheduled_false_with_its_reason(
    observation: HostObservation, reason: Reason, message: str
) -> None:
    verdict = compute_host_conditions(observation)
    scheduled, ready = (
        condition(verdict, ConditionType.POD_SCHEDULED),
        condition(verdict, ConditionType.READY),
    )
    assert [(c.status, c.reason, c.message) for c in (scheduled, ready)] == [(False, reason, message)] * 2


@pytest.mark.parametrize(
    ("observation", "reason"),
    [
        (HostObservation(runtime_class_missing=RUNTIME_CLASS_MISSING), Reason.RUNTIME_CLASS_NOT_FOUND),
        (HostObservation(claim_problem=CLAIM_PROBLEM), Reason.PVC_NOT_BOUND),
    ],
)
def test_missing_infrastructure_is_an_infrastructure_failure(
    observation: HostObservation, reason: Reason
) -> None:
    failure = compute_host_conditions(observation).failure
    assert failure is not None
    assert (failure.kind, failure.reason) == (FailureKind.INFRASTRUCTURE, reason)


# --- lifetime -----------------------------------------------------------------------------------------------


def test_expired_host_is_ready_false_expired() -> None:
    ready = ready_of(HostObservation(expired=True, pod=READY_POD))
    assert (ready.status, ready.reason) == (False, Reason.EXPIRED)


def test_expiry_is_not_a_failure() -> None:
    assert compute_host_conditions(HostObservation(expired=True)).failure is None


def test_expired_host_stays_accepted() -> None:
    accepted = condition(compute_host_conditions(HostObservation(expired=True)), ConditionType.ACCEPTED)
    assert (accepted.status, accepted.reason) == (True, Reason.ACCEPTED)


# --- the pod ------------------------------------------------------------------------------------------------


def test_ready_pod_makes_the_host_ready() -> None:
    ready = ready_of(HostObservation(pod=READY_POD))
    assert (ready.status, ready.reason) == (True, Reason.HOST_READY)


def test_ready_host_has_every_condition_true_and_is_neither_reconciling_nor_stalled() -> None:
    verdict = compute_host_conditions(HostObservation(pod=READY_POD))
    assert [(c.status, c.reason) for c in verdict.conditions] == [
        (True, Reason.ACCEPTED),
        (True, Reason.EGRESS_APPLIED),
        (True, Reason.SCHEDULED),
        (True, Reason.HOST_READY),
        (False, Reason.HOST_READY),
        (False, Reason.HOST_READY),
    ]


def test_ready_host_reports_no_failure() -> None:
    verdict = compute_host_conditions(HostObservation(pod=READY_POD))
    assert (verdict.ready, verdict.failure) == (True, None)


def test_scheduled_condition_names_the_node() -> None:
    scheduled = condition(
        compute_host_conditions(HostObservation(pod=READY_POD)), ConditionType.POD_SCHEDULED
    )
    assert "kata-node-1" in scheduled.message


def test_no_pod_yet_is_pod_pending() -> None:
    ready = ready_of(HostObservation())
    assert (ready.status, ready.reason) == (False, Reason.POD_PENDING)


def test_starting_pod_is_pod_not_ready_without_failure() -> None:
    verdict = compute_host_conditions(HostObservation(pod=STARTING_POD))
    assert (condition(verdict, ConditionType.READY).reason, verdict.failure) == (Reason.POD_NOT_READY, None)


def test_pod_failure_becomes_ready_reason_and_verdict_failure() -> None:
    verdict = compute_host_conditions(HostObservation(pod=CRASHING_POD))
    assert verdict.failure is not None
    assert (condition(verdict, ConditionType.READY).reason, verdict.failure.kind) == (
        Reason.CRASH_LOOP_BACK_OFF,
        FailureKind.WORKLOAD,
    )


def test_unschedulable_pod_sets_pod_scheduled_false_with_the_pod_reason() -> None:
    scheduled = condition(
        compute_host_conditions(HostObservation(pod=UNSCHEDULABLE_POD)), ConditionType.POD_SCHEDULED
    )
    assert (scheduled.status, scheduled.reason) == (False, Reason.UNSCHEDULABLE)


def test_observation_pod_is_not_modified() -> None:
    pod = copy.deepcopy(CRASHING_POD)
    compute_host_conditions(HostObservation(pod=pod))
    assert pod == CRASHING_POD


# --- precedence: refusal, expiry, egress without pod, RuntimeClass, claim, then the pod ---------------------


@pytest.mark.parametrize(
    ("observation", "reason"),
    [
        pytest.param(
            HostObservation(
                refusal=REFUSAL,
                expired=True,
                egress_error=EGRESS_ERROR,
                runtime_class_missing=RUNTIME_CLASS_MISSING,
                claim_problem=CLAIM_PROBLEM,
                pod=CRASHING_POD,
            ),
            REFUSAL.reason,
            id="refusal-beats-everything",
        ),
        pytest.param(
            HostObservation(
                expired=True,
                egress_error=EGRESS_ERROR,
                runtime_class_missing=RUNTIME_CLASS_MISSING,
                claim_problem=CLAIM_PROBLEM,
            ),
            Reason.EXPIRED,
            id="expiry-beats-egress-and-infrastructure",
        ),
        pytest.param(
            HostObservation(expired=True, pod=CRASHING_POD), Reason.EXPIRED, id="expiry-beats-pod-failure"
        ),
        pytest.param(
            HostObservation(
                egress_error=EGRESS_ERROR,
                runtime_class_missing=RUNTIME_CLASS_MISSING,
                claim_problem=CLAIM_PROBLEM,
            ),
            Reason.DNS_RESOLUTION_FAILED,
            id="egress-without-pod-beats-infrastructure",
        ),
        pytest.param(
            HostObservation(
                egress_error=EGRESS_ERROR, runtime_class_missing=RUNTIME_CLASS_MISSING, pod=READY_POD
            ),
            Reason.RUNTIME_CLASS_NOT_FOUND,
            id="infrastructure-beats-egress-with-pod",
        ),
        pytest.param(
            HostObservation(runtime_class_missing=RUNTIME_CLASS_MISSING, claim_problem=CLAIM_PROBLEM),
            Reason.RUNTIME_CLASS_NOT_FOUND,
            id="runtime-class-beats-claim",
        ),
        pytest.param(
            HostObservation(claim_problem=CLAIM_PROBLEM, pod=CRASHING_POD),
            Reason.PVC_NOT_BOUND,
            id="claim-beats-pod-failure",
        ),
        pytest.param(
            HostObservation(egress_error=EGRESS_ERROR, pod=CRASHING_POD),
            Reason.CRASH_LOOP_BACK_OFF,
            id="pod-failure-beats-egress-with-pod",
        ),
    ],
)
def test_first_failing_check_names_ready_reason(observation: HostObservation, reason: Reason) -> None:
    assert ready_of(observation).reason == reason
