"""The host Pod: restricted by Pod Security, in the profile's RuntimeClass, with sub-path mounts."""

from __future__ import annotations

from dataclasses import dataclass

from gymsandbox.api.common import Resources
from gymsandbox.api.episode import EpisodeResources, EpisodeSandboxSpec
from gymsandbox.api.gymhost import GymHostSpec
from gymsandbox.api.names import (
    ENV_BROKER_CA,
    ENV_BROKER_URL,
    ENV_LEASE_TOKEN,
    ENV_LEASE_TOKEN_FILE,
    LEASE_MOUNT_PATH,
    LEASE_TOKEN_KEY,
    TMP_MOUNT_PATH,
    USER_LABEL_PREFIX,
)
from gymsandbox.desired.labels import child_labels, sandbox_pod_labels
from gymsandbox.desired.names import CHILD_SUFFIXES, owned_child_name
from gymsandbox.desired.owner import TEMPLATE_HASH_ANNOTATION, Manifest, Owner, template_hash
from gymsandbox.desired.workspace import (
    episode_workspace_sub_path,
    host_episodes_sub_path,
    host_workspace_sub_path,
)
from gymsandbox.policy.cluster import Broker, ClusterPolicy, RuntimeProfile

CONTAINER_NAME = "gym"
# A fixed unprivileged identity: Pod Security `restricted` needs non-root, and a numeric uid lets the
# kubelet verify it without trusting the image's USER line.
RUN_AS_USER = 65532
STORAGE_VOLUME = "storage"
LEASE_VOLUME = "lease"
DATASET_VOLUME = "dataset"
TMP_VOLUME = "tmp"
# HOME when the spec gives none: most images set no HOME and have no account for RUN_AS_USER, so it would be
# "/", which that user cannot write (the host's root file system is read-only besides). /tmp is writable in
# both: the host's emptyDir, and the episode's own root file system.
DEFAULT_HOME = "/tmp"  # noqa: S108 - the container's own /tmp


def with_home(env: list[dict[str, object]]) -> list[dict[str, object]]:
    """`env`, plus HOME=DEFAULT_HOME unless it sets HOME itself."""
    if any(e["name"] == "HOME" for e in env):
        return env
    return [*env, {"name": "HOME", "value": DEFAULT_HOME}]


def host_pod_name(owner: Owner) -> str:
    return owned_child_name(owner.kind, owner.name, "Pod")


