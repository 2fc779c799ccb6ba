"""The Argo CD health script: one source of truth in docs/, and each of its answers on small objects."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import pytest
import yaml

from gymsandbox.api.conditions import Reason
from gymsandbox.policy.admission import Refusal
from gymsandbox.status.conditions import ConditionState, merge_conditions
from gymsandbox.status.episode import EpisodeObservation, compute_episode_conditions
from gymsandbox.status.gymhost import HostObservation, compute_host_conditions
from gymsandbox.status.pod import PodFailure
from tests.support.gitops_health import ROOT, SCRIPT, Health, assess

GUIDE = ROOT / "docs" / "gitops.md"
KEYS = {
    "resource.customizations.health.gymsandbox.dev_GymHost",
    "resource.customizations.health.gymsandbox.dev_EpisodeSandbox",
}
WAITING = Health("Progressing", "waiting for the operator")


def argocd_config_maps() -> list[dict[str, Any]]:
    """Every argocd-cm ConfigMap in the guide's YAML code blocks."""
    blocks = re.findall(r"^```ya?ml\n(.*?)^```", GUIDE.read_text(), flags=re.DOTALL | re.MULTILINE)
    documents = [doc for block in blocks for doc in yaml.safe_load_all(block) if isinstance(doc, dict)]
    return [d for d in documents if d.get("kind") == "ConfigMap" and d["metadata"]["name"] == "argocd-cm"]


def test_the_guide_embeds_the_script_verbatim_for_both_kinds() -> None:
    config_maps = argocd_config_maps()
    assert config_maps, "docs/gitops.md has no argocd-cm snippet"
    script = SCRIPT.read_text()
    for config_map in config_maps:
        health = {
            k: v for k, v in config_map["data"].items() if k.startswith("resource.customizations.health.")
        }
        assert set(health) == KEYS
        for key, body in health.items():
            assert body == script, f"{key} in docs/gitops.md differs from {SCRIPT.relative_to(ROOT)}"


def ready(status: str, reason: str, message: str = "some detail") -> dict[str, Any]:
    return {"type": "Ready", "status": status, "reason": reason, "message": message, "observedGeneration": 3}


ACCEPTED = {"type": "Accepted", "status": "True", "reason": "Accepted", "message": "ok"}


def host(status: dict[str, Any] | None, generation: int = 3, kind: str = "GymHost") -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "gymsandbox.dev/v1alpha1",
        "kind": kind,
        "metadata": {"name": "h", "namespace": "evals", "generation": generation},
        "spec": {"image": "registry.example.com/gym/swe-env:1.4.2"},
    }
    if status is not None:
        obj["status"] = status
    return obj


def observed(*conditions: dict[str, Any], failure: dict[str, str] | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"observedGeneration": 3, "conditions": [ACCEPTED, *conditions]}
    if failure:
        status["failure"] = failure
    return status


def failure(kind: str, reason: str) -> dict[str, str]:
    return {"kind": kind, "reason": reason, "message": "some detail"}


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        pytest.param(host(None), WAITING, id="no-status-yet"),
        pytest.param(host({"episodes": {"active": 0, "queued": 0}}), WAITING, id="no-observed-generation"),
        pytest.param(
            host(observed(ready("True", "HostReady")), generation=4), WAITING, id="spec-change-not-observed"
        ),
        pytest.param(host({"observedGeneration": 3}), WAITING, id="no-conditions"),
        pytest.param(host(observed()), WAITING, id="no-ready-condition"),
        pytest.param(
            host(observed(ready("True", "HostReady", "the host serves on its endpoint"))),
            Health("Healthy", "HostReady: the host serves on its endpoint"),
            id="host-ready",
        ),
        pytest.param(
            host(observed(ready("True", "SandboxReady")), kind="EpisodeSandbox"),
            Health("Healthy", "SandboxReady: some detail"),
            id="episode-ready",
        ),
        pytest.param(
            host(
                observed(
                    ready("False", "ImageNotApproved", 'image "docker.io/evil:1" is not approved'),
                    failure=failure("Policy", "ImageNotApproved"),
                )
            ),
            Health("Degraded", 'ImageNotApproved: image "docker.io/evil:1" is not approved'),
            id="refused-by-policy",
        ),
        pytest.param(
            host(
                observed(ready("False", "CrashLoopBackOff"), failure=failure("Workload", "CrashLoopBackOff"))
            ),
            Health("Degraded", "CrashLoopBackOff: some detail"),
            id="workload-fails",
        ),
        pytest.param(
            host(
                observed(ready("False", "AdmissionTimeout"), failure=failure("Policy", "AdmissionTimeout")),
                kind="EpisodeSandbox",
            ),
            Health("Degraded", "AdmissionTimeout: some detail"),
            id="episode-gave-up-waiting",
        ),
        pytest.param(
            host(observed(ready("False", "Expired"))),
            Health("Degraded", "Expired: some detail"),
            id="expired",
        ),
        pytest.param(
            host(
                observed(ready("False", "Unschedulable"), failure=failure("Infrastructure", "Unschedulable"))
            ),
            Health("Progressing", "Unschedulable: some detail"),
            id="waiting-on-the-cluster",
        ),
        pytest.param(
            host(observed(ready("False", "PodNotReady"))),
            Health("Progressing", "PodNotReady: some detail"),
            id="starting",
        ),
        pytest.param(
            host(observed(ready("False", "QueuedConcurrencyLimit")), kind="EpisodeSandbox"),
            Health("Progressing", "QueuedConcurrencyLimit: some detail"),
            id="episode-queued",
        ),
        pytest.param(
            host(observed(ready("Unknown", "PodPending"))),
            Health("Progressing", "PodPending: some detail"),
            id="ready-unknown",
        ),
        pytest.param(
            host(observed({"type": "Ready", "status": "False", "reason": "PodPending"})),
            Health("Progressing", "PodPending: "),
            id="no-message",
        ),
    ],
)
def test_health_of_hand_written_objects(obj: dict[str, Any], expected: Health) -> None:
    assert assess(obj) == expected


