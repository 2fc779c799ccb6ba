"""An episode's reconcile, decided (plan/episodes.py): from one observation of the episode, its host's verdict
and its children as known, the writes and what its conditions say. A refused or expired episode keeps no
pod; a waiting one times out; a renewal issues a new token; the pod waits for its egress policy and its
RuntimeClass; a pod name taken by another object is a refusal, with its Secret and NetworkPolicy made."""

from __future__ import annotations

import copy
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gymsandbox.api.conditions import Reason
from gymsandbox.api.episode import EpisodeSandboxSpec
from gymsandbox.api.gymhost import GymHostSpec
from gymsandbox.desired.networkpolicy import egress_policy, episode_egress_rules
from gymsandbox.desired.owner import Manifest, Owner
from gymsandbox.desired.pod import EpisodeHost, episode_pod
from gymsandbox.plan.episodes import (
    EpisodePlan,
    EpisodeWorld,
    Judged,
    effective_ttl,
    lease_for,
    plan_episode,
    pod_deadline_seconds,
    runs,
    template_hash,
)
from gymsandbox.policy.admission import Refusal
from gymsandbox.policy.cluster import load_policy
from gymsandbox.policy.egress import ResolvedTarget
from gymsandbox.status.episode import EpisodeObservation
from tests.unit.conftest import EPISODE_IMAGE, HOST_NAME, SAMPLE_HOST

POLICY = load_policy(Path(__file__).resolve().parents[2] / "examples" / "policy.yaml")
NOW = datetime(2026, 12, 7, 12, tzinfo=UTC)
HOST_UID = "host-uid"
EPISODE = Owner("EpisodeSandbox", "ep-1", "evals", "episode-uid")
SPEC = EpisodeSandboxSpec.model_validate(
    {
        "hostRef": {"name": HOST_NAME},
        "rolloutId": "rollout-7",
        "image": EPISODE_IMAGE,
        "lifetime": {"ttlSeconds": 300},
    }
)
HOST_SPEC = GymHostSpec.model_validate(SAMPLE_HOST)
ADMITTED = NOW - timedelta(seconds=60)
EXPIRES = ADMITTED + timedelta(seconds=300)
RESOLVED: tuple[ResolvedTarget, ...] = ()
HOST_REF = {
    "apiVersion": "gymsandbox.dev/v1alpha1",
    "kind": "GymHost",
    "name": HOST_NAME,
    "uid": HOST_UID,
    "controller": True,
    "blockOwnerDeletion": True,
}
DESIRED_POLICY = egress_policy(EPISODE, episode_egress_rules(POLICY, RESOLVED))


def desired_pod(now: datetime = NOW) -> Manifest:
    profile = POLICY.runtime_profiles["kata"]
    deadline = pod_deadline_seconds(ADMITTED, HOST_SPEC, POLICY, now)
    return episode_pod(EPISODE, SPEC, EpisodeHost(HOST_UID, HOST_SPEC), profile, deadline)


def live(manifest: Manifest, uid: str = "pod-uid", **fields: Any) -> Manifest:
    out = copy.deepcopy(manifest)
    out["metadata"]["uid"] = uid
    out.update(fields)
    return out


POD = live(desired_pod(), status={"phase": "Running"})


def world(**fields: Any) -> EpisodeWorld:
    """An admitted, running episode of a live host whose children were all made by this process."""
    base = EpisodeWorld(
        owner=EPISODE,
        judged=Judged(SPEC, HOST_SPEC, None),
        now=NOW,
        created=ADMITTED - timedelta(seconds=5),
        admitted_at=ADMITTED,
        host_uid=HOST_UID,
        owner_references=(HOST_REF,),
        pod=POD,
        lease_made_for=(int(EXPIRES.timestamp()), "rollout-7"),
        policy_made=template_hash(DESIRED_POLICY),
        resolved=RESOLVED,
    )
    return replace(base, **fields)


