"""read_pod on pods shaped the way the scheduler and the kubelet write them."""

from __future__ import annotations

import copy
from datetime import datetime, timedelta
from typing import Any

import pytest

from gymsandbox.api.conditions import FailureKind, Reason
from gymsandbox.status.pod import PodFailure, read_pod, sandbox_overdue

T0 = "2024-05-01T10:00:00Z"
T1 = "2024-05-01T10:00:07Z"
IMAGE = "registry.example.com/gym/swe-env:1.4.2"


def _condition(
    condition_type: str, status: str, reason: str | None = None, message: str | None = None
) -> dict[str, Any]:
    condition: dict[str, Any] = {
        "type": condition_type,
        "status": status,
        "lastProbeTime": None,
        "lastTransitionTime": T0,
    }
    if reason:
        condition["reason"] = reason
    if message:
        condition["message"] = message
    return condition


def _base_pod() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "swe-gym-run-1-host",
            "namespace": "evals",
            "uid": "8d3c2f7e-2b6a-4c3e-9a63-3c1f2f0f4b11",
            "resourceVersion": "48213",
            "creationTimestamp": T0,
            "labels": {"app.kubernetes.io/component": "gymhost", "gymsandbox.dev/gymhost": "swe-gym-run-1"},
        },
        "spec": {
            "containers": [{"name": "gym", "image": IMAGE}],
            "runtimeClassName": "kata-qemu",
            "schedulerName": "default-scheduler",
        },
        "status": {"phase": "Pending", "qosClass": "Guaranteed"},
    }


def _container_status(
    *, ready: bool, state: dict[str, Any], last_state: dict[str, Any] | None = None, restarts: int = 0
) -> dict[str, Any]:
    return {
        "name": "gym",
        "image": IMAGE,
        "imageID": "" if "waiting" in state and restarts == 0 else f"{IMAGE}@sha256:{'a' * 64}",
        "ready": ready,
        "started": "running" in state,
        "restartCount": restarts,
        "state": state,
        "lastState": last_state or {},
    }


def scheduled_pod(
    phase: str,
    *,
    ready: bool,
    state: dict[str, Any],
    last_state: dict[str, Any] | None = None,
    restarts: int = 0,
) -> dict[str, Any]:
    pod = _base_pod()
    pod["spec"]["nodeName"] = "kata-node-1"
    pod["status"].update(
        {
            "phase": phase,
            "hostIP": "10.0.0.12",
            "podIP": "10.244.1.17",
            "podIPs": [{"ip": "10.244.1.17"}],
            "startTime": T0,
            "conditions": [
                _condition("PodReadyToStartContainers", "True"),
                _condition("Initialized", "True"),
                _condition("Ready", "True" if ready else "False", None if ready else "ContainersNotReady"),
                _condition(
                    "ContainersReady", "True" if ready else "False", None if ready else "ContainersNotReady"
                ),
                _condition("PodScheduled", "True"),
            ],
            "containerStatuses": [
                _container_status(ready=ready, state=state, last_state=last_state, restarts=restarts)
            ],
        }
    )
    return pod


def running_ready_pod() -> dict[str, Any]:
    return scheduled_pod("Running", ready=True, state={"running": {"startedAt": T1}})


def unschedulable_pod(message: str) -> dict[str, Any]:
    pod = _base_pod()
    pod["status"]["conditions"] = [_condition("PodScheduled", "False", "Unschedulable", message)]
    return pod


def waiting_pod(reason: str, message: str) -> dict[str, Any]:
    return scheduled_pod("Pending", ready=False, state={"waiting": {"reason": reason, "message": message}})


def crash_loop_pod(last_terminated: dict[str, Any]) -> dict[str, Any]:
    return scheduled_pod(
        "Running",
        ready=False,
        state={
            "waiting": {
                "reason": "CrashLoopBackOff",
                "message": "back-off 40s restarting failed container=gym"
                " pod=swe-gym-run-1-host_evals(8d3c2f7e)",
            }
        },
        last_state={
            "terminated": {
                "containerID": "containerd://" + "b" * 64,
                "startedAt": T0,
                "finishedAt": T1,
                **last_terminated,
            }
        },
        restarts=3,
    )


def failed_pod(reason: str | None, message: str | None) -> dict[str, Any]:
    pod = scheduled_pod(
        "Failed",
        ready=False,
        state={"terminated": {"exitCode": 137, "reason": "Error", "startedAt": T0, "finishedAt": T1}},
    )
    if reason:
        pod["status"]["reason"] = reason
    if message:
        pod["status"]["message"] = message
    return pod


