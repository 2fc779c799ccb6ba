"""An episode's sandbox Pod and its NetworkPolicy: restricted, no token, no broker, only what it asks."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from gymsandbox.api.episode import EpisodeSandboxSpec
from gymsandbox.api.gymhost import GymHostSpec
from gymsandbox.api.names import LABEL_COMPONENT, LABEL_EPISODE, LABEL_HOST, LABEL_HOST_UID, LABEL_MANAGED_BY
from gymsandbox.desired.labels import child_labels, selector
from gymsandbox.desired.names import child_name
from gymsandbox.desired.networkpolicy import (
    broker_rule,
    dns_rule,
    egress_policy,
    egress_policy_name,
    episode_egress_rules,
)
from gymsandbox.desired.owner import TEMPLATE_HASH_ANNOTATION, Owner, template_hash
from gymsandbox.desired.pod import EpisodeHost, episode_pod
from gymsandbox.policy.cluster import ClusterPolicy, RuntimeProfile, load_policy
from gymsandbox.policy.egress import ResolvedTarget
from tests.unit.conftest import EPISODE_IMAGE, SAMPLE_HOST, SMALL_HOST

EXAMPLE_POLICY = Path(__file__).resolve().parents[2] / "examples" / "policy.yaml"
OWNER = Owner(kind="EpisodeSandbox", name="ep-0001", namespace="evals", uid="uid-ep-1")

HOST_SPEC = GymHostSpec.model_validate(
    {
        **SMALL_HOST,
        "egress": SAMPLE_HOST["egress"],
        "envFrom": [{"secretRef": {"name": "openai-credentials"}}],
        "episodes": {"images": [EPISODE_IMAGE], "defaultTTLSeconds": 600, "maxTTLSeconds": 1800},
    }
)
HOST = EpisodeHost("uid-host-1", HOST_SPEC)
# examples/episode.yaml
EPISODE: dict[str, Any] = {
    "hostRef": {"name": "swe-gym-run-1"},
    "rolloutId": "rollout-0001",
    "image": "registry.example.com/episodes/python-sandbox:3.12",
    "command": ["sleep", "infinity"],
    "args": ["--verbose", "x"],
    "user": 1000,
    "workdir": "/workspace",
    "env": [{"name": "TASK_ID", "value": "django__django-11099"}, {"name": "EMPTY", "value": ""}],
    "resources": {"cpu": "500m", "memory": "1Gi", "ephemeralStorage": "2Gi"},
    "lifetime": {"ttlSeconds": 900},
    "workspace": {"mountPath": "/work"},
    "egress": {"allow": ["models.example.com:443"]},
    "labels": {"team": "rl", "app": "gymsandbox-broker", "component": "x"},
}


def spec(**changes: Any) -> EpisodeSandboxSpec:
    """EPISODE with top-level changes; None deletes the key."""
    data = copy.deepcopy(EPISODE)
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    return EpisodeSandboxSpec.model_validate(data)


@pytest.fixture(scope="module")
def policy() -> ClusterPolicy:
    return load_policy(EXAMPLE_POLICY)


@pytest.fixture(scope="module")
def kata(policy: ClusterPolicy) -> RuntimeProfile:
    return policy.runtime_profiles["kata"]


def build(
    profile: RuntimeProfile, episode: EpisodeSandboxSpec | None = None, deadline: int = 1800
) -> dict[str, Any]:
    return episode_pod(OWNER, episode or spec(), HOST, profile, deadline)


def pod_spec(profile: RuntimeProfile, episode: EpisodeSandboxSpec | None = None) -> dict[str, Any]:
    out = build(profile, episode)["spec"]
    assert isinstance(out, dict)
    return out


def container(profile: RuntimeProfile, episode: EpisodeSandboxSpec | None = None) -> dict[str, Any]:
    containers = pod_spec(profile, episode)["containers"]
    assert len(containers) == 1
    out = containers[0]
    assert isinstance(out, dict)
    return out


# --- identity -------------------------------------------------------------------------------------


def test_pod_is_named_after_the_episode_with_a_sandbox_suffix(kata: RuntimeProfile) -> None:
    metadata = build(kata)["metadata"]
    assert metadata["name"] == child_name("ep-0001", "sandbox") == "ep-0001-sandbox"
    assert metadata["namespace"] == "evals"


def test_pod_is_controlled_by_its_episode(kata: RuntimeProfile) -> None:
    (reference,) = build(kata)["metadata"]["ownerReferences"]
    assert (reference["kind"], reference["name"], reference["uid"], reference["controller"]) == (
        "EpisodeSandbox",
        "ep-0001",
        "uid-ep-1",
        True,
    )


def test_user_labels_reach_the_pod_only_under_the_user_prefix(kata: RuntimeProfile) -> None:
    """No user label is a key that a Service, a NetworkPolicy or the chart's selectors match on."""
    labels = build(kata)["metadata"]["labels"]
    assert labels == {
        **child_labels(OWNER),
        LABEL_HOST: spec().host_ref.name,
        LABEL_HOST_UID: HOST.uid,
        "user.gymsandbox.dev/team": "rl",
        "user.gymsandbox.dev/app": "gymsandbox-broker",
        "user.gymsandbox.dev/component": "x",
    }