REFUSED = Refusal(Reason.IMAGE_NOT_APPROVED, "image example.com/x is not allowed")
OTHER_TEMPLATE = live(desired_pod(), status={"phase": "Running"})
OTHER_TEMPLATE["metadata"]["annotations"] = {
    **OTHER_TEMPLATE["metadata"]["annotations"],
    "gymsandbox.dev/template-hash": "older",
}
FOREIGN_POD = live(desired_pod(), uid="someone-elses")
FOREIGN_POD["metadata"]["ownerReferences"] = []


@pytest.mark.parametrize(
    ("changes", "end_pod", "children", "observation"),
    [
        pytest.param({}, False, True, EpisodeObservation(admitted=True, pod=POD), id="running-as-wanted"),
        pytest.param(
            {"judged": Judged(SPEC, HOST_SPEC, REFUSED)},
            True,
            False,
            EpisodeObservation(refusal=REFUSED),
            id="refused-keeps-no-pod",
        ),
        pytest.param(
            {"judged": Judged(SPEC, None, Refusal(Reason.HOST_NOT_FOUND, "GymHost h does not exist"))},
            True,
            False,
            EpisodeObservation(refusal=Refusal(Reason.HOST_NOT_FOUND, "GymHost h does not exist")),
            id="host-gone",
        ),
        pytest.param(
            {"now": EXPIRES},
            True,
            False,
            EpisodeObservation(admitted=True, expired=True),
            id="expired-keeps-no-pod",
        ),
        pytest.param(
            {"admitted_at": None, "queue_position": 3, "pod": None},
            False,
            False,
            EpisodeObservation(queue_position=3),
            id="waiting",
        ),
        pytest.param(
            {
                "admitted_at": None,
                "pod": None,
                "judged": Judged(SPEC.model_copy(update={"admission_timeout_seconds": 5}), HOST_SPEC, None),
            },
            False,
            False,
            EpisodeObservation(timed_out=True),
            id="waited-past-its-timeout",
        ),
        pytest.param(
            {"egress_refusal": Refusal(Reason.DNS_RESOLUTION_FAILED, "no such host")},
            False,
            True,
            EpisodeObservation(refusal=Refusal(Reason.DNS_RESOLUTION_FAILED, "no such host")),
            id="egress-refused-no-pod",
        ),
        pytest.param(
            {"runtime_class_missing": "RuntimeClass kata does not exist; no pod is created"},
            False,
            True,
            EpisodeObservation(
                admitted=True, runtime_class_missing="RuntimeClass kata does not exist; no pod is created"
            ),
            id="runtime-class-missing-no-pod",
        ),
        pytest.param(
            {"pod": FOREIGN_POD},
            False,
            True,
            EpisodeObservation(
                refusal=Refusal(
                    Reason.CHILD_CONFLICT,
                    "Pod ep-1-sandbox already exists and is not controlled by this object",
                )
            ),
            id="pod-name-taken",
        ),
    ],
)
def test_what_an_episode_observes_and_whether_its_pod_is_ended(
    changes: dict[str, Any], end_pod: bool, children: bool, observation: EpisodeObservation
) -> None:
    plan = plan_episode(world(**changes), POLICY)
    assert (plan.end_pod, plan.children, plan.observation) == (end_pod, children, observation)
    if not children:
        assert (plan.lease, plan.network_policy, plan.pod) == (None, None, None)


def test_a_ttl_over_the_cap_refuses_the_renewal_not_an_episode_already_running() -> None:
    over = Judged(SPEC, HOST_SPEC, Refusal(Reason.TTL_OVER_CAP, "ttlSeconds 9999 is over the cap"))
    assert plan_episode(world(judged=over), POLICY).observation == EpisodeObservation(admitted=True, pod=POD)
    waiting = plan_episode(world(judged=over, admitted_at=None), POLICY)
    assert waiting.observation.refusal == over.refusal


def test_children_known_made_as_wanted_cost_no_write() -> None:
    plan = plan_episode(world(), POLICY)
    assert (
        plan.adopt,
        plan.end_pod,
        plan.lease,
        plan.network_policy,
        plan.pod.verb if plan.pod else None,
    ) == (
        None,
        False,
        None,
        None,
        "keep",
    )


