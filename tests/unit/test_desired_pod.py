"""The host Pod: Pod Security "restricted", the profile's RuntimeClass, sub-path mounts, no secrets in it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gymsandbox.api.gymhost import OPERATOR_MOUNT_PATHS, GymHostSpec
from gymsandbox.api.names import (
    ENV_BROKER_CA,
    ENV_BROKER_URL,
    ENV_LEASE_TOKEN,
    ENV_LEASE_TOKEN_FILE,
    LEASE_TOKEN_KEY,
)
from gymsandbox.desired.labels import child_labels
from gymsandbox.desired.names import child_name
from gymsandbox.desired.owner import TEMPLATE_HASH_ANNOTATION
from gymsandbox.desired.pod import host_pod
from gymsandbox.policy.cluster import ClusterPolicy, load_policy
from tests.support.gymhosts import DELETE
from tests.unit.conftest import OWNER, SAMPLE_HOST, changed

EXAMPLE_POLICY = Path(__file__).resolve().parents[2] / "examples" / "policy.yaml"
SECRET_NAME = "swe-gym-run-1-lease"

# The sample host with a dataset, a second variable, two envFrom sources and no episode images.
BASE_SPEC: dict[str, Any] = changed(
    SAMPLE_HOST,
    **{
        "storage.dataset": {"claimName": "datasets", "subPath": "swe-bench/verified", "mountPath": "/data"},
        "env": [{"name": "GYM_TASK_SET", "value": "verified-50"}, {"name": "LOG_LEVEL", "value": "debug"}],
        "envFrom": [
            {"secretRef": {"name": "openai-credentials"}, "prefix": "OPENAI_"},
            {"secretRef": {"name": "hf-credentials"}},
        ],
        "episodes.images": DELETE,
    },
)


def make_spec(**changes: Any) -> GymHostSpec:
    """BASE_SPEC with dotted-path changes such as `**{"resources.gpu": 1}`; None deletes the key."""
    deletions = {path: DELETE if value is None else value for path, value in changes.items()}
    return GymHostSpec.model_validate(changed(BASE_SPEC, **deletions))


@pytest.fixture(scope="module")
def policy() -> ClusterPolicy:
    return load_policy(EXAMPLE_POLICY)


DEADLINE = 86_400


def build(policy: ClusterPolicy, spec: GymHostSpec | None = None, deadline: int = DEADLINE) -> dict[str, Any]:
    return host_pod(OWNER, spec or make_spec(), policy, SECRET_NAME, deadline_seconds=deadline)


def pod_spec(policy: ClusterPolicy, spec: GymHostSpec | None = None) -> dict[str, Any]:
    out = build(policy, spec)["spec"]
    assert isinstance(out, dict)
    return out


def container(policy: ClusterPolicy, spec: GymHostSpec | None = None) -> dict[str, Any]:
    containers = pod_spec(policy, spec)["containers"]
    assert len(containers) == 1
    result = containers[0]
    assert isinstance(result, dict)
    return result


def mount_at(policy: ClusterPolicy, path: str, spec: GymHostSpec | None = None) -> dict[str, Any]:
    return next(m for m in container(policy, spec)["volumeMounts"] if m["mountPath"] == path)


def volume(policy: ClusterPolicy, name: str, spec: GymHostSpec | None = None) -> dict[str, Any]:
    return next(v for v in pod_spec(policy, spec)["volumes"] if v["name"] == name)


def env_by_name(policy: ClusterPolicy, spec: GymHostSpec | None = None) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container(policy, spec)["env"]}


def template_hash_of(policy: ClusterPolicy, spec: GymHostSpec) -> str:
    return str(build(policy, spec)["metadata"]["annotations"][TEMPLATE_HASH_ANNOTATION])


# --- identity ---------------------------------------------------------------------------------------------


def test_pod_name_is_the_owner_child_name(policy: ClusterPolicy) -> None:
    assert build(policy)["metadata"]["name"] == child_name("swe-gym-run-1", "host")


def test_pod_carries_the_host_labels_the_service_selects(policy: ClusterPolicy) -> None:
    assert build(policy)["metadata"]["labels"] == child_labels(OWNER)


def test_pod_is_controlled_by_the_host(policy: ClusterPolicy) -> None:
    assert build(policy)["metadata"]["ownerReferences"] == [OWNER.reference()]


# --- runtime profile ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("runtime", "runtime_class", "node_selector"),
    [
        ("kata", "kata-qemu", {"gymsandbox.dev/runtime": "kata"}),
        ("crun", "crun", {"gymsandbox.dev/runtime": "crun"}),
    ],
)
def test_runtime_class_and_node_selector_come_from_the_profile(
    policy: ClusterPolicy, runtime: str, runtime_class: str, node_selector: dict[str, str]
) -> None:
    spec = pod_spec(policy, make_spec(runtime=runtime))
    assert (spec["runtimeClassName"], spec["nodeSelector"]) == (runtime_class, node_selector)


def test_profile_without_tolerations_adds_none(policy: ClusterPolicy) -> None:
    assert "tolerations" not in pod_spec(policy)


def test_profile_tolerations_are_rendered_in_core_v1_shape() -> None:
    tolerant = ClusterPolicy.model_validate(
        {
            "runtimeProfiles": {
                "kata": {
                    "runtimeClassName": "kata-qemu",
                    "tolerations": [
                        {
                            "key": "gymsandbox.dev/runtime",
                            "operator": "Equal",
                            "value": "kata",
                            "effect": "NoSchedule",
                        },
                        {"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30},
                    ],
                }
            }
        }
    )
    assert pod_spec(tolerant)["tolerations"] == [
        {"key": "gymsandbox.dev/runtime", "operator": "Equal", "value": "kata", "effect": "NoSchedule"},
        {"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30},
    ]


# --- isolation ----------------------------------------------------------------------------------------------


def test_service_account_token_is_not_mounted(policy: ClusterPolicy) -> None:
    assert pod_spec(policy)["automountServiceAccountToken"] is False


def test_service_links_are_disabled(policy: ClusterPolicy) -> None:
    assert pod_spec(policy)["enableServiceLinks"] is False


@pytest.mark.parametrize("field", ["hostNetwork", "hostPID", "hostIPC", "hostUsers", "shareProcessNamespace"])
def test_pod_shares_no_host_namespace(policy: ClusterPolicy, field: str) -> None:
    assert pod_spec(policy).get(field) in (None, False)


def test_pod_has_no_host_path_volume(policy: ClusterPolicy) -> None:
    assert all("hostPath" not in v for v in pod_spec(policy)["volumes"])


def test_pod_volumes_are_only_types_pod_security_restricted_allows(policy: ClusterPolicy) -> None:
    allowed = {"persistentVolumeClaim", "emptyDir", "configMap", "secret", "projected", "downwardAPI", "csi"}
    kinds = {key for v in pod_spec(policy)["volumes"] for key in v if key != "name"}
    assert kinds <= allowed


def test_container_publishes_no_host_port(policy: ClusterPolicy) -> None:
    assert all("hostPort" not in p for p in container(policy)["ports"])


def test_pod_has_only_the_one_container(policy: ClusterPolicy) -> None:
    spec = pod_spec(policy)
    assert (
        [c["name"] for c in spec["containers"]],
        spec.get("initContainers"),
        spec.get("ephemeralContainers"),
    ) == (
        ["gym"],
        None,
        None,
    )


# --- Pod Security "restricted" ------------------------------------------------------------------------------


def test_pod_security_context_runs_as_non_root(policy: ClusterPolicy) -> None:
    assert pod_spec(policy)["securityContext"]["runAsNonRoot"] is True


def test_pod_security_context_runs_as_a_non_zero_uid(policy: ClusterPolicy) -> None:
    uid = pod_spec(policy)["securityContext"]["runAsUser"]
    assert isinstance(uid, int)
    assert uid > 0


def test_pod_security_context_uses_the_runtime_default_seccomp_profile(policy: ClusterPolicy) -> None:
    assert pod_spec(policy)["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}


def test_container_disallows_privilege_escalation(policy: ClusterPolicy) -> None:
    assert container(policy)["securityContext"]["allowPrivilegeEscalation"] is False


def test_container_is_not_privileged(policy: ClusterPolicy) -> None:
    assert container(policy)["securityContext"].get("privileged") in (None, False)


def test_container_drops_all_capabilities_and_adds_none(policy: ClusterPolicy) -> None:
    assert container(policy)["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def test_container_runs_as_non_root(policy: ClusterPolicy) -> None:
    assert container(policy)["securityContext"]["runAsNonRoot"] is True


def test_container_runs_as_a_non_zero_uid(policy: ClusterPolicy) -> None:
    uid = container(policy)["securityContext"]["runAsUser"]
    assert isinstance(uid, int)
    assert uid > 0


def test_container_uses_the_runtime_default_seccomp_profile(policy: ClusterPolicy) -> None:
    assert container(policy)["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}


# --- storage ------------------------------------------------------------------------------------------------


def test_environment_sub_path_is_mounted_read_only(policy: ClusterPolicy) -> None:
    mount = mount_at(policy, "/env")
    assert (mount["subPath"], mount["readOnly"]) == ("environments/swe-env-1.4.2", True)


def test_workspace_is_mounted_read_write_from_the_hosts_own_tree(policy: ClusterPolicy) -> None:
    mount = mount_at(policy, "/workspace")
    assert (mount["subPath"], mount["readOnly"]) == (".gymsandbox/hosts/uid-1/workspace", False)


def test_episodes_workspaces_are_mounted_read_only_where_the_spec_says(policy: ClusterPolicy) -> None:
    mount = mount_at(policy, "/episodes")
    assert (mount["subPath"], mount["readOnly"]) == (".gymsandbox/hosts/uid-1/episodes", True)
    moved = make_spec(**{"storage.workspace.episodesMountPath": "/runs"})
    assert [m["mountPath"] for m in container(policy, moved)["volumeMounts"] if m["readOnly"]] == [
        "/env",
        "/runs",
        "/var/run/secrets/gymsandbox",
        "/data",
    ]


def test_no_spec_field_reaches_a_writable_sub_path(policy: ClusterPolicy) -> None:
    """Whatever a spec says, the one sub-path mounted writable is in the operator's tree, keyed by uid."""
    writable = [
        m["subPath"] for m in container(policy)["volumeMounts"] if "subPath" in m and not m["readOnly"]
    ]
    assert writable == [".gymsandbox/hosts/uid-1/workspace"]


