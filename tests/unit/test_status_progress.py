"""Reconciling / Stalled: kstatus's view (Flux fails fast on Stalled=True, waits on Reconciling=True)."""

from __future__ import annotations

import pytest

from gymsandbox.api.conditions import ConditionType, FailureKind, Reason
from gymsandbox.status.conditions import ConditionState
from gymsandbox.status.pod import PodFailure
from gymsandbox.status.progress import progress_conditions


def ready(status: bool | None, reason: Reason, message: str = "detail") -> ConditionState:
    return ConditionState(ConditionType.READY, status, reason, message)


def states(
    ready_state: ConditionState, failure: PodFailure | None = None
) -> dict[str, tuple[bool | None, str]]:
    return {c.type: (c.status, c.message) for c in progress_conditions(ready_state, failure)}


def test_ready_is_neither_reconciling_nor_stalled() -> None:
    assert states(ready(True, Reason.HOST_READY)) == {"Reconciling": (False, ""), "Stalled": (False, "")}


@pytest.mark.parametrize("kind", [FailureKind.POLICY, FailureKind.WORKLOAD])
def test_a_failure_only_a_spec_or_image_change_fixes_is_stalled(kind: FailureKind) -> None:
    failure = PodFailure(kind, Reason.CRASH_LOOP_BACK_OFF, "exit 1")
    assert states(ready(False, Reason.CRASH_LOOP_BACK_OFF, "exit 1"), failure) == {
        "Reconciling": (False, ""),
        "Stalled": (True, "exit 1"),
    }


def test_expiry_is_stalled() -> None:
    assert states(ready(False, Reason.EXPIRED, "ttl passed"))["Stalled"] == (True, "ttl passed")


@pytest.mark.parametrize(
    ("reason", "failure"),
    [
        (Reason.POD_PENDING, None),
        (Reason.QUEUED_CONCURRENCY_LIMIT, None),
        (Reason.UNSCHEDULABLE, PodFailure(FailureKind.INFRASTRUCTURE, Reason.UNSCHEDULABLE, "no node")),
        (Reason.PVC_NOT_BOUND, PodFailure(FailureKind.INFRASTRUCTURE, Reason.PVC_NOT_BOUND, "pending")),
    ],
)
def test_waiting_or_an_infrastructure_problem_is_reconciling(
    reason: Reason, failure: PodFailure | None
) -> None:
    assert states(ready(False, reason, "why"), failure) == {
        "Reconciling": (True, "why"),
        "Stalled": (False, ""),
    }


def test_unknown_ready_is_reconciling() -> None:
    assert states(ready(None, Reason.POD_NOT_READY))["Reconciling"][0] is True


def test_both_carry_readys_reason() -> None:
    assert {c.reason for c in progress_conditions(ready(False, Reason.OOM_KILLED), None)} == {
        Reason.OOM_KILLED
    }
