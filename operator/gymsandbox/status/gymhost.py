"""GymHost conditions from one observation of the world; the first failing check names Ready's reason."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gymsandbox.api.conditions import ConditionType, FailureKind, Reason
from gymsandbox.policy.admission import Refusal
from gymsandbox.status.conditions import ConditionState
from gymsandbox.status.pod import PodFailure, pod_conditions
from gymsandbox.status.progress import progress_conditions


@dataclass(frozen=True)
class HostObservation:
    """Everything the conditions depend on, gathered by the handler before computing."""

    refusal: Refusal | None = None
    expired: bool = False
    egress_error: str | None = None  # why the allowlist could not be resolved, if it could not
    runtime_class_missing: str | None = None  # the RuntimeClass the profile names, when it does not exist
    claim_problem: str | None = None  # why a PersistentVolumeClaim is unusable, if one is
    pod: Mapping[str, Any] | None = None
    sandbox_error: str | None = None  # the kubelet's FailedCreatePodSandBox message, once the pod is overdue


@dataclass(frozen=True)
class HostVerdict:
    conditions: list[ConditionState]
    failure: PodFailure | None

    @property
    def ready(self) -> bool:
        return any(c.type == ConditionType.READY and c.status for c in self.conditions)


def _verdict(
    accepted: ConditionState,
    egress: ConditionState,
    scheduled: ConditionState,
    ready: ConditionState,
    failure: PodFailure | None = None,
) -> HostVerdict:
    return HostVerdict([accepted, egress, scheduled, ready, *progress_conditions(ready, failure)], failure)


def compute_host_conditions(observed: HostObservation) -> HostVerdict:
    accepted_ok = ConditionState(
        ConditionType.ACCEPTED, True, Reason.ACCEPTED, "the spec passed cluster policy"
    )
    if observed.refusal:
        r = observed.refusal
        return _verdict(
            ConditionState(ConditionType.ACCEPTED, False, r.reason, r.message),
            ConditionState(ConditionType.EGRESS_READY, None, Reason.NOT_ACCEPTED, "the spec was refused"),
            ConditionState(ConditionType.POD_SCHEDULED, None, Reason.NOT_ACCEPTED, "the spec was refused"),
            ConditionState(ConditionType.READY, False, r.reason, r.message),
            PodFailure(FailureKind.POLICY, r.reason, r.message),
        )
    if observed.egress_error:
        egress = ConditionState(
            ConditionType.EGRESS_READY, False, Reason.DNS_RESOLUTION_FAILED, observed.egress_error
        )
    else:
        egress = ConditionState(
            ConditionType.EGRESS_READY,
            True,
            Reason.EGRESS_APPLIED,
            "the NetworkPolicy allows exactly DNS, the broker and the allowlist",
        )
    if observed.expired:
        message = "lifetime.ttlSeconds ran out; the pod was removed"
        return _verdict(
            accepted_ok,
            egress,
            ConditionState(ConditionType.POD_SCHEDULED, False, Reason.EXPIRED, message),
            ConditionState(ConditionType.READY, False, Reason.EXPIRED, message),
        )
    if observed.egress_error and observed.pod is None:
        message = f"the pod waits for its egress policy: {observed.egress_error}"
        return _verdict(
            accepted_ok,
            egress,
            ConditionState(ConditionType.POD_SCHEDULED, False, Reason.EGRESS_NOT_READY, message),
            ConditionState(ConditionType.READY, False, Reason.DNS_RESOLUTION_FAILED, message),
            PodFailure(FailureKind.INFRASTRUCTURE, Reason.DNS_RESOLUTION_FAILED, message),
        )
    for problem, reason in (
        (observed.runtime_class_missing, Reason.RUNTIME_CLASS_NOT_FOUND),
        (observed.claim_problem, Reason.PVC_NOT_BOUND),
    ):
        if problem:
            return _verdict(
                accepted_ok,
                egress,
                ConditionState(ConditionType.POD_SCHEDULED, False, reason, problem),
                ConditionState(ConditionType.READY, False, reason, problem),
                PodFailure(FailureKind.INFRASTRUCTURE, reason, problem),
            )
    if observed.pod is None:
        message = "the pod is being created"
        return _verdict(
            accepted_ok,
            egress,
            ConditionState(ConditionType.POD_SCHEDULED, False, Reason.POD_PENDING, message),
            ConditionState(ConditionType.READY, False, Reason.POD_PENDING, message),
        )
    scheduled, ready, failure = pod_conditions(
        observed.pod, Reason.HOST_READY, "the host serves on its endpoint", observed.sandbox_error
    )
    if ready.status and observed.egress_error:
        ready = ConditionState(ConditionType.READY, False, Reason.EGRESS_NOT_READY, observed.egress_error)
    return _verdict(accepted_ok, egress, scheduled, ready, failure)