def test_environment_and_workspaces_come_from_the_storage_claim(policy: ClusterPolicy) -> None:
    names = {mount_at(policy, path)["name"] for path in ("/env", "/workspace", "/episodes")}
    assert len(names) == 1
    assert volume(policy, names.pop())["persistentVolumeClaim"] == {"claimName": "gym-storage"}


def test_dataset_sub_path_is_mounted_read_only(policy: ClusterPolicy) -> None:
    mount = mount_at(policy, "/data")
    assert (mount["subPath"], mount["readOnly"]) == ("swe-bench/verified", True)


def test_dataset_claim_volume_is_read_only(policy: ClusterPolicy) -> None:
    name = mount_at(policy, "/data")["name"]
    assert volume(policy, name)["persistentVolumeClaim"] == {"claimName": "datasets", "readOnly": True}


def test_no_dataset_means_no_dataset_mount_or_volume(policy: ClusterPolicy) -> None:
    spec = make_spec(**{"storage.dataset": None})
    claims = [
        v["persistentVolumeClaim"]["claimName"]
        for v in pod_spec(policy, spec)["volumes"]
        if "persistentVolumeClaim" in v
    ]
    mounts = [m["mountPath"] for m in container(policy, spec)["volumeMounts"]]
    assert (claims, "/data" in mounts) == (["gym-storage"], False)


