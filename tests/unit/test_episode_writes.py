"""Which episode events reconcile, and which status changes wait: an episode whose pod starts at once costs
two status writes (its admission, then Ready), its progress in between is written only once it lasts."""

from __future__ import annotations

from typing import Any

from gymsandbox.api.conditions import ConditionType, FailureKind, Reason
from gymsandbox.handlers.common import needs_reconcile
from gymsandbox.handlers.episode import progress_only
from gymsandbox.status.conditions import ConditionState
from gymsandbox.status.episode import EpisodeVerdict
from gymsandbox.status.pod import PodFailure


def conditions(ready: str, scheduled: str = "False", stalled: str = "False") -> list[dict[str, Any]]:
    return [
        {"type": ConditionType.ADMITTED, "status": "True"},
        {"type": ConditionType.POD_SCHEDULED, "status": scheduled},
        {"type": ConditionType.READY, "status": ready},
        {"type": ConditionType.STALLED, "status": stalled},
    ]


def verdict(failure: PodFailure | None = None) -> EpisodeVerdict:
    return EpisodeVerdict([ConditionState(ConditionType.READY, False, Reason.POD_PENDING)], failure)


def status(ready: str = "False", **fields: Any) -> dict[str, Any]:
    scheduled, stalled = fields.pop("scheduled", "False"), fields.pop("stalled", "False")
    return {"podName": "ep-sandbox", "conditions": conditions(ready, scheduled, stalled), **fields}


def test_a_pod_on_its_way_is_progress_only() -> None:
    assert progress_only(status(), status(scheduled="True"), verdict())


def test_ready_a_failure_or_a_stall_is_written_at_once() -> None:
    assert not progress_only(status(), status("True", scheduled="True"), verdict())
    failure = PodFailure(FailureKind.WORKLOAD, Reason.CRASH_LOOP_BACK_OFF, "crashed")
    assert not progress_only(status(), status(), verdict(failure))
    assert not progress_only(status(), status(stalled="True"), verdict())
    assert not progress_only(status(failure={"reason": "X"}), status(), verdict())  # a failure cleared
    assert not progress_only(status("True"), status(), verdict())  # Ready lost


def test_a_new_pod_name_is_written_at_once() -> None:
    assert not progress_only(status(podName=None), status(), verdict())


def body(generation: int, observed: int | None) -> dict[str, Any]:
    return {"metadata": {"generation": generation}, "status": {"observedGeneration": observed}}


def test_creations_listings_and_new_specs_reconcile_own_status_writes_do_not() -> None:
    assert needs_reconcile(body(1, None), "ADDED")
    assert needs_reconcile(body(1, 1), None)  # the listing at start: adopt it
    assert needs_reconcile(body(2, 1), "MODIFIED")  # a renewal
    assert not needs_reconcile(body(2, 2), "MODIFIED")  # the operator's (or the broker's) status write
