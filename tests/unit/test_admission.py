"""GymHost admission: each check, its reason and message, and the order in which they are applied."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from gymsandbox.api.common import validation_message
from gymsandbox.api.conditions import Reason
from gymsandbox.api.gymhost import GymHostSpec
from gymsandbox.policy.admission import Refusal, admit_gymhost, host_ttl_seconds
from gymsandbox.policy.cluster import ClusterPolicy, load_policy
from tests.unit.conftest import PLAIN_HOST, changed

EXAMPLE_POLICY = Path(__file__).resolve().parents[2] / "examples" / "policy.yaml"

POLICY = ClusterPolicy.model_validate(
    {
        "approvedImages": ["registry.example.com/gym/", "registry.example.com/episodes/"],
        "runtimeProfiles": {"kata": {"runtimeClassName": "kata-qemu"}, "crun": {"runtimeClassName": "crun"}},
        "caps": {
            "maxTTLSeconds": 7200,
            "maxCpu": "4",
            "maxMemory": "8Gi",
            "maxEphemeralStorage": "10Gi",
            "maxGpu": 1,
            "maxEgressEntries": 3,
            "maxEpisodesPerHost": 8,
        },
        "egress": {"allowedPrivateCIDRs": ["10.20.30.0/24"]},
    }
)


def manifest(**changes: Any) -> dict[str, Any]:
    """A spec admitted by POLICY, with dotted-path changes such as `**{"lifetime.ttlSeconds": 60}`."""
    spec: dict[str, Any] = {
        **PLAIN_HOST,
        "resources": {"cpu": "2", "memory": "4Gi", "ephemeralStorage": "5Gi"},
        "lifetime": {"ttlSeconds": 3600},
        "episodes": {"maxConcurrent": 4, "maxTTLSeconds": 1800, "defaultTTLSeconds": 600},
        "egress": {"allow": ["api.example.com:443"], "modelEndpoints": ["https://models.example.com/v1"]},
    }
    return changed(spec, **changes)


def spec(**changes: Any) -> GymHostSpec:
    return GymHostSpec.model_validate(manifest(**changes))


def test_admits_a_spec_within_policy() -> None:
    assert admit_gymhost(spec(), POLICY) is None


def test_example_policy_admits_a_plain_host() -> None:
    host = GymHostSpec.model_validate(
        {
            "image": "registry.example.com/gym/chess:1.0",
            "runtime": "crun",
            "storage": copy.deepcopy(manifest()["storage"]),
            "egress": {"modelEndpoints": ["https://api.openai.example/v1"]},
        }
    )
    assert admit_gymhost(host, load_policy(EXAMPLE_POLICY)) is None


def test_default_policy_admits_nothing() -> None:
    refusal = admit_gymhost(spec(), ClusterPolicy())
    assert refusal == Refusal(
        Reason.IMAGE_NOT_APPROVED,
        'image "registry.example.com/gym/chess:1.0" is not on the cluster\'s approved list',
    )


@pytest.mark.parametrize(
    ("changes", "reason", "message"),
    [
        (
            {"image": "evil.io/x:1"},
            Reason.IMAGE_NOT_APPROVED,
            'image "evil.io/x:1" is not on the cluster\'s approved list',
        ),
        (
            {"image": "registry.example.com/gym-evil/x:1"},
            Reason.IMAGE_NOT_APPROVED,
            'image "registry.example.com/gym-evil/x:1" is not on the cluster\'s approved list',
        ),
        (
            {"runtime": "firecracker"},
            Reason.UNKNOWN_RUNTIME,
            'runtime "firecracker" is not a runtime profile of this cluster (profiles: crun, kata)',
        ),
        (
            {"episodes.runtime": "runc"},
            Reason.UNKNOWN_RUNTIME,
            'episodes.runtime "runc" is not a runtime profile of this cluster (profiles: crun, kata)',
        ),
        (
            {"episodes.images": ["registry.example.com/episodes/a:1", "docker.io/library/ubuntu:24.04"]},
            Reason.IMAGE_NOT_APPROVED,
            'episodes.images entry "docker.io/library/ubuntu:24.04" is not on the cluster\'s approved list',
        ),
        (
            {"lifetime.ttlSeconds": 7201},
            Reason.TTL_OVER_CAP,
            "lifetime.ttlSeconds 7201 exceeds the cluster cap of 7200",
        ),
        (
            {"episodes.maxTTLSeconds": 9000},
            Reason.TTL_OVER_CAP,
            "episodes.maxTTLSeconds 9000 exceeds the cluster cap of 7200",
        ),
        (
            {"resources.cpu": "4001m"},
            Reason.RESOURCES_OVER_CAP,
            "resources.cpu 4001m exceeds the cluster cap of 4",
        ),
        (
            {"resources.memory": "9G"},
            Reason.RESOURCES_OVER_CAP,
            "resources.memory 9G exceeds the cluster cap of 8Gi",
        ),
        (
            {"resources.ephemeralStorage": "11Gi"},
            Reason.RESOURCES_OVER_CAP,
            "resources.ephemeralStorage 11Gi exceeds the cluster cap of 10Gi",
        ),
        (
            {"resources.gpu": 2},
            Reason.RESOURCES_OVER_CAP,
            "resources.gpu 2 exceeds the cluster cap of 1",
        ),
        (
            {"episodes.maxConcurrent": 9},
            Reason.EPISODES_OVER_CAP,
            "episodes.maxConcurrent 9 exceeds the cluster cap of 8",
        ),
        (
            {"egress.allow": ["a.example.com:443", "b.example.com:443", "c.example.com:443"]},
            Reason.EGRESS_OVER_CAP,
            "egress lists 4 entries (allow plus modelEndpoints), over the cluster cap of 3",
        ),
        (
            {"egress.allow": ["10.0.0.1/8:443"]},
            Reason.EGRESS_INVALID,
            'egress entry "10.0.0.1/8:443": "10.0.0.1/8" has host bits set; did you mean 10.0.0.0/8?',
        ),
        (
            {"egress.allow": ["169.254.169.254:80"]},
            Reason.EGRESS_INVALID,
            'egress entry "169.254.169.254:80": 169.254.169.254 is in the link-local range 169.254.0.0/16,'
            " which holds the cloud metadata address 169.254.169.254",
        ),
        (
            {"egress.allow": ["10.20.31.5:443"]},
            Reason.EGRESS_INVALID,
            'egress entry "10.20.31.5:443": 10.20.31.5 is in the private range 10.0.0.0/8 (RFC 1918),'
            " which the cluster policy does not open (egress.allowedPrivateCIDRs)",
        ),
        (
            {"egress.allow": ["0.0.0.0/0:443"]},
            Reason.EGRESS_INVALID,
            'egress entry "0.0.0.0/0:443": 0.0.0.0/0 overlaps the unspecified range 0.0.0.0/8 (this host)',
        ),
        (
            {"egress.allow": ["localhost:8080"]},
            Reason.EGRESS_INVALID,
            'egress entry "localhost:8080": "localhost" is not a fully qualified DNS name (it has no dot)',
        ),
        (
            {"egress.modelEndpoints": ["http://127.0.0.1:11434/v1"]},
            Reason.EGRESS_INVALID,
            'egress entry "127.0.0.1:11434": 127.0.0.1 is in the loopback range 127.0.0.0/8',
        ),
    ],
)
def test_refuses_with_reason_and_message(changes: dict[str, Any], reason: Reason, message: str) -> None:
    assert admit_gymhost(spec(**changes), POLICY) == Refusal(reason, message)


def test_unknown_runtime_says_when_no_profile_is_configured() -> None:
    policy = POLICY.model_copy(update={"runtime_profiles": {}})
    refusal = admit_gymhost(spec(), policy)
    assert refusal is not None
    assert (
        refusal.message
        == 'runtime "kata" is not a runtime profile of this cluster (profiles: none are configured)'
    )


@pytest.mark.parametrize(
    "changes",
    [
        {"image": "registry.example.com/episodes/tool@sha256:" + "d" * 64},
        {"episodes.runtime": "crun"},
        {"episodes.images": ["registry.example.com/episodes/a:1", "registry.example.com/gym/b:2"]},
        {"lifetime.ttlSeconds": 7200},
        {"lifetime": {}},
        {"resources.cpu": "4000m"},
        {"resources.memory": "8192Mi"},
        {"resources.ephemeralStorage": "10737418240"},
        {"resources.gpu": 1},
        {"episodes.maxConcurrent": 8},
        {"egress.allow": ["a.example.com:443", "b.example.com:443"]},
        {"egress": {}},
        {"egress.allow": ["10.20.30.40:443"]},
        {"egress.allow": ["10.20.30.0/25:443"]},
        {"egress.allow": ["internal.example.com:443"]},
    ],
)
def test_admits_values_at_or_within_the_limits(changes: dict[str, Any]) -> None:
    assert admit_gymhost(spec(**changes), POLICY) is None


def test_egress_cap_counts_entries_as_written() -> None:
    refusal = admit_gymhost(spec(**{"egress.allow": ["a.example.com:443"] * 3}), POLICY)
    assert refusal is not None
    assert refusal.reason == Reason.EGRESS_OVER_CAP


def test_names_are_not_resolved_at_admission() -> None:
    # Resolution is I/O and happens when the NetworkPolicy is built; admission only checks what is written.
    assert admit_gymhost(spec(**{"egress.allow": ["does-not-exist.invalid:443"]}), POLICY) is None


def test_an_endpoint_url_with_a_query_is_refused_without_repeating_it() -> None:
    with pytest.raises(ValidationError) as refused:
        spec(**{"egress.modelEndpoints": ["http://10.0.0.1/v1?api_key=sk-live-123"]})
    assert "sk-live-123" not in validation_message(refused.value)


# Breaks every check; each step repairs the field the previous refusal named.
EVERYTHING_WRONG: dict[str, Any] = {
    "image": "evil.io/x:1",
    "runtime": "firecracker",
    "episodes.runtime": "runc",
    "episodes.images": ["evil.io/episode:1"],
    "lifetime.ttlSeconds": 90_000,
    "resources.cpu": "64",
    "episodes.maxConcurrent": 100,
    "egress.allow": ["a.example.com:1", "b.example.com:2", "c.example.com:3", "127.0.0.1:4"],
}
REPAIRS: list[tuple[Reason, dict[str, Any]]] = [
    (Reason.IMAGE_NOT_APPROVED, {"image": "registry.example.com/gym/chess:1.0"}),
    (Reason.UNKNOWN_RUNTIME, {"runtime": "kata"}),
    (Reason.UNKNOWN_RUNTIME, {"episodes.runtime": "crun"}),
    (Reason.IMAGE_NOT_APPROVED, {"episodes.images": []}),
    (Reason.TTL_OVER_CAP, {"lifetime.ttlSeconds": 60}),
    (Reason.RESOURCES_OVER_CAP, {"resources.cpu": "1"}),
    (Reason.EPISODES_OVER_CAP, {"episodes.maxConcurrent": 1}),
    (Reason.EGRESS_OVER_CAP, {"egress.allow": ["127.0.0.1:4"]}),
    (Reason.EGRESS_INVALID, {"egress.allow": []}),
]


def test_checks_run_in_order_and_the_first_refusal_wins() -> None:
    changes = dict(EVERYTHING_WRONG)
    reasons = []
    for _, repair in REPAIRS:
        refusal = admit_gymhost(spec(**changes), POLICY)
        assert refusal is not None
        reasons.append(refusal.reason)
        changes.update(repair)
    assert reasons == [reason for reason, _ in REPAIRS]
    assert admit_gymhost(spec(**changes), POLICY) is None


@pytest.mark.parametrize(("lifetime", "ttl"), [({"ttlSeconds": 60}, 60), ({}, 7200)])
def test_host_ttl_is_the_spec_value_or_the_cluster_cap(lifetime: dict[str, int], ttl: int) -> None:
    assert host_ttl_seconds(spec(lifetime=lifetime), POLICY) == ttl


def test_an_episode_image_prefix_inside_a_cluster_prefix_is_admitted() -> None:
    inside = spec(**{"episodes.images": ["registry.example.com/episodes/python/"]})
    assert admit_gymhost(inside, POLICY) is None


def test_an_episode_image_prefix_wider_than_the_cluster_prefixes_is_refused() -> None:
    refusal = admit_gymhost(spec(**{"episodes.images": ["registry.example.com/"]}), POLICY)
    assert refusal is not None
    assert refusal.reason == Reason.IMAGE_NOT_APPROVED
    assert "registry.example.com/" in refusal.message