def test_every_mount_the_spec_does_not_place_is_one_the_storage_rule_keeps_spec_mounts_off(
    policy: ClusterPolicy,
) -> None:
    """The storage rule refuses a spec mount path that is, contains or lies inside the operator's own."""
    storage = make_spec().storage
    assert storage.dataset is not None
    placed_by_the_spec = {
        storage.environment.mount_path,
        storage.workspace.mount_path,
        storage.workspace.episodes_mount_path,
        storage.dataset.mount_path,
    }
    mounts = {m["mountPath"] for m in container(policy)["volumeMounts"]}

    assert mounts - placed_by_the_spec == set(OPERATOR_MOUNT_PATHS)


def test_every_mount_names_a_defined_volume(policy: ClusterPolicy) -> None:
    volumes = {v["name"] for v in pod_spec(policy)["volumes"]}
    assert {m["name"] for m in container(policy)["volumeMounts"]} <= volumes


# --- probe, resources ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("path", "port"), [("/health", 8080), ("/v1/ready", 9000)])
def test_readiness_probe_gets_the_readiness_path_on_the_host_port(
    policy: ClusterPolicy, path: str, port: int
) -> None:
    gym = container(policy, make_spec(readinessPath=path, port=port))
    probe_port = gym["readinessProbe"]["httpGet"]["port"]
    named = {p["name"]: p["containerPort"] for p in gym["ports"]}
    assert (gym["readinessProbe"]["httpGet"]["path"], named.get(probe_port, probe_port)) == (path, port)


