"""GymHost: one isolated environment host per evaluation run. The model is the CRD's source of truth."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated

from pydantic import ConfigDict, Field, model_validator
from pydantic.config import JsonDict

from gymsandbox.api.common import (
    DNS_LABEL_PATTERN,
    ENV_NAME_PATTERN,
    SUB_PATH_PATTERN,
    Conditions,
    DnsLabel,
    Failure,
    Lifetime,
    Model,
    MountPath,
    Resources,
    cel,
    list_map,
)
from gymsandbox.api.names import ENV_PREFIX_RESERVED, LEASE_MOUNT_PATH, TMP_MOUNT_PATH

# Container image reference: [registry[:port]/]path[:tag][@sha256:digest], lower-case path components.
IMAGE_PATTERN = (
    r"^([a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?(\.[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?)*(:[0-9]+)?/)?"
    r"[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*(/[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*)*"
    r"(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@sha256:[a-f0-9]{64})?$"
)
_REGISTRY = r"([a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?(\.[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?)*(:[0-9]+)?/)?"
_PATH_COMPONENT = r"[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*"
# An image reference, or a prefix ending in "/" that approves every image under that path.
IMAGE_OR_PREFIX_PATTERN = rf"^(({IMAGE_PATTERN[1:-1]})|({_REGISTRY}({_PATH_COMPONENT}/)+))$"
_PORT = r"([1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])"
_DNS_NAME = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_IPV4 = r"[0-9]{1,3}(\.[0-9]{1,3}){3}(/[0-9]{1,2})?"
_IPV6 = r"\[[0-9a-fA-F:.]+(/[0-9]{1,3})?\]"
# host:port where host is a DNS name, an IPv4 address or CIDR, or a bracketed IPv6 address or CIDR.
EGRESS_ENTRY_PATTERN = rf"^({_DNS_NAME}|{_IPV4}|{_IPV6}):{_PORT}$"
# http(s)://host[:port][/path]; the host and port join the allowlist. No query or fragment: a key passed in
# a URL would sit in spec for anyone who can read the object.
MODEL_ENDPOINT_PATTERN = rf"^https?://({_DNS_NAME}|{_IPV4}|\[[0-9a-fA-F:.]+\])(:{_PORT})?(/[^\s?#]*)?$"
# Variable names that look like they carry a credential belong in envFrom secret references: a plain value
# sits in spec for anyone who can read the object. GymHost and EpisodeSandbox env refuse them alike.
# Names that look like credentials, whatever joins their words ("API_KEY", "api-key", "api.key", "APIKEY":
# Kubernetes env names may hold - and . as well as _).
CREDENTIAL_NAME_PATTERN = (
    r"(?i)(TOKEN|SECRET|PASSW(OR)?D|API[-_.]?KEY|ACCESS[-_.]?KEY|PRIVATE[-_.]?KEY|CREDENTIAL|AUTH)"
)

EgressEntry = Annotated[str, Field(pattern=EGRESS_ENTRY_PATTERN, max_length=128)]
ModelEndpoint = Annotated[str, Field(pattern=MODEL_ENDPOINT_PATTERN, max_length=256)]
Image = Annotated[str, Field(pattern=IMAGE_PATTERN, min_length=1, max_length=512)]
ImageOrPrefix = Annotated[str, Field(pattern=IMAGE_OR_PREFIX_PATTERN, min_length=1, max_length=512)]
DnsSubdomain = Annotated[
    str, Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$", max_length=253)
]


class SubPathMount(Model):
    sub_path: str = Field(
        pattern=SUB_PATH_PATTERN,
        max_length=253,
        description="Directory inside the claim, relative, without '.' or '..' segments.",
    )
    mount_path: MountPath = Field(description="Absolute path in the container.")


class DatasetMount(SubPathMount):
    claim_name: DnsSubdomain = Field(
        description="PersistentVolumeClaim holding the dataset (mounted read-only)."
    )


class HostWorkspace(Model):
    mount_path: MountPath = Field(
        description="Where the run's workspace is mounted read-write. Its place on the claim is chosen by the"
        " operator (status.workspaceSubPath), never by the spec: see docs/security.md.",
    )
    episodes_mount_path: MountPath = Field(
        "/episodes",
        description="Where the workspaces of this host's episodes are mounted read-only, one directory per"
        " episode named by its uid (the broker's episode.workspaceDir).",
    )


# What the operator mounts in every host pod itself (desired/pod.py): the lease token and the writable /tmp.
# No mount path of the spec may be one of them, contain one or lie inside one.
OPERATOR_MOUNT_PATHS = (LEASE_MOUNT_PATH, TMP_MOUNT_PATH)
NESTED_MOUNT_PATHS_MESSAGE = (
    "mountPaths must be distinct and none may contain another, the operator's own"
    f" {' and '.join(OPERATOR_MOUNT_PATHS)} included"
)
_OPERATOR_MOUNT_PATH_LITERALS = ", ".join(f"'{path}'" for path in OPERATOR_MOUNT_PATHS)
_MOUNT_PATHS = (
    f"([{_OPERATOR_MOUNT_PATH_LITERALS}, self.environment.mountPath, self.workspace.mountPath,"
    " self.workspace.episodesMountPath]"
    " + (has(self.dataset) ? [self.dataset.mountPath] : []))"
)


def nested_mount_paths(paths: list[str]) -> bool:
    """True when two of `paths` are the same directory or one contains the other.

    Sound for paths in normal form only (MountPath): "/x/../workspace/env" is inside "/workspace" but does not
    start with it.
    """
    dirs = [p.rstrip("/") + "/" for p in paths]
    return any(i != j and b.startswith(a) for i, a in enumerate(dirs) for j, b in enumerate(dirs))


class Storage(Model):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel(
                    # For each path a, a itself is the only path equal to a or below it.
                    f"{_MOUNT_PATHS}.all(a, {_MOUNT_PATHS}.filter(b,"
                    " b == a || b.startsWith(a.endsWith('/') ? a : a + '/')).size() == 1)",
                    NESTED_MOUNT_PATHS_MESSAGE,
                ),
            ]
        }
    )

    claim_name: DnsSubdomain = Field(description="PersistentVolumeClaim holding environment and workspace.")
    environment: SubPathMount = Field(description="The Gym environment, mounted read-only.")
    workspace: HostWorkspace = Field(description="The run's scratch space, mounted read-write.")
    dataset: DatasetMount | None = Field(None, description="Optional dataset from another claim, read-only.")

    @model_validator(mode="after")
    def _distinct(self) -> Storage:
        mounts = [
            *OPERATOR_MOUNT_PATHS,
            self.environment.mount_path,
            self.workspace.mount_path,
            self.workspace.episodes_mount_path,
        ]
        if self.dataset:
            mounts.append(self.dataset.mount_path)
        if nested_mount_paths(mounts):
            raise ValueError(NESTED_MOUNT_PATHS_MESSAGE)
        return self


class Egress(Model):
    allow: list[EgressEntry] = Field(
        default_factory=list,
        max_length=64,
        description="host:port entries (DNS name, IP, CIDR, or [IPv6]) the host may reach. Everything else is"
        " denied except DNS and the broker.",
    )
    model_endpoints: list[ModelEndpoint] = Field(
        default_factory=list,
        max_length=16,
        description="Base URLs of model servers; each becomes a host:port allow entry (port from the scheme"
        " when absent).",
    )


# Where a GymHost's credentials go instead of env.
WHERE_HOST_CREDENTIALS_GO = "envFrom secret references"


def credential_name_rule(where_credentials_go: str) -> JsonDict:
    """The CEL rule of an env item refusing a name that looks like a credential; `where_credentials_go` says
    where credentials go instead."""
    return cel(
        f"!self.name.matches('{CREDENTIAL_NAME_PATTERN}')",
        f"this name looks like a credential: pass credentials with {where_credentials_go}",
    )


def refuse_credential_name(name: str, where_credentials_go: str) -> None:
    """Raise, naming the variable, when `name` looks like it carries a credential (credential_name_rule's
    check, for the models)."""
    if re.search(CREDENTIAL_NAME_PATTERN, name):
        raise ValueError(f"env {name}: looks like a credential; use {where_credentials_go}")


class EnvVar(Model):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                credential_name_rule(WHERE_HOST_CREDENTIALS_GO),
                cel(
                    f"!self.name.startsWith('{ENV_PREFIX_RESERVED}')",
                    f"names starting with {ENV_PREFIX_RESERVED} are reserved for the operator",
                ),
            ]
        }
    )

    name: str = Field(pattern=ENV_NAME_PATTERN, max_length=128, description="Variable name.")
    value: str = Field("", max_length=4096, description="Plain value; never a credential.")

    @model_validator(mode="after")
    def _not_a_credential(self) -> EnvVar:
        refuse_credential_name(self.name, WHERE_HOST_CREDENTIALS_GO)
        if self.name.startswith(ENV_PREFIX_RESERVED):
            raise ValueError(f"env {self.name}: names starting with {ENV_PREFIX_RESERVED} are reserved")
        return self


class SecretReference(Model):
    name: DnsSubdomain = Field(description="Secret in the same namespace.")


class EnvFromSource(Model):
    secret_ref: SecretReference = Field(
        description="Secret whose keys become variables (values never copied)."
    )
    prefix: str | None = Field(
        None, pattern=ENV_NAME_PATTERN, max_length=64, description="Prefix for each key."
    )


class Episodes(Model):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel(
                    "self.defaultTTLSeconds <= self.maxTTLSeconds",
                    "defaultTTLSeconds must not exceed maxTTLSeconds",
                )
            ]
        }
    )

    max_concurrent: int = Field(
        4, ge=1, le=1000, description="Episodes running at once; more wait in FIFO order."
    )
    images: list[ImageOrPrefix] = Field(
        default_factory=list,
        max_length=32,
        description="Images episodes may use; each must be cluster-approved.",
    )
    default_ttl_seconds: int = Field(
        600, ge=1, le=86_400, alias="defaultTTLSeconds", description="Default TTL."
    )
    max_ttl_seconds: int = Field(
        3600, ge=1, le=86_400, alias="maxTTLSeconds", description="Longest TTL allowed."
    )
    runtime: DnsLabel | None = Field(
        None, description="Runtime profile for episodes; defaults to the host's."
    )

    @model_validator(mode="after")
    def _ttl_order(self) -> Episodes:
        if self.default_ttl_seconds > self.max_ttl_seconds:
            raise ValueError("defaultTTLSeconds must not exceed maxTTLSeconds")
        return self


class GymHostSpec(Model):
    """What the evaluation asks for: image, runtime profile, storage, egress, environment and limits."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel("self.runtime == oldSelf.runtime", "runtime is immutable", reason="FieldValueForbidden"),
                cel("self.storage == oldSelf.storage", "storage is immutable", reason="FieldValueForbidden"),
            ]
        }
    )

    image: Image = Field(
        description="Container image of the Gym host; must be on the cluster's approved list."
    )
    command: list[Annotated[str, Field(max_length=4096)]] | None = Field(
        None, max_length=64, description="Entrypoint override."
    )
    args: list[Annotated[str, Field(max_length=4096)]] | None = Field(
        None, max_length=256, description="Arguments to the entrypoint."
    )
    port: int = Field(8080, ge=1, le=65535, description="HTTP port the host serves on.")
    readiness_path: str = Field(
        "/health",
        pattern=r"^/[A-Za-z0-9._~/-]*$",
        max_length=256,
        description="HTTP GET path of the readiness probe.",
    )
    runtime: str = Field(
        pattern=DNS_LABEL_PATTERN,
        max_length=63,
        description="Runtime profile (e.g. kata, crun) mapped by cluster policy to a RuntimeClass."
        " Immutable.",
    )
    storage: Storage = Field(
        description="The environment and dataset sub-paths, and where each mount goes. Immutable."
    )
    egress: Egress = Field(
        default_factory=Egress, description="Network allowlist; everything else is denied."
    )
    env: list[EnvVar] = Field(
        default_factory=list,
        max_length=128,
        json_schema_extra=list_map("name"),
        description="Plain environment variables, one per name.",
    )
    env_from: list[EnvFromSource] = Field(
        default_factory=list, max_length=16, description="Secret references for credentials."
    )
    resources: Resources = Field(
        default_factory=Resources, description="Compute resources (requests = limits)."
    )
    lifetime: Lifetime = Field(default_factory=Lifetime, description="Time to live and what expiry does.")
    episodes: Episodes = Field(
        default_factory=Episodes, description="Limits for this host's episode sandboxes."
    )

    @model_validator(mode="after")
    def _unique_env_names(self) -> GymHostSpec:
        names = [e.name for e in self.env]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"env names must be unique: {', '.join(duplicates)}")
        return self