def test_the_pod_carries_its_own_deadline_outside_its_template(kata: RuntimeProfile) -> None:
    """The kubelet ends it even if the operator never does; a later deadline is not a template change."""
    first, later = build(kata, deadline=1800), build(kata, deadline=1799)
    assert (first["spec"]["activeDeadlineSeconds"], later["spec"]["activeDeadlineSeconds"]) == (1800, 1799)
    assert first["metadata"]["annotations"] == later["metadata"]["annotations"]


def test_the_pod_is_labelled_with_its_host(kata: RuntimeProfile) -> None:
    assert build(kata)["metadata"]["labels"][LABEL_HOST] == spec().host_ref.name
    assert build(kata)["metadata"]["labels"][LABEL_HOST_UID] == HOST.uid


def test_operator_labels_are_the_pods_own(kata: RuntimeProfile) -> None:
    labels = build(kata)["metadata"]["labels"]
    assert {k: labels[k] for k in child_labels(OWNER)} == child_labels(OWNER)
    assert labels[LABEL_MANAGED_BY] == "gymsandbox"
    assert labels[LABEL_COMPONENT] == "episode"
    assert labels[LABEL_EPISODE] == "ep-0001"


def test_pod_carries_the_template_hash_of_its_spec_without_the_deadline(kata: RuntimeProfile) -> None:
    pod = build(kata)
    template = {k: v for k, v in pod["spec"].items() if k != "activeDeadlineSeconds"}
    assert pod["metadata"]["annotations"][TEMPLATE_HASH_ANNOTATION] == template_hash(template)


# --- security -------------------------------------------------------------------------------------


@pytest.mark.parametrize("user", [1000, 65532, 2_147_483_647])
def test_pod_runs_as_the_episode_user_group_and_fs_group(kata: RuntimeProfile, user: int) -> None:
    security = pod_spec(kata, spec(user=user))["securityContext"]
    assert (security["runAsUser"], security["runAsGroup"], security["fsGroup"]) == (user, user, user)
    assert security["runAsNonRoot"] is True


def test_default_user_is_65532(kata: RuntimeProfile) -> None:
    assert pod_spec(kata, spec(user=None))["securityContext"]["runAsUser"] == 65532


def test_container_runs_as_the_episode_user(kata: RuntimeProfile) -> None:
    security = container(kata)["securityContext"]
    assert (security["runAsUser"], security["runAsGroup"]) == (1000, 1000)


@pytest.mark.parametrize(
    ("field", "expected"),
    [
        ("allowPrivilegeEscalation", False),
        ("privileged", False),
        ("capabilities", {"drop": ["ALL"]}),
        ("runAsNonRoot", True),
        ("seccompProfile", {"type": "RuntimeDefault"}),
    ],
)
def test_container_security_is_restricted(kata: RuntimeProfile, field: str, expected: object) -> None:
    assert container(kata)["securityContext"][field] == expected


def test_container_root_filesystem_stays_writable(kata: RuntimeProfile) -> None:
    assert container(kata)["securityContext"]["readOnlyRootFilesystem"] is False