@pytest.mark.parametrize("gpu", [0, 1, 4])
def test_requests_equal_limits(policy: ClusterPolicy, gpu: int) -> None:
    resources = container(policy, make_spec(**{"resources.gpu": gpu}))["resources"]
    assert resources["requests"] == resources["limits"]


def test_limits_include_cpu_memory_and_ephemeral_storage(policy: ClusterPolicy) -> None:
    assert container(policy)["resources"]["limits"] == {
        "cpu": "2",
        "memory": "4Gi",
        "ephemeral-storage": "10Gi",
    }


def test_no_gpu_is_requested_when_gpu_is_zero(policy: ClusterPolicy) -> None:
    resources = container(policy, make_spec(**{"resources.gpu": 0}))["resources"]
    assert "nvidia.com/gpu" not in resources["limits"]
    assert "nvidia.com/gpu" not in resources["requests"]


@pytest.mark.parametrize("gpu", [1, 4])
def test_gpus_are_requested_and_limited_when_gpu_is_positive(policy: ClusterPolicy, gpu: int) -> None:
    resources = container(policy, make_spec(**{"resources.gpu": gpu}))["resources"]
    assert (resources["requests"]["nvidia.com/gpu"], resources["limits"]["nvidia.com/gpu"]) == (
        str(gpu),
        str(gpu),
    )


# --- environment --------------------------------------------------------------------------------------------


def test_env_contains_the_user_variables(policy: ClusterPolicy) -> None:
    env = env_by_name(policy)
    assert (env["GYM_TASK_SET"], env["LOG_LEVEL"]) == (
        {"name": "GYM_TASK_SET", "value": "verified-50"},
        {"name": "LOG_LEVEL", "value": "debug"},
    )


def test_env_contains_the_broker_url_from_the_policy(policy: ClusterPolicy) -> None:
    assert env_by_name(policy)[ENV_BROKER_URL] == {"name": ENV_BROKER_URL, "value": policy.broker.url}


def test_env_hands_the_brokers_ca_to_the_host_when_the_policy_has_one(policy: ClusterPolicy) -> None:
    ca = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    broker = policy.broker.model_copy(update={"url": "https://broker.example:8443", "ca_bundle": ca})
    with_ca = policy.model_copy(update={"broker": broker})
    assert env_by_name(with_ca)[ENV_BROKER_CA] == {"name": ENV_BROKER_CA, "value": ca}
    assert ENV_BROKER_CA not in env_by_name(policy)


def test_lease_token_comes_from_the_lease_secret(policy: ClusterPolicy) -> None:
    assert env_by_name(policy)[ENV_LEASE_TOKEN] == {
        "name": ENV_LEASE_TOKEN,
        "valueFrom": {"secretKeyRef": {"name": SECRET_NAME, "key": LEASE_TOKEN_KEY}},
    }