def restricted_container_security(
    user: int = RUN_AS_USER, *, read_only_root: bool = True
) -> dict[str, object]:
    """What Pod Security `restricted` asks of a container, running as `user` (never 0)."""
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "privileged": False,
        "readOnlyRootFilesystem": read_only_root,
        "runAsNonRoot": True,
        "runAsUser": user,
        "runAsGroup": user,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def restricted_pod_security(user: int = RUN_AS_USER) -> dict[str, object]:
    return {
        "runAsNonRoot": True,
        "runAsUser": user,
        "runAsGroup": user,
        "fsGroup": user,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def resource_limits(resources: Resources | EpisodeResources) -> dict[str, str]:
    limits = {
        "cpu": resources.cpu,
        "memory": resources.memory,
        "ephemeral-storage": resources.ephemeral_storage,
    }
    if resources.gpu:
        limits["nvidia.com/gpu"] = str(resources.gpu)
    return limits


def _env(spec: GymHostSpec, broker: Broker, secret_name: str) -> list[dict[str, object]]:
    env: list[dict[str, object]] = [{"name": e.name, "value": e.value} for e in spec.env]
    env = with_home(env)
    env.append({"name": ENV_BROKER_URL, "value": broker.url})
    if broker.ca_bundle:
        env.append({"name": ENV_BROKER_CA, "value": broker.ca_bundle})
    env.append(
        {
            "name": ENV_LEASE_TOKEN,
            "valueFrom": {"secretKeyRef": {"name": secret_name, "key": LEASE_TOKEN_KEY}},
        }
    )
    env.append({"name": ENV_LEASE_TOKEN_FILE, "value": f"{LEASE_MOUNT_PATH}/{LEASE_TOKEN_KEY}"})
    return env


def _env_from(spec: GymHostSpec) -> list[dict[str, object]]:
    sources: list[dict[str, object]] = []
    for source in spec.env_from:
        entry: dict[str, object] = {"secretRef": {"name": source.secret_ref.name}}
        if source.prefix:
            entry["prefix"] = source.prefix
        sources.append(entry)
    return sources


def _mounts_and_volumes(
    host_uid: str, spec: GymHostSpec, secret_name: str
) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    storage = spec.storage
    mounts: list[dict[str, object]] = [
        {
            "name": STORAGE_VOLUME,
            "mountPath": storage.environment.mount_path,
            "subPath": storage.environment.sub_path,
            "readOnly": True,
        },
        {
            "name": STORAGE_VOLUME,
            "mountPath": storage.workspace.mount_path,
            "subPath": host_workspace_sub_path(host_uid),
            "readOnly": False,
        },
        {
            "name": STORAGE_VOLUME,
            "mountPath": storage.workspace.episodes_mount_path,
            "subPath": host_episodes_sub_path(host_uid),
            "readOnly": True,
        },
        {"name": TMP_VOLUME, "mountPath": TMP_MOUNT_PATH, "readOnly": False},
        # The lease token as a file following its Secret (renewal, key rotation); a subPath would not follow.
        {"name": LEASE_VOLUME, "mountPath": LEASE_MOUNT_PATH, "readOnly": True},
    ]
    volumes: list[dict[str, object]] = [
        {"name": STORAGE_VOLUME, "persistentVolumeClaim": {"claimName": storage.claim_name}},
        {"name": TMP_VOLUME, "emptyDir": {"sizeLimit": "256Mi"}},
        {
            "name": LEASE_VOLUME,
            "secret": {
                "secretName": secret_name,
                "items": [{"key": LEASE_TOKEN_KEY, "path": LEASE_TOKEN_KEY}],
                "defaultMode": 0o440,  # the pod's group (fsGroup) reads it; nobody writes it
            },
        },
    ]
    if storage.dataset:
        mounts.append(
            {
                "name": DATASET_VOLUME,
                "mountPath": storage.dataset.mount_path,
                "subPath": storage.dataset.sub_path,
                "readOnly": True,
            }
        )
        volumes.append(
            {
                "name": DATASET_VOLUME,
                "persistentVolumeClaim": {"claimName": storage.dataset.claim_name, "readOnly": True},
            }
        )
    return mounts, volumes


def _container(owner: Owner, spec: GymHostSpec, broker: Broker, secret_name: str) -> dict[str, object]:
    mounts, _ = _mounts_and_volumes(owner.uid, spec, secret_name)
    limits = resource_limits(spec.resources)
    container: dict[str, object] = {
        "name": CONTAINER_NAME,
        "image": spec.image,
        "ports": [{"name": "http", "containerPort": spec.port, "protocol": "TCP"}],
        "env": _env(spec, broker, secret_name),
        "resources": {"requests": dict(limits), "limits": limits},
        "readinessProbe": {
            "httpGet": {"path": spec.readiness_path, "port": "http"},
            "periodSeconds": 5,
            "failureThreshold": 3,
        },
        "securityContext": restricted_container_security(),
        "volumeMounts": mounts,
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    if spec.command:
        container["command"] = list(spec.command)
    if spec.args:
        container["args"] = list(spec.args)
    env_from = _env_from(spec)
    if env_from:
        container["envFrom"] = env_from
    return container


def runtime_scheduling(profile: RuntimeProfile) -> dict[str, object]:
    """RuntimeClass and node placement from the profile: the pod runs there or nowhere, never elsewhere."""
    scheduling: dict[str, object] = {"runtimeClassName": profile.runtime_class_name}
    if profile.node_selector:
        scheduling["nodeSelector"] = dict(profile.node_selector)
    if profile.tolerations:
        scheduling["tolerations"] = [t.wire() if hasattr(t, "wire") else dict(t) for t in profile.tolerations]
    return scheduling


def host_pod(
    owner: Owner, spec: GymHostSpec, policy: ClusterPolicy, secret_name: str, *, deadline_seconds: int
) -> Manifest:
    """The pod for an admitted spec; the caller has checked that spec.runtime names a known profile. The
    kubelet ends it after `deadline_seconds` (activeDeadlineSeconds) whatever happens to the operator: no host
    pod outlives the longest lifetime its host could have."""
    profile = policy.runtime_profiles[spec.runtime]
    _, volumes = _mounts_and_volumes(owner.uid, spec, secret_name)
    pod_spec: dict[str, object] = {
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,  # service env vars would map the cluster for untrusted code
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 10,
        "securityContext": restricted_pod_security(),
        "containers": [_container(owner, spec, policy.broker, secret_name)],
        "volumes": volumes,
        **runtime_scheduling(profile),
        "activeDeadlineSeconds": deadline_seconds,
    }
    # The deadline depends on when the pod is made, not on what it runs: it stays out of the template.
    template = {k: v for k, v in pod_spec.items() if k != "activeDeadlineSeconds"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": owner.metadata(
            host_pod_name(owner), child_labels(owner), {TEMPLATE_HASH_ANNOTATION: template_hash(template)}
        ),
        "spec": pod_spec,
    }


@dataclass(frozen=True)
class EpisodeHost:
    """The GymHost an episode runs for: its uid keys the episode's workspace on the host's claim."""

    uid: str
    spec: GymHostSpec


def episode_pod_name(owner: Owner) -> str:
    return owned_child_name(owner.kind, owner.name, "Pod")


# The chart's broker exec policy (templates/broker-exec-policy.yaml) names both; tests/unit/test_chart.py
# fails if they drift apart.
EPISODE_POD_SUFFIX = CHILD_SUFFIXES["EpisodeSandbox"]["Pod"]
EPISODE_CONTAINER_NAME = "sandbox"
WORKSPACE_VOLUME = "workspace"


def episode_pod(
    owner: Owner,
    spec: EpisodeSandboxSpec,
    host: EpisodeHost,
    profile: RuntimeProfile,
    deadline_seconds: int,
) -> Manifest:
    """The sandbox pod of an admitted episode: restricted, numeric user, optional workspace of its own on the
    host's claim (at a place only the operator chooses, see desired/workspace.py).

    It runs model-generated code, so it gets no token, no service links and no broker address; the root
    filesystem stays writable (tools install packages) within the ephemeral-storage limit. The kubelet ends
    it after `deadline_seconds` (activeDeadlineSeconds) whatever happens to the episode or the operator.
    """
    limits = resource_limits(spec.resources)
    container: dict[str, object] = {
        "name": EPISODE_CONTAINER_NAME,
        "image": spec.image,
        "env": with_home([{"name": e.name, "value": e.value} for e in spec.env]),
        "resources": {"requests": dict(limits), "limits": limits},
        "securityContext": restricted_container_security(spec.user, read_only_root=False),
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    for key, value in (("command", spec.command), ("args", spec.args), ("workingDir", spec.workdir)):
        if value:
            container[key] = list(value) if isinstance(value, list) else value
    volumes: list[dict[str, object]] = []
    if spec.workspace:
        container["volumeMounts"] = [
            {
                "name": WORKSPACE_VOLUME,
                "mountPath": spec.workspace.mount_path,
                "subPath": episode_workspace_sub_path(host.uid, owner.uid),
            }
        ]
        volumes.append(
            {"name": WORKSPACE_VOLUME, "persistentVolumeClaim": {"claimName": host.spec.storage.claim_name}}
        )
    pod_spec: dict[str, object] = {
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "restartPolicy": "Never",  # an episode whose process dies is over; its status says why
        "activeDeadlineSeconds": deadline_seconds,
        # The pod's pause process becomes PID 1 and reaps what the broker's execs leave behind; the user's
        # command (often `sleep infinity`) reaps nothing, and zombies would fill the pid limit.
        "shareProcessNamespace": True,
        "terminationGracePeriodSeconds": 5,
        "securityContext": restricted_pod_security(spec.user),
        "containers": [container],
        "volumes": volumes,
        **runtime_scheduling(profile),
    }
    user_labels = {f"{USER_LABEL_PREFIX}{k}": v for k, v in spec.labels.items()}
    labels = {**user_labels, **sandbox_pod_labels(owner, spec.host_ref.name, host.uid)}
    # The deadline depends on when the pod is made, not on what it runs: it stays out of the template.
    template = {k: v for k, v in pod_spec.items() if k != "activeDeadlineSeconds"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": owner.metadata(
            episode_pod_name(owner), labels, {TEMPLATE_HASH_ANNOTATION: template_hash(template)}
        ),
        "spec": pod_spec,
    }
