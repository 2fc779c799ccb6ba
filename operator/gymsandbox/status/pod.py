"""What a Pod's status says, read the way a kubelet writes it: ready, still starting, or failed and why."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
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
# How the kubelet words an eviction for a pod's own ephemeral-storage limit (its eviction manager's messages
# for a container's limit, the pod's total, and an emptyDir's sizeLimit): the sandbox overran what it was
# given, so the failure is its own, whatever the pod's reason ("Evicted") would suggest.
OWN_STORAGE_LIMIT = re.compile(
    r"exceeded its local ephemeral storage limit"
    r"|ephemeral local storage usage exceeds the total limit of containers"
    r"|Usage of EmptyDir volume .* exceeds the limit"
)
# How long a scheduled pod may wait for its sandbox (its network and runtime) before the operator looks at
# the kubelet's events for the reason: gVisor's sandbox takes about 2 s here, runc's well under one.
SANDBOX_GRACE = timedelta(seconds=5)
SANDBOX_EVENT_REASON = "FailedCreatePodSandBox"
# How containerd and CRI-O word a RuntimeClass handler the node has no runtime for.
MISSING_HANDLER = re.compile(r'no runtime for "([^"]+)" is configured|failed to find runtime handler (\S+)')


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
    progress_reason: Reason = Reason.POD_NOT_READY


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


def _node_unreachable(pod: Mapping[str, Any]) -> PodFailure | None:
    """A running pod whose Ready is False while its containers are ready: the node controller wrote that,
    because the pod's node stopped reporting (its kubelet or the node is down). A kubelet never writes the
    pair itself for a pod without readiness gates (and ours have none)."""
    ready, containers = _condition(pod, "Ready") or {}, _condition(pod, "ContainersReady") or {}
    if (
        _get(pod, "status", "phase") != "Running"
        or ready.get("status") != "False"
        or containers.get("status") != "True"
        or _get(pod, "spec", "readinessGates")
    ):
        return None
    since = ready.get("lastTransitionTime") or "just now"
    return PodFailure(
        FailureKind.INFRASTRUCTURE,
        Reason.NODE_UNREACHABLE,
        f"node {_get(pod, 'spec', 'nodeName')} stopped reporting (its kubelet or the node is down), so the"
        f" node controller marked the pod not Ready at {since}; what runs there is unknown until it is back",
    )


def _pod_failure(pod: Mapping[str, Any]) -> PodFailure | None:
    """A failure the pod reports: a container's, the pod phase's, its node's silence, or the scheduler's."""
    for status in _get(pod, "status", "containerStatuses") or []:
        failure = _container_failure(status)
        if failure:
            return failure
    return _phase_failure(pod) or _node_unreachable(pod) or _scheduling_failure(pod)


def _phase_failure(pod: Mapping[str, Any]) -> PodFailure | None:
    if _get(pod, "status", "phase") != "Failed":
        return None
    pod_reason = _get(pod, "status", "reason") or ""
    message = _get(pod, "status", "message") or "the pod failed"
    # The kubelet refused a pod it cannot host (OutOfcpu, NodeAffinity, ...): not the workload.
    if pod_reason.startswith("OutOf") or pod_reason in KUBELET_ADMISSION_REASONS:
        return PodFailure(FailureKind.INFRASTRUCTURE, Reason.POD_LOST, f"{pod_reason}: {message}")
    if pod_reason == "Evicted" and OWN_STORAGE_LIMIT.search(message):
        return PodFailure(FailureKind.WORKLOAD, Reason.STORAGE_LIMIT_EXCEEDED, message)
    if pod_reason in INFRASTRUCTURE_POD_REASONS:
        return PodFailure(FailureKind.INFRASTRUCTURE, INFRASTRUCTURE_POD_REASONS[pod_reason], message)
    return PodFailure(FailureKind.WORKLOAD, Reason.POD_FAILED, message)


def _scheduling_failure(pod: Mapping[str, Any]) -> PodFailure | None:
    scheduled = _condition(pod, "PodScheduled") or {}
    if scheduled.get("status") != "False" or scheduled.get("reason") != "Unschedulable":
        return None
    message = str(scheduled.get("message", ""))
    reason = (
        Reason.PVC_NOT_BOUND if any(m in message for m in UNBOUND_CLAIM_MARKERS) else Reason.UNSCHEDULABLE
    )
    return PodFailure(FailureKind.INFRASTRUCTURE, reason, message)


def sandbox_overdue(pod: Mapping[str, Any], moment: datetime) -> bool:
    """Scheduled, and the kubelet has not made its sandbox for longer than SANDBOX_GRACE: time to ask the
    kubelet's events why. (Only then, so a normal start costs no extra read.)"""
    waiting = _condition(pod, "PodReadyToStartContainers") or {}
    since = waiting.get("lastTransitionTime")
    return (
        bool(_get(pod, "spec", "nodeName"))
        and not _get(pod, "metadata", "deletionTimestamp")
        and _get(pod, "status", "phase") == "Pending"
        and waiting.get("status") == "False"
        and isinstance(since, str)
        and moment - datetime.fromisoformat(since.replace("Z", "+00:00")) >= SANDBOX_GRACE
    )


def _sandbox_failure(sandbox_error: str) -> PodFailure | None:
    """A handler the node lacks never heals by itself; other sandbox errors (CNI, a busy runtime) may."""
    missing = MISSING_HANDLER.search(sandbox_error)
    if missing is None:
        return None
    handler = missing.group(1) or missing.group(2)
    return PodFailure(
        FailureKind.INFRASTRUCTURE,
        Reason.RUNTIME_HANDLER_MISSING,
        f"the node has no runtime for handler {handler!r} of the pod's RuntimeClass;"
        f" the kubelet says: {sandbox_error}",
    )


def read_pod(pod: Mapping[str, Any], sandbox_error: str | None = None) -> PodReading:
    """`sandbox_error` is the kubelet's latest FailedCreatePodSandBox message, read when sandbox_overdue."""
    scheduled = bool(_get(pod, "spec", "nodeName"))
    failure = _pod_failure(pod) or (_sandbox_failure(sandbox_error) if sandbox_error else None)
    if failure:
        return PodReading(scheduled, False, failure, failure.message)
    if _get(pod, "metadata", "deletionTimestamp"):
        return PodReading(scheduled, False, None, "the pod is terminating")
    if sandbox_error:
        message = f"the node cannot create the pod's sandbox yet: {sandbox_error}"
        return PodReading(scheduled, False, None, message, Reason.POD_SANDBOX_FAILED)
    phase = _get(pod, "status", "phase")
    if phase == "Running" and (_condition(pod, "Ready") or {}).get("status") == "True":
        return PodReading(scheduled, True, None, "ready")
    progress = "waiting to be scheduled" if not scheduled else f"pod is {phase or 'Pending'}, not Ready yet"
    return PodReading(scheduled, False, None, progress)


def pod_conditions(
    pod: Mapping[str, Any], ready_reason: Reason, ready_message: str, sandbox_error: str | None = None
) -> tuple[ConditionState, ConditionState, PodFailure | None]:
    """PodScheduled and Ready as the pod reports them, with the owner's own reason for Ready=True."""
    reading = read_pod(pod, sandbox_error)
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
        reason = Reason.POD_TERMINATING if terminating else reading.progress_reason
        ready = ConditionState(ConditionType.READY, False, reason, reading.progress)
    return scheduled, ready, reading.failure