def test_lease_token_is_also_a_file_of_the_mounted_lease_secret(policy: ClusterPolicy) -> None:
    """A file follows the Secret when the operator renews the token or rotates the key; a variable not."""
    assert env_by_name(policy)[ENV_LEASE_TOKEN_FILE]["value"] == "/var/run/secrets/gymsandbox/token"
    mount = mount_at(policy, "/var/run/secrets/gymsandbox")
    assert (mount["readOnly"], "subPath" in mount) == (True, False)
    assert volume(policy, mount["name"])["secret"] == {
        "secretName": SECRET_NAME,
        "items": [{"key": LEASE_TOKEN_KEY, "path": LEASE_TOKEN_KEY}],
        "defaultMode": 0o440,
    }


def test_lease_token_is_never_a_literal_value(policy: ClusterPolicy) -> None:
    assert "value" not in env_by_name(policy)[ENV_LEASE_TOKEN]


def test_env_has_exactly_the_user_variables_a_home_and_the_injected_ones(policy: ClusterPolicy) -> None:
    env = container(policy)["env"]
    assert [e["name"] for e in env] == [
        "GYM_TASK_SET",
        "LOG_LEVEL",
        "HOME",
        ENV_BROKER_URL,
        ENV_LEASE_TOKEN,
        ENV_LEASE_TOKEN_FILE,
    ]
    assert env[2] == {"name": "HOME", "value": "/tmp"}  # the emptyDir: the root file system is read-only


def test_env_from_references_secrets_with_their_prefixes(policy: ClusterPolicy) -> None:
    assert container(policy)["envFrom"] == [
        {"secretRef": {"name": "openai-credentials"}, "prefix": "OPENAI_"},
        {"secretRef": {"name": "hf-credentials"}},
    ]


def test_no_env_from_sources_means_no_env_from(policy: ClusterPolicy) -> None:
    assert "envFrom" not in container(policy, make_spec(envFrom=[]))


# --- command ------------------------------------------------------------------------------------------------


def test_command_and_args_are_passed_through(policy: ClusterPolicy) -> None:
    gym = container(policy, make_spec(command=["python", "-m", "gym"], args=["--port", "8080"]))
    assert (gym["command"], gym["args"]) == (["python", "-m", "gym"], ["--port", "8080"])


def test_command_and_args_are_left_to_the_image_when_unset(policy: ClusterPolicy) -> None:
    gym = container(policy)
    assert ("command" in gym, "args" in gym) == (False, False)


# --- template hash ------------------------------------------------------------------------------------------


def test_the_kubelet_ends_the_host_pod_at_its_deadline_which_is_no_part_of_its_template(
    policy: ClusterPolicy,
) -> None:
    """A pod made a minute later has a shorter deadline but the same template: it is not replaced for it."""
    early, later = build(policy, deadline=3600), build(policy, deadline=3540)
    assert (early["spec"]["activeDeadlineSeconds"], later["spec"]["activeDeadlineSeconds"]) == (3600, 3540)
    hashes = {pod["metadata"]["annotations"][TEMPLATE_HASH_ANNOTATION] for pod in (early, later)}
    assert len(hashes) == 1


def test_template_hash_is_the_same_for_the_same_spec(policy: ClusterPolicy) -> None:
    assert template_hash_of(policy, make_spec()) == template_hash_of(policy, make_spec())


def test_template_hash_changes_when_the_image_changes(policy: ClusterPolicy) -> None:
    changed = make_spec(image="registry.example.com/gym/swe-env:1.4.3")
    assert template_hash_of(policy, changed) != template_hash_of(policy, make_spec())


@pytest.mark.parametrize(
    "change",
    [
        pytest.param({"egress.allow": ["198.51.100.0/24:443"]}, id="egress-allow"),
        pytest.param({"egress.modelEndpoints": []}, id="model-endpoints"),
        pytest.param({"lifetime.ttlSeconds": 60}, id="ttl"),
        pytest.param({"lifetime.expiryPolicy": "Retain"}, id="expiry-policy"),
        pytest.param({"episodes.maxConcurrent": 2}, id="episodes"),
    ],
)
def test_template_hash_ignores_fields_that_are_not_in_the_pod(
    policy: ClusterPolicy, change: dict[str, Any]
) -> None:
    assert template_hash_of(policy, make_spec(**change)) == template_hash_of(policy, make_spec())