def test_a_new_episode_gets_its_lease_its_policy_and_its_pod_with_a_deadline_at_its_longest_ttl() -> None:
    plan = plan_episode(world(pod=None, lease_made_for=None, policy_made=None), POLICY)
    assert plan.lease is not None
    assert (plan.lease.uid, plan.lease.expires_at, plan.lease.scope.value) == (
        EPISODE.uid,
        int(EXPIRES.timestamp()),
        "owner",
    )
    assert plan.network_policy == DESIRED_POLICY
    assert plan.pod is not None
    assert (plan.pod.verb, plan.pod.body) == ("create", desired_pod())
    longest = min(HOST_SPEC.episodes.max_ttl_seconds, POLICY.caps.max_ttl_seconds)
    assert plan.pod.body["spec"]["activeDeadlineSeconds"] == longest - 60


def test_a_renewal_issues_a_token_for_the_new_expiry_and_nothing_else() -> None:
    renewed = SPEC.model_copy(update={"lifetime": SPEC.lifetime.model_copy(update={"ttl_seconds": 600})})
    plan = plan_episode(world(judged=Judged(renewed, HOST_SPEC, None)), POLICY)
    assert plan.lease is not None
    assert lease_for(plan.lease) == (int((ADMITTED + timedelta(seconds=600)).timestamp()), "rollout-7")
    assert (plan.network_policy, plan.pod.verb if plan.pod else None) == (None, "keep")


def test_an_edited_or_unknown_policy_is_made_again() -> None:
    assert plan_episode(world(policy_made="edited"), POLICY).network_policy == DESIRED_POLICY


def test_a_pod_of_another_template_is_ended_and_a_finished_one_too() -> None:
    assert plan_episode(world(pod=OTHER_TEMPLATE), POLICY).pod.verb == "delete"  # type: ignore[union-attr]
    finished = live(desired_pod(), status={"phase": "Failed"})
    assert plan_episode(world(pod=finished), POLICY).pod.verb == "delete"  # type: ignore[union-attr]


def test_the_host_becomes_controller_of_an_episode_applied_without_it() -> None:
    other = {"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "x-uid", "controller": True}
    plain = {"apiVersion": "v1", "kind": "ConfigMap", "name": "y", "uid": "y-uid"}
    plan: EpisodePlan = plan_episode(world(owner_references=(other, plain)), POLICY)
    assert plan.adopt is not None
    assert [r["uid"] for r in plan.adopt] == ["y-uid", HOST_UID]
    assert plan.adopt[-1]["controller"] is True
    # Refused episodes are adopted too (deleting the host removes them); an episode with no host is not.
    refused = plan_episode(world(owner_references=(), judged=Judged(SPEC, HOST_SPEC, REFUSED)), POLICY)
    assert refused.adopt is not None
    gone = Judged(SPEC, None, Refusal(Reason.HOST_NOT_FOUND, "GymHost h does not exist"))
    assert plan_episode(world(owner_references=(), host_uid=None, judged=gone), POLICY).adopt is None


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({}, True),
        ({"admitted_at": None}, False),
        ({"now": EXPIRES}, False),
        ({"now": EXPIRES - timedelta(seconds=1)}, True),
        ({"judged": Judged(SPEC, HOST_SPEC, REFUSED)}, False),
        ({"judged": Judged(None, None, REFUSED)}, False),
        ({"judged": Judged(SPEC, HOST_SPEC, Refusal(Reason.TTL_OVER_CAP, "over"))}, True),
    ],
)
def test_which_episodes_run(changes: dict[str, Any], expected: bool) -> None:
    """The gather resolves DNS and looks up the RuntimeClass only for these."""
    assert runs(world(**changes), POLICY) is expected


def test_the_ttl_enforced_is_never_past_either_cap() -> None:
    long = SPEC.model_copy(update={"lifetime": SPEC.lifetime.model_copy(update={"ttl_seconds": 10**6})})
    assert effective_ttl(long, HOST_SPEC, POLICY) == min(
        HOST_SPEC.episodes.max_ttl_seconds, POLICY.caps.max_ttl_seconds
    )
