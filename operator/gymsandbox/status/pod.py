"""What a Pod's status says, read the way a kubelet writes it: ready, still starting, or failed and why."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gymsandbox.api.conditions import ConditionType, FailureKind, Reason
from gymsandbox.status.conditions import ConditionState

IMAGE_PULL_REASONS = frozenset({"ImagePullBackOff", "ErrImagePull", "InvalidImageName", "ErrImageNeverPull"})
UNBOUND_CLAIM_MARKERS = ("unbound immediate PersistentVolumeClaims", "persistentvolumeclaim")
KUBELET_ADMISSION_REASONS = frozenset({"NodeAffinity", "UnexpectedAdmissionError", "NodeShutdown"})
INFRASTRUCTURE_POD_REASONS = {
    "Evicted": Reason.POD_LOST,
    "Preempting": Reason.POD_LOST,
    "NodeLost": Reason.POD_LOST,
    "Shutdown": Reason.POD_LOST,
    "Terminated": Reason.POD_LOST,
}


@dataclass(frozen=True)
class PodFailure:
    kind: FailureKind
    reason: Reason
    message: str
    container: str | None = None  # whose logs explain it


@dataclass(frozen=True)
class PodReading:
    scheduled: bool
    ready: bool
    failure: PodFailure | None
    progress: str  # a short human summary when neither ready nor failed


def _get(obj: Mapping[str, Any] | None, *path: str) -> Any:
    for key in path:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def _condition(pod: Mapping[str, Any], condition_type: str) -> Mapping[str, Any] | None:
    return next((c for c in _get(pod, "status", "conditions") or [] if c.get("type") == condition_type), None)


def _container_failure(status: Mapping[str, Any]) -> PodFailure | None:
    name = status.get("name")
    waiting = _get(status, "state", "waiting") or {}
    terminated = _get(status, "state", "terminated") or {}
    last = _get(status, "lastState", "terminated") or {}
    waiting_reason = waiting.get("reason")
    if waiting_reason in IMAGE_PULL_REASONS:
        return PodFailure(
            FailureKind.INFRASTRUCTURE,
            Reason.IMAGE_PULL_BACK_OFF,
            f"container {name}: {waiting_reason}: {waiting.get('message', '')}".strip(),
            name,
        )
    if waiting_reason == "CreateContainerConfigError":
        return PodFailure(
            FailureKind.WORKLOAD,
            Reason.CONTAINER_CONFIG_ERROR,
            f"container {name}: {waiting.get('message', '')}".strip(),
            name,
        )
    if terminated.get("reason") == "OOMKilled" or (
        waiting_reason == "CrashLoopBackOff" and last.get("reason") == "OOMKilled"
    ):
        return PodFailure(
            FailureKind.WORKLOAD,
            Reason.OOM_KILLED,
            f"container {name} was killed for exceeding its memory limit",
            name,
        )
    if waiting_reason == "CrashLoopBackOff":
        exit_code = last.get("exitCode")
        detail = f" (last exit code {exit_code})" if exit_code is not None else ""
        return PodFailure(
            FailureKind.WORKLOAD, Reason.CRASH_LOOP_BACK_OFF, f"container {name} keeps crashing{detail}", name
        )
    return None


def _pod_failure(pod: Mapping[str, Any]) -> PodFailure | None:
    """A failure the pod reports: a container's, the pod phase's, or the scheduler's."""
    for status in _get(pod, "status", "containerStatuses") or []:
        failure = _container_failure(status)
        if failure:
            return failure
    if _get(pod, "status", "phase") == "Failed":
        pod_reason = _get(pod, "status", "reason") or ""
        message = _get(pod, "status", "message") or "the pod failed"
        # The kubelet refused a pod it cannot host (OutOfcpu, NodeAffinity, ...): not the workload.
        if pod_reason.startswith("OutOf") or pod_reason in KUBELET_ADMISSION_REASONS:
            return PodFailure(FailureKind.INFRASTRUCTURE, Reason.POD_LOST, f"{pod_reason}: {message}")
        if pod_reason in INFRASTRUCTURE_POD_REASONS:
            return PodFailure(FailureKind.INFRASTRUCTURE, INFRASTRUCTURE_POD_REASONS[pod_reason], message)
        return PodFailure(FailureKind.WORKLOAD, Reason.POD_FAILED, message)
    scheduled = _condition(pod, "PodScheduled") or {}
    if scheduled.get("status") == "False" and scheduled.get("reason") == "Unschedulable":
        message = str(scheduled.get("message", ""))
        reason = (
            Reason.PVC_NOT_BOUND if any(m in message for m in UNBOUND_CLAIM_MARKERS) else Reason.UNSCHEDULABLE
        )
        return PodFailure(FailureKind.INFRASTRUCTURE, reason, message)
    return None


def read_pod(pod: Mapping[str, Any]) -> PodReading:
    scheduled = bool(_get(pod, "spec", "nodeName"))
    failure = _pod_failure(pod)
    if failure:
        return PodReading(scheduled, False, failure, failure.message)
    if _get(pod, "metadata", "deletionTimestamp"):
        return PodReading(scheduled, False, None, "the pod is terminating")
    phase = _get(pod, "status", "phase")
    if phase == "Running" and (_condition(pod, "Ready") or {}).get("status") == "True":
        return PodReading(scheduled, True, None, "ready")
    progress = "waiting to be scheduled" if not scheduled else f"pod is {phase or 'Pending'}, not Ready yet"
    return PodReading(scheduled, False, None, progress)


def pod_conditions(
    pod: Mapping[str, Any], ready_reason: Reason, ready_message: str
) -> tuple[ConditionState, ConditionState, PodFailure | None]:
    """PodScheduled and Ready as the pod reports them, with the owner's own reason for Ready=True."""
    reading = read_pod(pod)
    node = (pod.get("spec") or {}).get("nodeName")
    if reading.scheduled:
        scheduled = ConditionState(
            ConditionType.POD_SCHEDULED, True, Reason.SCHEDULED, f"bound to node {node}"
        )
    else:
        reason = reading.failure.reason if reading.failure else Reason.POD_PENDING
        scheduled = ConditionState(ConditionType.POD_SCHEDULED, False, reason, reading.progress)
    if reading.failure:
        ready = ConditionState(ConditionType.READY, False, reading.failure.reason, reading.failure.message)
    elif reading.ready:
        ready = ConditionState(ConditionType.READY, True, ready_reason, ready_message)
    else:
        terminating = bool((pod.get("metadata") or {}).get("deletionTimestamp"))
        reason = Reason.POD_TERMINATING if terminating else Reason.POD_NOT_READY
        ready = ConditionState(ConditionType.READY, False, reason, reading.progress)
    return scheduled, ready, reading.failure