class ResolvedEgress(Model):
    entry: str = Field(description="The allow entry as written (host:port).")
    addresses: list[str] = Field(
        default_factory=list, description="CIDRs the entry resolved to at last check."
    )


class EpisodeCounts(Model):
    active: int = Field(0, ge=0, description="Episodes admitted and not yet closed.")
    queued: int = Field(0, ge=0, description="Episodes waiting for capacity.")


class GymHostStatus(Model):
    """What the operator observed; written only by the operator."""

    observed_generation: int | None = Field(None, description="The generation the status was computed from.")
    conditions: Conditions = Field(
        default_factory=list, description="Accepted, EgressReady, PodScheduled, Ready, Reconciling, Stalled."
    )
    endpoint: str | None = Field(None, description="http://service.namespace.svc:port once Ready.")
    pod_name: str | None = Field(None, description="The host pod.")
    pod_ip: str | None = Field(None, alias="podIP", description="The host pod's IP.")
    lease_secret_name: str | None = Field(None, description="Secret holding the lease token.")
    workspace_sub_path: str | None = Field(
        None,
        description="Where the workspace is on the claim; an episode's is at episodesSubPath/<its uid>.",
    )
    episodes_sub_path: str | None = Field(
        None, description="Where the episodes' workspaces are on the claim."
    )
    expires_at: datetime | None = Field(None, description="When lifetime.ttlSeconds runs out.")
    resolved_egress: list[ResolvedEgress] = Field(
        default_factory=list, description="Each allow entry and the addresses it resolved to."
    )
    episodes: EpisodeCounts | None = Field(None, description="Episode counts.")
    failure: Failure | None = Field(None, description="Why the host is not Ready, classified.")