PVC_MESSAGE = (
    "0/2 nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: 0/2 nodes are"
    " available: 2 Preemption is not helpful for scheduling."
)
AFFINITY_MESSAGE = (
    "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector. preemption: 0/3 nodes are"
    " available: 3 Preemption is not helpful for scheduling."
)
EVICTED_MESSAGE = (
    "The node was low on resource: ephemeral-storage. Threshold quantity: 10Gi, available: 9Gi. Container gym"
    " was using 12Gi, request is 10Gi, has larger consumption of ephemeral-storage."
)


def failure_of(pod: dict[str, Any]) -> PodFailure:
    failure = read_pod(pod).failure
    assert failure is not None
    return failure


# --- running ------------------------------------------------------------------------------------------------


def test_running_and_ready_pod_is_ready() -> None:
    reading = read_pod(running_ready_pod())
    assert (reading.scheduled, reading.ready, reading.failure) == (True, True, None)


def test_running_pod_with_failing_readiness_probe_is_not_ready_and_not_failed() -> None:
    reading = read_pod(scheduled_pod("Running", ready=False, state={"running": {"startedAt": T1}}))
    assert (reading.scheduled, reading.ready, reading.failure) == (True, False, None)


def test_container_creating_pod_is_scheduled_but_not_ready_and_not_failed() -> None:
    reading = read_pod(waiting_pod("ContainerCreating", ""))
    assert (reading.scheduled, reading.ready, reading.failure) == (True, False, None)


def test_freshly_created_pod_is_neither_scheduled_nor_failed() -> None:
    reading = read_pod(_base_pod())
    assert (reading.scheduled, reading.ready, reading.failure) == (False, False, None)


# --- scheduling ---------------------------------------------------------------------------------------------


def test_unbound_claim_is_persistent_volume_claim_not_bound() -> None:
    assert failure_of(unschedulable_pod(PVC_MESSAGE)).reason == Reason.PVC_NOT_BOUND


def test_unbound_claim_is_an_infrastructure_failure() -> None:
    assert failure_of(unschedulable_pod(PVC_MESSAGE)).kind == FailureKind.INFRASTRUCTURE


def test_missing_claim_is_persistent_volume_claim_not_bound() -> None:
    message = '0/2 nodes are available: persistentvolumeclaim "gym-storage" not found.'
    assert failure_of(unschedulable_pod(message)).reason == Reason.PVC_NOT_BOUND


def test_unschedulable_pod_keeps_the_scheduler_message() -> None:
    assert failure_of(unschedulable_pod(PVC_MESSAGE)).message == PVC_MESSAGE


@pytest.mark.parametrize(
    "message",
    [
        AFFINITY_MESSAGE,
        "0/2 nodes are available: 2 Insufficient nvidia.com/gpu. preemption: 0/2 nodes are available.",
        "0/4 nodes are available: 1 node(s) had untolerated taint {gymsandbox.dev/runtime: kata},"
        " 3 Insufficient cpu.",
    ],
)
def test_other_unschedulable_pod_is_unschedulable_infrastructure(message: str) -> None:
    failure = failure_of(unschedulable_pod(message))
    assert (failure.kind, failure.reason) == (FailureKind.INFRASTRUCTURE, Reason.UNSCHEDULABLE)


def test_unschedulable_pod_is_not_scheduled() -> None:
    assert read_pod(unschedulable_pod(AFFINITY_MESSAGE)).scheduled is False


# --- containers ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reason", "message"),
    [
        ("ImagePullBackOff", f'Back-off pulling image "{IMAGE}"'),
        ("ErrImagePull", f'failed to pull and unpack image "{IMAGE}": not found'),
    ],
)
def test_image_pull_problem_is_image_pull_back_off_infrastructure(reason: str, message: str) -> None:
    failure = failure_of(waiting_pod(reason, message))
    assert (failure.kind, failure.reason, failure.container) == (
        FailureKind.INFRASTRUCTURE,
        Reason.IMAGE_PULL_BACK_OFF,
        "gym",
    )


def test_image_pull_failure_message_carries_the_kubelet_reason() -> None:
    assert "ErrImagePull" in failure_of(waiting_pod("ErrImagePull", "not found")).message


def test_crash_loop_is_crash_loop_back_off_workload() -> None:
    failure = failure_of(crash_loop_pod({"exitCode": 1, "reason": "Error"}))
    assert (failure.kind, failure.reason, failure.container) == (
        FailureKind.WORKLOAD,
        Reason.CRASH_LOOP_BACK_OFF,
        "gym",
    )