def test_pod_never_restarts_its_container(kata: RuntimeProfile) -> None:
    assert pod_spec(kata)["restartPolicy"] == "Never"


def test_pod_gets_no_service_account_token(kata: RuntimeProfile) -> None:
    assert pod_spec(kata)["automountServiceAccountToken"] is False


def test_pod_gets_no_service_links(kata: RuntimeProfile) -> None:
    assert pod_spec(kata)["enableServiceLinks"] is False


def test_container_env_is_exactly_the_episode_env_and_a_writable_home(kata: RuntimeProfile) -> None:
    assert container(kata)["env"] == [
        {"name": "TASK_ID", "value": "django__django-11099"},
        {"name": "EMPTY", "value": ""},
        {"name": "HOME", "value": "/tmp"},
    ]


def test_home_given_by_the_episode_wins(kata: RuntimeProfile) -> None:
    env = container(kata, spec(env=[{"name": "HOME", "value": "/workspace"}]))["env"]
    assert env == [{"name": "HOME", "value": "/workspace"}]


def test_container_gets_no_operator_env(kata: RuntimeProfile) -> None:
    names = [e["name"] for e in container(kata)["env"]]
    assert not [name for name in names if name.startswith("GYMSANDBOX_")]


def test_container_gets_no_secret_reference_at_all(kata: RuntimeProfile) -> None:
    c = container(kata)
    assert all("valueFrom" not in e for e in c["env"])
    assert "envFrom" not in c
    assert "secretKeyRef" not in repr(build(kata))


def test_container_without_env_has_only_home(kata: RuntimeProfile) -> None:
    assert container(kata, spec(env=None))["env"] == [{"name": "HOME", "value": "/tmp"}]


# --- workload -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "key", "value"),
    [
        ("command", "command", ["bash", "-lc", "pytest -x"]),
        ("args", "args", ["--flag", "with space", ""]),
        ("workdir", "workingDir", "/srv/task"),
    ],
)
def test_container_takes_command_args_and_working_dir_from_the_spec(
    kata: RuntimeProfile, field: str, key: str, value: object
) -> None:
    assert container(kata, spec(**{field: value}))[key] == value


@pytest.mark.parametrize(
    ("field", "key"), [("command", "command"), ("args", "args"), ("workdir", "workingDir")]
)
def test_container_leaves_unset_command_args_and_working_dir_to_the_image(
    kata: RuntimeProfile, field: str, key: str
) -> None:
    assert key not in container(kata, spec(**{field: None}))


def test_container_runs_the_episode_image(kata: RuntimeProfile) -> None:
    assert container(kata)["image"] == "registry.example.com/episodes/python-sandbox:3.12"


def test_requests_equal_limits(kata: RuntimeProfile) -> None:
    resources = container(kata)["resources"]
    assert resources["requests"] == resources["limits"]
    assert resources["limits"] == {"cpu": "500m", "memory": "1Gi", "ephemeral-storage": "2Gi"}


def test_default_resources_are_requested_and_limited(kata: RuntimeProfile) -> None:
    resources = container(kata, spec(resources=None))["resources"]
    assert (
        resources["requests"]
        == resources["limits"]
        == {
            "cpu": "500m",
            "memory": "512Mi",
            "ephemeral-storage": "1Gi",
        }
    )


# --- workspace ------------------------------------------------------------------------------------


def test_workspace_is_mounted_read_write_at_the_episodes_own_directory(kata: RuntimeProfile) -> None:
    (mount,) = container(kata)["volumeMounts"]
    sub_path = ".gymsandbox/hosts/uid-host-1/episodes/uid-ep-1"
    assert (mount["mountPath"], mount["subPath"]) == ("/work", sub_path)
    assert mount.get("readOnly", False) is False


def test_workspace_comes_from_the_host_claim(kata: RuntimeProfile) -> None:
    (mount,) = container(kata)["volumeMounts"]
    (volume,) = pod_spec(kata)["volumes"]
    assert volume["name"] == mount["name"]
    assert volume["persistentVolumeClaim"] == {"claimName": "gym-storage"}


