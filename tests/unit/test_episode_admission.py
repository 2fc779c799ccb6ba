"""Admission of an EpisodeSandbox under its GymHost and the cluster policy; the first refusal wins."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from gymsandbox.api.conditions import Reason
from gymsandbox.api.episode import EpisodeSandboxSpec
from gymsandbox.api.gymhost import GymHostSpec
from gymsandbox.policy import episodes
from gymsandbox.policy.cluster import ClusterPolicy, load_policy
from gymsandbox.policy.egress import parse_allow_entry
from gymsandbox.policy.episodes import (
    EPISODE_CHECKS,
    EpisodeRequest,
    admit_episode,
    covered,
    episode_runtime,
    episode_ttl_seconds,
)
from tests.unit.conftest import EPISODE_IMAGE, SAMPLE_HOST

EXAMPLE_POLICY = Path(__file__).resolve().parents[2] / "examples" / "policy.yaml"
# examples/gymhost.yaml.
HOST: dict[str, Any] = SAMPLE_HOST
EPISODE: dict[str, Any] = {
    "hostRef": {"name": "swe-gym-run-1"},
    "rolloutId": "rollout-0001",
    "image": EPISODE_IMAGE,
}


def _changed(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """`base` with dotted-path changes such as {"episodes.runtime": "crun"}; None deletes the key."""
    out = copy.deepcopy(base)
    for path, value in changes.items():
        *parents, leaf = path.split(".")
        node = out
        for key in parents:
            node = node.setdefault(key, {})
        if value is None:
            node.pop(leaf, None)
        else:
            node[leaf] = value
    return out


def host_spec(**changes: Any) -> GymHostSpec:
    return GymHostSpec.model_validate(_changed(HOST, changes))


def episode_spec(**changes: Any) -> EpisodeSandboxSpec:
    return EpisodeSandboxSpec.model_validate(_changed(EPISODE, changes))


@pytest.fixture(scope="module")
def policy() -> ClusterPolicy:
    return load_policy(EXAMPLE_POLICY)


def with_ttl_cap(policy: ClusterPolicy, cap: int) -> ClusterPolicy:
    return policy.model_copy(update={"caps": policy.caps.model_copy(update={"max_ttl_seconds": cap})})


def admit(
    policy: ClusterPolicy, spec: EpisodeSandboxSpec | None = None, host: GymHostSpec | None = None
) -> Any:
    return admit_episode(EpisodeRequest(spec or episode_spec(), host or host_spec(), policy))


def refused_reason(policy: ClusterPolicy, **changes: Any) -> Reason | None:
    refusal = admit(policy, episode_spec(**changes))
    return None if refusal is None else refusal.reason


# --- the happy path -------------------------------------------------------------------------------


def test_minimal_episode_is_admitted(policy: ClusterPolicy) -> None:
    assert admit(policy) is None


def test_example_episode_is_admitted_under_the_example_host(policy: ClusterPolicy) -> None:
    spec = episode_spec(
        command=["sleep", "infinity"],
        user=1000,
        workdir="/workspace",
        resources={"cpu": "500m", "memory": "1Gi"},
        lifetime={"ttlSeconds": 900},
        workspace={"mountPath": "/workspace"},
        egress={"allow": ["models.example.com:443"]},
    )
    assert admit(policy, spec) is None


# --- image ----------------------------------------------------------------------------------------


def test_image_off_the_cluster_list_is_refused(policy: ClusterPolicy) -> None:
    host = host_spec(**{"episodes.images": ["docker.io/library/python:3.12"]})
    refusal = admit(policy, episode_spec(image="docker.io/library/python:3.12"), host)
    assert refusal is not None
    assert refusal.reason == Reason.IMAGE_NOT_APPROVED
    assert "cluster's approved list" in refusal.message


def test_cluster_approved_image_missing_from_the_host_list_is_refused(policy: ClusterPolicy) -> None:
    refusal = admit(policy, episode_spec(image="registry.example.com/episodes/node-sandbox:22"))
    assert refusal is not None
    assert refusal.reason == Reason.IMAGE_NOT_APPROVED
    assert "episodes.images" in refusal.message


def test_host_list_without_the_cluster_approval_is_not_enough(policy: ClusterPolicy) -> None:
    host = host_spec(**{"episodes.images": ["evil.io/episode:1"]})
    assert admit(policy, episode_spec(image="evil.io/episode:1"), host) is not None


def test_image_under_a_cluster_prefix_entry_is_approved_by_the_cluster(policy: ClusterPolicy) -> None:
    image = "registry.example.com/episodes/team/tool@sha256:" + "d" * 64
    host = host_spec(**{"episodes.images": [image]})
    assert admit(policy, episode_spec(image=image), host) is None


def test_image_beside_a_cluster_prefix_entry_is_refused(policy: ClusterPolicy) -> None:
    image = "registry.example.com/episodes-evil/tool:1"
    host = host_spec(**{"episodes.images": [image]})
    refusal = admit(policy, episode_spec(image=image), host)
    assert refusal is not None
    assert refusal.reason == Reason.IMAGE_NOT_APPROVED


@pytest.mark.parametrize(
    ("image", "admitted"),
    [
        ("registry.example.com/episodes/anything:1", True),
        ("registry.example.com/episodes/team/tool:2", True),
        ("registry.example.com/episodes-evil/x:1", False),
        ("registry.example.com/gym/swe-env:1.4.2", False),
    ],
)
def test_prefix_entry_in_the_host_list_approves_images_under_it(
    policy: ClusterPolicy, image: str, admitted: bool
) -> None:
    # The GymHost model refuses a trailing "/" in episodes.images, so the entry is placed directly.
    base = host_spec()
    host = base.model_copy(
        update={"episodes": base.episodes.model_copy(update={"images": ["registry.example.com/episodes/"]})}
    )
    assert (admit(policy, episode_spec(image=image), host) is None) is admitted


# --- runtime --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("episode_runtime_field", "host_changes", "expected"),
    [
        (None, {}, "kata"),
        (None, {"episodes.runtime": "crun"}, "crun"),
        ("crun", {}, "crun"),
        ("kata", {"episodes.runtime": "crun"}, "kata"),
    ],
)
def test_episode_runtime_is_its_own_else_the_host_episodes_runtime_else_the_host_runtime(
    episode_runtime_field: str | None, host_changes: dict[str, Any], expected: str
) -> None:
    spec = episode_spec(runtime=episode_runtime_field)
    assert episode_runtime(spec, host_spec(**host_changes)) == expected


@pytest.mark.parametrize(
    ("episode_runtime_field", "host_changes"),
    [
        (None, {}),
        ("kata", {}),
        (None, {"episodes.runtime": "crun"}),
        ("crun", {"episodes.runtime": "crun"}),
    ],
)
def test_runtime_equal_to_the_host_allowed_runtime_is_admitted(
    policy: ClusterPolicy, episode_runtime_field: str | None, host_changes: dict[str, Any]
) -> None:
    assert admit(policy, episode_spec(runtime=episode_runtime_field), host_spec(**host_changes)) is None


@pytest.mark.parametrize(
    ("episode_runtime_field", "host_changes"),
    [
        ("crun", {}),  # the host runs kata and names no episodes.runtime
        ("kata", {"episodes.runtime": "crun"}),  # episodes.runtime, when set, is the only one allowed
    ],
)
def test_runtime_other_than_the_host_allowed_runtime_is_refused(
    policy: ClusterPolicy, episode_runtime_field: str, host_changes: dict[str, Any]
) -> None:
    refusal = admit(policy, episode_spec(runtime=episode_runtime_field), host_spec(**host_changes))
    assert refusal is not None
    assert refusal.reason == Reason.UNKNOWN_RUNTIME
    assert "not allowed for this host's episodes" in refusal.message


def test_runtime_that_is_no_cluster_profile_is_refused(policy: ClusterPolicy) -> None:
    refusal = admit(policy, episode_spec(), host_spec(**{"episodes.runtime": "firecracker"}))
    assert refusal is not None
    assert refusal.reason == Reason.UNKNOWN_RUNTIME
    assert "not a runtime profile of this cluster" in refusal.message


# --- resources ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "resources",
    [
        {"cpu": "9"},
        {"cpu": "8001m"},
        {"memory": "33Gi"},
        {"ephemeralStorage": "51Gi"},
        {"gpu": 1},
    ],
)
def test_resources_over_a_cluster_cap_are_refused(policy: ClusterPolicy, resources: dict[str, Any]) -> None:
    assert refused_reason(policy, resources=resources) == Reason.RESOURCES_OVER_CAP


def test_resources_at_the_cluster_caps_are_admitted(policy: ClusterPolicy) -> None:
    resources = {"cpu": "8", "memory": "32Gi", "ephemeralStorage": "50Gi", "gpu": 0}
    assert refused_reason(policy, resources=resources) is None


# --- TTL ------------------------------------------------------------------------------------------


def test_ttl_defaults_to_the_host_episodes_default() -> None:
    assert episode_ttl_seconds(episode_spec(), host_spec()) == 600


def test_ttl_set_on_the_episode_wins_over_the_host_default() -> None:
    assert episode_ttl_seconds(episode_spec(lifetime={"ttlSeconds": 900}), host_spec()) == 900


def test_ttl_at_the_host_maximum_is_admitted(policy: ClusterPolicy) -> None:
    assert refused_reason(policy, lifetime={"ttlSeconds": 1800}) is None


def test_ttl_over_the_host_maximum_is_refused(policy: ClusterPolicy) -> None:
    refusal = admit(policy, episode_spec(lifetime={"ttlSeconds": 1801}))
    assert refusal is not None
    assert refusal.reason == Reason.TTL_OVER_CAP
    assert "maxTTLSeconds of 1800" in refusal.message


def test_ttl_over_the_cluster_cap_is_refused(policy: ClusterPolicy) -> None:
    refusal = admit(with_ttl_cap(policy, 1000), episode_spec(lifetime={"ttlSeconds": 1200}))
    assert refusal is not None
    assert refusal.reason == Reason.TTL_OVER_CAP
    assert "cluster cap of 1000" in refusal.message


def test_default_ttl_over_the_cluster_cap_is_refused(policy: ClusterPolicy) -> None:
    refusal = admit(with_ttl_cap(policy, 500))
    assert refusal is not None
    assert refusal.reason == Reason.TTL_OVER_CAP


# --- egress ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "entry",
    [
        "models.example.com:443",  # a model endpoint's host and port
        "203.0.113.0/24:443",  # the host's CIDR itself
        "203.0.113.0/25:443",  # a subnet of it
        "203.0.113.7:443",  # one address in it
    ],
)
def test_egress_entry_covered_by_the_host_is_admitted(policy: ClusterPolicy, entry: str) -> None:
    assert refused_reason(policy, egress={"allow": [entry]}) is None


@pytest.mark.parametrize(
    "entry",
    [
        "models.example.com:80",  # right name, other port
        "203.0.113.7:80",  # right address, other port
        "other.example.com:443",  # another name
        "api.models.example.com:443",  # a subdomain is another name
        "203.0.112.0/23:443",  # a superset of the host's CIDR
        "198.51.100.7:443",  # an address of models.example.com is not the name
    ],
)
def test_egress_entry_not_covered_by_the_host_is_refused(policy: ClusterPolicy, entry: str) -> None:
    assert refused_reason(policy, egress={"allow": [entry]}) == Reason.EGRESS_NOT_SUBSET


@pytest.mark.parametrize(
    "entry",
    [
        "10.0.0.1:443",  # private
        "192.168.1.0/24:443",  # private CIDR
        "127.0.0.1:8080",  # loopback
        "169.254.169.254:80",  # link-local: the cloud metadata address
        "[::1]:443",  # IPv6 loopback
        "[fe80::1]:443",  # IPv6 link-local
    ],
)
def test_egress_entry_into_forbidden_space_is_invalid(policy: ClusterPolicy, entry: str) -> None:
    assert refused_reason(policy, egress={"allow": [entry]}) == Reason.EGRESS_INVALID


def test_forbidden_egress_entry_is_invalid_even_when_the_host_lists_it(policy: ClusterPolicy) -> None:
    base = host_spec()
    host = base.model_copy(
        update={"egress": base.egress.model_copy(update={"allow": ["10.0.0.0/8:443", "127.0.0.1:8080"]})}
    )
    for entry in ("10.0.0.1:443", "127.0.0.1:8080"):
        refusal = admit(policy, episode_spec(egress={"allow": [entry]}), host)
        assert refusal is not None
        assert refusal.reason == Reason.EGRESS_INVALID


@pytest.mark.parametrize("entry", ["999.1.1.1:443", "203.0.113.1/24:443"])
def test_malformed_egress_entry_is_invalid(policy: ClusterPolicy, entry: str) -> None:
    assert refused_reason(policy, egress={"allow": [entry]}) == Reason.EGRESS_INVALID


def test_first_egress_entry_not_covered_is_named(policy: ClusterPolicy) -> None:
    spec = episode_spec(egress={"allow": ["models.example.com:443", "other.example.com:443"]})
    refusal = admit(policy, spec)
    assert refusal is not None
    assert "other.example.com:443" in refusal.message


def test_no_egress_at_all_is_admitted_under_any_host(policy: ClusterPolicy) -> None:
    host = host_spec(egress={"allow": [], "modelEndpoints": []})
    assert admit(policy, episode_spec(), host) is None


@pytest.mark.parametrize(
    ("target", "allowed", "expected"),
    [
        ("api.example.com:443", ["api.example.com:443"], True),
        ("API.example.com:443", ["api.example.com:443"], True),
        ("api.example.com:443", ["api.example.com:8443"], False),
        ("api.example.com:443", ["example.com:443"], False),
        ("203.0.113.9:443", ["203.0.113.0/24:443"], True),
        ("203.0.113.0/28:443", ["203.0.113.0/24:443"], True),
        ("203.0.113.0/24:443", ["203.0.113.0/28:443"], False),
        ("203.0.113.9:443", ["api.example.com:443"], False),
        ("api.example.com:443", ["203.0.113.0/24:443"], False),
        ("[2001:db8::1]:443", ["[2001:db8::/32]:443"], True),
        ("203.0.113.9:443", ["[::/0]:443"], False),  # IPv4 is never inside an IPv6 network
        ("[2001:db8::1]:443", ["0.0.0.0/0:443"], False),
        ("203.0.113.9:443", ["api.example.com:443", "203.0.113.9:443"], True),
        ("203.0.113.9:443", [], False),
    ],
)
def test_covered_when_one_host_entry_allows_everything_the_target_asks_for(
    target: str, allowed: list[str], expected: bool
) -> None:
    assert covered(parse_allow_entry(target), [parse_allow_entry(a) for a in allowed]) is expected


# --- workspace ------------------------------------------------------------------------------------


def test_a_workspace_is_admitted(policy: ClusterPolicy) -> None:
    assert refused_reason(policy, workspace={"mountPath": "/work"}) is None


def test_no_workspace_is_admitted(policy: ClusterPolicy) -> None:
    assert refused_reason(policy, workspace=None) is None


# --- order ----------------------------------------------------------------------------------------


def test_checks_run_in_the_documented_order() -> None:
    documented = (
        episodes.check_image,
        episodes.check_runtime,
        episodes.check_resources,
        episodes.check_ttl,
        episodes.check_egress,
    )
    assert documented == EPISODE_CHECKS


# Every check fails; each step fixes the one that failed before, so the next one in order shows.
EVERYTHING_WRONG: dict[str, Any] = {
    "image": "docker.io/library/python:3.12",
    "runtime": "crun",
    "resources": {"cpu": "64"},
    "lifetime": {"ttlSeconds": 86_400},
    "egress": {"allow": ["other.example.com:443"]},
}
FIXES: list[tuple[Reason, dict[str, Any]]] = [
    (Reason.IMAGE_NOT_APPROVED, {"image": EPISODE_IMAGE}),
    (Reason.UNKNOWN_RUNTIME, {"runtime": None}),
    (Reason.RESOURCES_OVER_CAP, {"resources": {}}),
    (Reason.TTL_OVER_CAP, {"lifetime": {}}),
    (Reason.EGRESS_NOT_SUBSET, {"egress": {}}),
]


@pytest.mark.parametrize("step", range(len(FIXES)), ids=[reason.value for reason, _ in FIXES])
def test_first_refusal_wins_in_check_order(policy: ClusterPolicy, step: int) -> None:
    changes = dict(EVERYTHING_WRONG)
    for _, fix in FIXES[:step]:
        changes.update(fix)
    assert refused_reason(policy, **changes) == FIXES[step][0]


def test_episode_with_every_problem_fixed_is_admitted(policy: ClusterPolicy) -> None:
    changes = dict(EVERYTHING_WRONG)
    for _, fix in FIXES:
        changes.update(fix)
    assert refused_reason(policy, **changes) is None