@pytest.mark.parametrize("exit_code", [1, 2, 139])
def test_crash_loop_message_names_the_last_exit_code(exit_code: int) -> None:
    failure = failure_of(crash_loop_pod({"exitCode": exit_code, "reason": "Error"}))
    assert f"exit code {exit_code}" in failure.message


def test_crash_loop_after_an_oom_kill_is_oom_killed() -> None:
    failure = failure_of(crash_loop_pod({"exitCode": 137, "reason": "OOMKilled"}))
    assert (failure.kind, failure.reason) == (FailureKind.WORKLOAD, Reason.OOM_KILLED)


def test_container_just_oom_killed_is_oom_killed() -> None:
    pod = scheduled_pod(
        "Running",
        ready=False,
        state={"terminated": {"exitCode": 137, "reason": "OOMKilled", "startedAt": T0, "finishedAt": T1}},
    )
    assert failure_of(pod).reason == Reason.OOM_KILLED


def test_container_config_error_is_a_workload_failure() -> None:
    failure = failure_of(waiting_pod("CreateContainerConfigError", 'secret "openai-credentials" not found'))
    assert (failure.kind, failure.reason) == (FailureKind.WORKLOAD, Reason.CONTAINER_CONFIG_ERROR)


def test_failing_container_makes_the_pod_not_ready() -> None:
    assert read_pod(crash_loop_pod({"exitCode": 1, "reason": "Error"})).ready is False


# --- pod phase ----------------------------------------------------------------------------------------------


def test_evicted_pod_is_pod_lost_infrastructure() -> None:
    failure = failure_of(failed_pod("Evicted", EVICTED_MESSAGE))
    assert (failure.kind, failure.reason) == (FailureKind.INFRASTRUCTURE, Reason.POD_LOST)


@pytest.mark.parametrize(
    "message",
    [
        'Container sandbox exceeded its local ephemeral storage limit "1Gi". ',
        "Pod ephemeral local storage usage exceeds the total limit of containers 1Gi. ",
        'Usage of EmptyDir volume "tmp" exceeds the limit "256Mi". ',
    ],
    ids=["container-limit", "pod-total", "emptydir-limit"],
)
def test_a_pod_evicted_for_its_own_storage_limit_failed_by_its_own_doing(message: str) -> None:
    """A sandbox that fills its own disk must not pass for lost to infrastructure (which trainers mask)."""
    failure = failure_of(failed_pod("Evicted", message))
    assert (failure.kind, failure.reason) == (FailureKind.WORKLOAD, Reason.STORAGE_LIMIT_EXCEEDED)
    assert failure.message == message


def test_evicted_pod_keeps_the_kubelet_message() -> None:
    assert failure_of(failed_pod("Evicted", EVICTED_MESSAGE)).message == EVICTED_MESSAGE


@pytest.mark.parametrize("reason", ["NodeLost", "Shutdown", "Terminated", "Preempting"])
def test_pod_lost_with_its_node_is_pod_lost_infrastructure(reason: str) -> None:
    failure = failure_of(failed_pod(reason, "lost"))
    assert (failure.kind, failure.reason) == (FailureKind.INFRASTRUCTURE, Reason.POD_LOST)


def unreachable_pod(**spec: Any) -> dict[str, Any]:
    """A running pod as the node controller leaves it when the node's lease went stale: Ready False, with the
    kubelet's own ContainersReady (and container statuses) still True."""
    pod = running_ready_pod()
    pod["spec"].update(spec)
    for condition in pod["status"]["conditions"]:
        if condition["type"] == "Ready":
            condition.update(status="False", lastTransitionTime=T1)
    return pod


def test_a_pod_whose_node_stopped_reporting_is_node_unreachable_infrastructure() -> None:
    failure = failure_of(unreachable_pod())
    assert (failure.kind, failure.reason) == (FailureKind.INFRASTRUCTURE, Reason.NODE_UNREACHABLE)
    assert "node kata-node-1 stopped reporting" in failure.message
    assert f"marked the pod not Ready at {T1}" in failure.message


def test_not_ready_with_readiness_gates_or_unready_containers_is_no_node_loss() -> None:
    gated = unreachable_pod(readinessGates=[{"conditionType": "example.com/warm"}])
    assert read_pod(gated).failure is None
    starting = unreachable_pod()
    for condition in starting["status"]["conditions"]:
        if condition["type"] == "ContainersReady":
            condition["status"] = "False"
    assert read_pod(starting).failure is None