def test_pod_without_workspace_mounts_no_volumes(kata: RuntimeProfile) -> None:
    episode = spec(workspace=None)
    assert pod_spec(kata, episode)["volumes"] == []
    assert "volumeMounts" not in container(kata, episode)


# --- runtime --------------------------------------------------------------------------------------


def test_pod_runs_in_the_profile_runtime_class(kata: RuntimeProfile) -> None:
    assert pod_spec(kata)["runtimeClassName"] == kata.runtime_class_name == "kata-qemu"


def test_pod_lands_on_the_profile_nodes(kata: RuntimeProfile) -> None:
    assert pod_spec(kata)["nodeSelector"] == kata.node_selector == {"gymsandbox.dev/runtime": "kata"}


def test_pod_follows_the_profile_it_is_given(policy: ClusterPolicy) -> None:
    crun = policy.runtime_profiles["crun"]
    out = pod_spec(crun)
    assert (out["runtimeClassName"], out["nodeSelector"]) == ("crun", {"gymsandbox.dev/runtime": "crun"})


# --- egress ---------------------------------------------------------------------------------------

TARGETS = [
    ResolvedTarget("models.example.com:443", 443, ("198.51.100.7/32", "198.51.100.8/32")),
    ResolvedTarget("203.0.113.0/25:8443", 8443, ("203.0.113.0/25",)),
]


def test_episode_without_egress_targets_gets_no_rule_at_all(policy: ClusterPolicy) -> None:
    assert episode_egress_rules(policy, []) == []


def test_episode_egress_starts_with_dns(policy: ClusterPolicy) -> None:
    assert episode_egress_rules(policy, TARGETS)[0] == dns_rule(policy)


def test_episode_egress_has_one_ip_block_rule_per_target_after_dns(policy: ClusterPolicy) -> None:
    assert episode_egress_rules(policy, TARGETS)[1:] == [
        {
            "to": [{"ipBlock": {"cidr": "198.51.100.7/32"}}, {"ipBlock": {"cidr": "198.51.100.8/32"}}],
            "ports": [{"protocol": "TCP", "port": 443}],
        },
        {"to": [{"ipBlock": {"cidr": "203.0.113.0/25"}}], "ports": [{"protocol": "TCP", "port": 8443}]},
    ]


@pytest.mark.parametrize("targets", [[], TARGETS[:1], TARGETS])
def test_episode_egress_never_allows_the_broker(policy: ClusterPolicy, targets: list[ResolvedTarget]) -> None:
    rules = episode_egress_rules(policy, targets)
    assert broker_rule(policy) not in rules
    assert policy.broker.namespace not in repr(rules)


def test_egress_policy_carries_the_template_hash_of_its_spec(policy: ClusterPolicy) -> None:
    manifest = egress_policy(OWNER, episode_egress_rules(policy, TARGETS))
    assert manifest["metadata"]["annotations"][TEMPLATE_HASH_ANNOTATION] == template_hash(manifest["spec"])


def test_egress_policy_hash_changes_with_its_rules(policy: ClusterPolicy) -> None:
    closed = egress_policy(OWNER, episode_egress_rules(policy, []))
    opened = egress_policy(OWNER, episode_egress_rules(policy, TARGETS))
    hashes = {m["metadata"]["annotations"][TEMPLATE_HASH_ANNOTATION] for m in (closed, opened)}
    assert len(hashes) == 2


def test_egress_policy_without_rules_denies_all_egress_of_the_sandbox_pod() -> None:
    manifest = egress_policy(OWNER, [])
    # policyTypes Egress with no rules denies all; `egress: []` is left out because the API server drops it.
    assert manifest["spec"] == {"podSelector": {"matchLabels": selector(OWNER)}, "policyTypes": ["Egress"]}


def test_egress_policy_selects_the_sandbox_pod(kata: RuntimeProfile) -> None:
    pod_labels = build(kata)["metadata"]["labels"]
    match = egress_policy(OWNER, [])["spec"]["podSelector"]["matchLabels"]
    assert {k: pod_labels[k] for k in match} == match


def test_egress_policy_is_named_after_the_episode() -> None:
    manifest = egress_policy(OWNER, [])
    assert manifest["metadata"]["name"] == egress_policy_name(OWNER) == "ep-0001-sandbox-net"