# The same rule over statuses built by the operator's own code, so a renamed field or kind shows up here.
NOW = datetime(2024, 5, 1, 10, 0, tzinfo=UTC)
RUNNING = {"spec": {"nodeName": "kwok-kata-0"}, "status": {"phase": "Running"}}
READY_POD = {**RUNNING, "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
CRASHING_POD = {
    **RUNNING,
    "status": {
        "phase": "Running",
        "containerStatuses": [{"name": "gym", "state": {"waiting": {"reason": "CrashLoopBackOff"}}}],
    },
}
REFUSED = Refusal(Reason.IMAGE_NOT_APPROVED, "not approved")
HOST_MISSING = Refusal(Reason.HOST_NOT_FOUND, "GymHost h does not exist")
DNS_DOWN = Refusal(Reason.DNS_RESOLUTION_FAILED, "cannot resolve x.example.com")


def live(kind: str, conditions: list[ConditionState], failed: PodFailure | None) -> dict[str, Any]:
    status: dict[str, Any] = {"observedGeneration": 3, "conditions": merge_conditions([], conditions, 3, NOW)}
    if failed:
        status["failure"] = {
            "kind": str(failed.kind),
            "reason": str(failed.reason),
            "message": failed.message,
        }
    return host(status, kind=kind)


@pytest.mark.parametrize(
    ("observation", "expected"),
    [
        pytest.param(HostObservation(pod=READY_POD), "Healthy", id="ready"),
        pytest.param(HostObservation(refusal=REFUSED), "Degraded", id="refused"),
        pytest.param(HostObservation(pod=CRASHING_POD), "Degraded", id="crash-loop"),
        pytest.param(HostObservation(expired=True), "Degraded", id="expired"),
        pytest.param(HostObservation(), "Progressing", id="pod-not-created-yet"),
        pytest.param(HostObservation(pod=RUNNING), "Progressing", id="pod-not-ready"),
        pytest.param(HostObservation(claim_problem="gym-storage is Pending"), "Progressing", id="claim"),
        pytest.param(HostObservation(runtime_class_missing="no kata-qemu"), "Progressing", id="runtime"),
        pytest.param(HostObservation(egress_error="cannot resolve x.example.com"), "Progressing", id="dns"),
    ],
)
def test_health_of_host_statuses_the_operator_computes(observation: HostObservation, expected: str) -> None:
    verdict = compute_host_conditions(observation)
    assert assess(live("GymHost", verdict.conditions, verdict.failure)).status == expected
    # kstatus (Flux) draws the same line through the Stalled condition.
    assert {c.type: c.status for c in verdict.conditions}["Stalled"] is (expected == "Degraded")


@pytest.mark.parametrize(
    ("observation", "expected"),
    [
        pytest.param(EpisodeObservation(admitted=True, pod=READY_POD), "Healthy", id="ready"),
        pytest.param(EpisodeObservation(refusal=REFUSED), "Degraded", id="refused"),
        pytest.param(EpisodeObservation(timed_out=True), "Degraded", id="admission-timeout"),
        pytest.param(EpisodeObservation(admitted=True, pod=CRASHING_POD), "Degraded", id="crash-loop"),
        pytest.param(EpisodeObservation(admitted=True, expired=True), "Degraded", id="expired"),
        pytest.param(EpisodeObservation(queue_position=2), "Progressing", id="queued"),
        pytest.param(EpisodeObservation(refusal=HOST_MISSING), "Progressing", id="host-missing"),
        pytest.param(EpisodeObservation(refusal=DNS_DOWN), "Progressing", id="dns"),
        pytest.param(EpisodeObservation(admitted=True), "Progressing", id="pod-not-created-yet"),
    ],
)
def test_health_of_episode_statuses_the_operator_computes(
    observation: EpisodeObservation, expected: str
) -> None:
    verdict = compute_episode_conditions(observation)
    assert assess(live("EpisodeSandbox", verdict.conditions, verdict.failure)).status == expected
    assert {c.type: c.status for c in verdict.conditions}["Stalled"] is (expected == "Degraded")