@pytest.mark.parametrize(
    ("reason", "message"), [(None, None), ("DeadlineExceeded", "Pod was active too long")]
)
def test_other_failed_pod_is_pod_failed_workload(reason: str | None, message: str | None) -> None:
    failure = failure_of(failed_pod(reason, message))
    assert (failure.kind, failure.reason) == (FailureKind.WORKLOAD, Reason.POD_FAILED)


def test_failed_pod_without_message_says_it_failed() -> None:
    assert failure_of(failed_pod(None, None)).message == "the pod failed"


# --- termination --------------------------------------------------------------------------------------------


def test_terminating_pod_is_not_ready() -> None:
    pod = copy.deepcopy(running_ready_pod())
    pod["metadata"]["deletionTimestamp"] = T1
    pod["metadata"]["deletionGracePeriodSeconds"] = 10
    assert read_pod(pod).ready is False


def test_terminating_pod_is_not_a_failure() -> None:
    pod = copy.deepcopy(running_ready_pod())
    pod["metadata"]["deletionTimestamp"] = T1
    pod["metadata"]["deletionGracePeriodSeconds"] = 10
    assert read_pod(pod).failure is None


# The kubelet's FailedCreatePodSandBox messages, as containerd and CRI-O word a missing handler.
CONTAINERD_NO_HANDLER = (
    "Failed to create pod sandbox: rpc error: code = Unknown desc = unable to get OCI runtime for sandbox"
    ' "84bf61e2": no runtime for "kata-qemu" is configured'
)
CRIO_NO_HANDLER = (
    "Failed to create pod sandbox: rpc error: code = Unknown desc = failed to find runtime handler kata-qemu"
    " from runtime list map[crun:0xc00047e300 runc:0xc00047ef00]"
)
CNI_NOT_READY = (
    'Failed to create pod sandbox: plugin type="bridge" failed (add): failed to allocate for range 0'
)


def sandboxless_pod(since: str = T0) -> dict[str, Any]:
    """Scheduled, its container waiting in ContainerCreating because the kubelet has no sandbox yet."""
    pod = scheduled_pod("Pending", ready=False, state={"waiting": {"reason": "ContainerCreating"}})
    pod["status"]["conditions"][0] = {
        **_condition("PodReadyToStartContainers", "False"),
        "lastTransitionTime": since,
    }
    return pod


@pytest.mark.parametrize("message", [CONTAINERD_NO_HANDLER, CRIO_NO_HANDLER])
def test_missing_runtime_handler_is_named_infrastructure(message: str) -> None:
    failure = read_pod(sandboxless_pod(), sandbox_error=message).failure
    assert failure is not None
    assert (failure.kind, failure.reason) == (FailureKind.INFRASTRUCTURE, Reason.RUNTIME_HANDLER_MISSING)
    assert "'kata-qemu'" in failure.message


def test_other_sandbox_error_is_progress_with_the_kubelet_words() -> None:
    reading = read_pod(sandboxless_pod(), sandbox_error=CNI_NOT_READY)
    assert reading.failure is None
    assert reading.progress_reason == Reason.POD_SANDBOX_FAILED
    assert "failed to allocate for range 0" in reading.progress


def test_pod_without_sandbox_error_is_plain_not_ready() -> None:
    reading = read_pod(sandboxless_pod())
    assert (reading.failure, reading.progress_reason) == (None, Reason.POD_NOT_READY)


@pytest.mark.parametrize(
    ("pod", "seconds_later", "overdue"),
    [
        (sandboxless_pod(), 4, False),  # within the grace: a normal start
        (sandboxless_pod(), 5, True),
        (waiting_pod("ContainerCreating", ""), 60, False),  # the sandbox exists: containers are starting
        (running_ready_pod(), 60, False),
        (unschedulable_pod("0/3 nodes are available"), 60, False),
    ],
)
def test_sandbox_is_overdue_only_for_a_scheduled_pod_without_one_past_the_grace(
    pod: dict[str, Any], seconds_later: int, overdue: bool
) -> None:
    moment = datetime.fromisoformat(T0.replace("Z", "+00:00")) + timedelta(seconds=seconds_later)
    assert sandbox_overdue(pod, moment) is overdue


def test_terminating_pod_is_never_overdue() -> None:
    pod = sandboxless_pod()
    pod["metadata"]["deletionTimestamp"] = T1
    assert not sandbox_overdue(pod, datetime.fromisoformat("2030-01-01T00:00:00+00:00"))
