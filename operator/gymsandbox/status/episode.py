"""EpisodeSandbox conditions from one observation; the first failing check names Ready's reason."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gymsandbox.api.conditions import ConditionType, FailureKind, Reason
from gymsandbox.policy.admission import Refusal
from gymsandbox.status.conditions import ConditionState
from gymsandbox.status.pod import PodFailure, pod_conditions
from gymsandbox.status.progress import progress_conditions

# Refusals that depend on the host rather than the episode's own spec: infrastructure, not policy.
# Refusals that are not the episode spec's fault: no usable host, or DNS not answering (as for a GymHost).
INFRASTRUCTURE_REFUSALS = frozenset(
    {Reason.HOST_NOT_FOUND, Reason.HOST_NOT_READY, Reason.DNS_RESOLUTION_FAILED}
)


# Ready reasons that come from the episode itself, not from its pod.
EPISODE_OWN_REASONS = frozenset(
    {
        Reason.EXPIRED,
        Reason.TTL_OVER_CAP,
        Reason.EGRESS_INVALID,
        Reason.CHILD_CONFLICT,
        *INFRASTRUCTURE_REFUSALS,
    }
)


@dataclass(frozen=True)
class EpisodeObservation:
    refusal: Refusal | None = None
    admitted: bool = False
    queue_position: int | None = None
    timed_out: bool = False
    expired: bool = False
    runtime_class_missing: str | None = None
    pod: Mapping[str, Any] | None = None
    sandbox_error: str | None = None  # the kubelet's FailedCreatePodSandBox message, once the pod is overdue


@dataclass(frozen=True)
class EpisodeVerdict:
    conditions: list[ConditionState]
    failure: PodFailure | None


def _verdict(
    admitted: ConditionState,
    scheduled: ConditionState,
    ready: ConditionState,
    failure: PodFailure | None = None,
) -> EpisodeVerdict:
    return EpisodeVerdict([admitted, scheduled, ready, *progress_conditions(ready, failure)], failure)


def _waiting(reason: Reason, message: str) -> ConditionState:
    return ConditionState(ConditionType.POD_SCHEDULED, None, reason, message)


def compute_episode_conditions(observed: EpisodeObservation) -> EpisodeVerdict:
    return _before_admission(observed) or _after_admission(observed)


def _before_admission(observed: EpisodeObservation) -> EpisodeVerdict | None:
    """Refused, given up, or waiting for a slot; None once admitted."""
    if observed.refusal:
        r = observed.refusal
        kind = FailureKind.INFRASTRUCTURE if r.reason in INFRASTRUCTURE_REFUSALS else FailureKind.POLICY
        return _verdict(
            ConditionState(ConditionType.ADMITTED, False, r.reason, r.message),
            _waiting(Reason.NOT_ACCEPTED, "the episode was not admitted"),
            ConditionState(ConditionType.READY, False, r.reason, r.message),
            PodFailure(kind, r.reason, r.message),
        )
    if observed.timed_out:
        message = "no concurrency slot became free within admissionTimeoutSeconds"
        return _verdict(
            ConditionState(ConditionType.ADMITTED, False, Reason.ADMISSION_TIMEOUT, message),
            _waiting(Reason.ADMISSION_TIMEOUT, message),
            ConditionState(ConditionType.READY, False, Reason.ADMISSION_TIMEOUT, message),
            PodFailure(FailureKind.POLICY, Reason.ADMISSION_TIMEOUT, message),
        )
    if not observed.admitted:
        message = f"waiting for a concurrency slot of its host (position {observed.queue_position or '?'})"
        return _verdict(
            ConditionState(ConditionType.ADMITTED, False, Reason.QUEUED_CONCURRENCY_LIMIT, message),
            _waiting(Reason.QUEUED_CONCURRENCY_LIMIT, message),
            ConditionState(ConditionType.READY, False, Reason.QUEUED_CONCURRENCY_LIMIT, message),
        )
    return None


def _after_admission(observed: EpisodeObservation) -> EpisodeVerdict:
    admitted = ConditionState(
        ConditionType.ADMITTED, True, Reason.ADMITTED, "the episode holds a concurrency slot"
    )
    if observed.expired:
        message = "lifetime.ttlSeconds ran out; the episode is being reaped"
        return _verdict(
            admitted,
            ConditionState(ConditionType.POD_SCHEDULED, False, Reason.EXPIRED, message),
            ConditionState(ConditionType.READY, False, Reason.EXPIRED, message),
        )
    if observed.runtime_class_missing:
        problem = observed.runtime_class_missing
        return _verdict(
            admitted,
            ConditionState(ConditionType.POD_SCHEDULED, False, Reason.RUNTIME_CLASS_NOT_FOUND, problem),
            ConditionState(ConditionType.READY, False, Reason.RUNTIME_CLASS_NOT_FOUND, problem),
            PodFailure(FailureKind.INFRASTRUCTURE, Reason.RUNTIME_CLASS_NOT_FOUND, problem),
        )
    if observed.pod is None:
        message = "the sandbox pod is being created"
        return _verdict(
            admitted,
            ConditionState(ConditionType.POD_SCHEDULED, False, Reason.POD_PENDING, message),
            ConditionState(ConditionType.READY, False, Reason.POD_PENDING, message),
        )
    scheduled, ready, failure = pod_conditions(
        observed.pod, Reason.SANDBOX_READY, "the sandbox is running", observed.sandbox_error
    )
    return _verdict(admitted, scheduled, ready, failure)


def ready_is_stale(stored: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
    """Whether an admitted episode's stored Ready condition (status and reason) differs from what its pod,
    as just listed, says: a pod event the operator missed (lost in an API outage, say) leaves exactly this.
    Only the pod's part is compared; the episode's own states (expired, refused) are not the pod's to say."""
    conditions: list[Mapping[str, Any]] = stored.get("conditions") or []
    ready = next((c for c in conditions if c.get("type") == ConditionType.READY), {})
    if ready.get("reason") in EPISODE_OWN_REASONS:
        return False
    _, expected, _ = pod_conditions(pod, Reason.SANDBOX_READY, "")
    return (ready.get("status"), ready.get("reason")) != (expected.status_text, expected.reason)
