"""EpisodeSandbox: a short-lived sandbox for one episode, owned by a GymHost in the same namespace."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated

from pydantic import ConfigDict, Field, model_validator

from gymsandbox.api.common import (
    DNS_LABEL_PATTERN,
    WORKDIR_PATTERN,
    Conditions,
    Failure,
    Model,
    MountPath,
    ResourceQuantity,
    cel,
    list_map,
)
from gymsandbox.api.gymhost import (
    DnsSubdomain,
    EgressEntry,
    Image,
    credential_name_rule,
    refuse_credential_name,
)
from gymsandbox.api.names import USER_LABEL_PREFIX

# Any name a process can take: no "=" and no NUL (execve would split or cut it).
EPISODE_ENV_NAME_PATTERN = r"^[^=\x00]+$"
# Where an episode's credentials go instead of env: an EpisodeSandbox has no envFrom of its own.
WHERE_EPISODE_CREDENTIALS_GO = "the GymHost's envFrom secret references"
ROLLOUT_ID_PATTERN = r"^[A-Za-z0-9]([A-Za-z0-9._:-]*[A-Za-z0-9])?$"
# A label name without a prefix: it reaches the pod only under USER_LABEL_PREFIX, so no user label can select
# the pod into a Service's endpoints, a NetworkPolicy or the chart's own selectors.
LABEL_NAME_PATTERN = r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
LABEL_VALUE_PATTERN = r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$"
# Fields that shape the pod: fixed once created. Only lifetime (renewal) may change.
IMMUTABLE_FIELDS = (
    "hostRef",
    "rolloutId",
    "image",
    "runtime",
    "command",
    "args",
    "user",
    "workdir",
    "env",
    "resources",
    "egress",
    "workspace",
    "labels",
)
MAX_UID = 2_147_483_647
MAX_LABELS = 32
LabelValue = Annotated[str, Field(pattern=LABEL_VALUE_PATTERN, max_length=63)]
LABEL_KEYS_MESSAGE = (
    f"label keys must be plain names without a prefix (the pod carries them as {USER_LABEL_PREFIX}<name>)"
)


def _unchanged(field: str) -> str:
    present = f"has(self.{field}) == has(oldSelf.{field})"
    return f"{present} && (!has(self.{field}) || self.{field} == oldSelf.{field})"


class HostReference(Model):
    name: DnsSubdomain = Field(description="The GymHost in the same namespace that owns this episode.")


class EpisodeEnvVar(Model):
    """A plain variable; as in a GymHost's env, a name that looks like a credential is refused."""

    model_config = ConfigDict(
        json_schema_extra={"x-kubernetes-validations": [credential_name_rule(WHERE_EPISODE_CREDENTIALS_GO)]}
    )

    name: str = Field(pattern=EPISODE_ENV_NAME_PATTERN, min_length=1, max_length=256, description="Name.")
    value: str = Field("", max_length=32768, description="Value.")

    @model_validator(mode="after")
    def _not_a_credential(self) -> EpisodeEnvVar:
        refuse_credential_name(self.name, WHERE_EPISODE_CREDENTIALS_GO)
        return self


class EpisodeResources(Model):
    """Requests equal limits. Checked against the cluster's caps at admission."""

    cpu: ResourceQuantity = Field("500m", description="CPU, e.g. 500m or 2 (more than 0).")
    memory: ResourceQuantity = Field("512Mi", description="Memory, e.g. 512Mi (more than 0).")
    ephemeral_storage: ResourceQuantity = Field(
        "1Gi", description="Scratch disk outside mounted volumes (more than 0)."
    )
    gpu: int = Field(0, ge=0, le=16, description="Number of nvidia.com/gpu devices.")


class EpisodeLifetime(Model):
    ttl_seconds: int | None = Field(
        None,
        ge=1,
        le=86_400,
        description="Seconds from admission until the episode is reaped (default: the host's"
        " episodes.defaultTTLSeconds). Raise it to renew, up to the host's episodes.maxTTLSeconds.",
    )


class EpisodeEgress(Model):
    allow: list[EgressEntry] = Field(
        default_factory=list,
        max_length=32,
        description="host:port entries, each covered by the host's allowlist. Empty: no egress at all.",
    )


class EpisodeWorkspace(Model):
    """A fresh directory for this episode alone, on the host's claim at a place the operator chooses (keyed
    by the episode's uid); the host reads it under its storage.workspace.episodesMountPath."""

    mount_path: MountPath = Field("/workspace", description="Where.")


class EpisodeSandboxSpec(Model):
    """What one episode runs. Everything but lifetime is fixed at creation."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel(_unchanged(f), f"{f} is immutable", reason="FieldValueForbidden")
                for f in IMMUTABLE_FIELDS
            ]
        }
    )

    host_ref: HostReference = Field(description="The owning GymHost (same namespace).")
    rollout_id: str = Field(
        pattern=ROLLOUT_ID_PATTERN,
        min_length=1,
        max_length=253,
        description="The rollout this episode serves; operate leases are bound to it.",
    )
    image: Image = Field(
        description="Container image; approved by cluster policy and the host's episodes.images."
    )
    runtime: str | None = Field(
        None,
        pattern=DNS_LABEL_PATTERN,
        max_length=63,
        description="Runtime profile; must equal the host's episodes.runtime (or, when that is unset, the"
        " host's runtime), which is also the default.",
    )
    command: list[Annotated[str, Field(max_length=4096)]] | None = Field(
        None, max_length=64, description="Entrypoint override."
    )
    args: list[Annotated[str, Field(max_length=4096)]] | None = Field(
        None, max_length=256, description="Arguments."
    )
    user: int = Field(
        65532, ge=1, le=MAX_UID, strict=True, description="Numeric uid to run as (never 0, never a name)."
    )
    workdir: str | None = Field(
        None, pattern=WORKDIR_PATTERN, max_length=253, description="Working directory."
    )
    env: list[EpisodeEnvVar] = Field(
        default_factory=list,
        max_length=128,
        description="Environment variables.",
        json_schema_extra=list_map("name"),
    )
    resources: EpisodeResources = Field(default_factory=EpisodeResources, description="Compute resources.")
    lifetime: EpisodeLifetime = Field(default_factory=EpisodeLifetime, description="Time to live.")
    egress: EpisodeEgress = Field(
        default_factory=EpisodeEgress, description="Network allowlist (subset of host's)."
    )
    workspace: EpisodeWorkspace | None = Field(
        None, description="Optional read-write workspace of its own, on the host's claim."
    )
    labels: dict[str, LabelValue] = Field(
        default_factory=dict,
        max_length=MAX_LABELS,
        description=f"Labels for the sandbox pod, which carries each as {USER_LABEL_PREFIX}<name>. Keys are"
        " plain label names, without a prefix.",
        json_schema_extra={
            "x-kubernetes-validations": [
                cel(f"self.all(k, k.matches(r'{LABEL_NAME_PATTERN}'))", LABEL_KEYS_MESSAGE),
            ]
        },
    )
    admission_timeout_seconds: int | None = Field(
        None,
        ge=1,
        le=86_400,
        description="Give up waiting for a concurrency slot after this long (Ready=False, AdmissionTimeout).",
    )

    @model_validator(mode="after")
    def _plain_label_names(self) -> EpisodeSandboxSpec:
        invalid = sorted(k for k in self.labels if not re.match(LABEL_NAME_PATTERN, k))
        if invalid:
            raise ValueError(f"{LABEL_KEYS_MESSAGE}: {', '.join(invalid)}")
        return self


class OperateLeases(Model):
    """The broker's record of the operate leases it granted for this episode (status: no user writes it)."""

    epoch: int = Field(
        0, ge=0, le=4_294_967_295, description="Leases granted before the last revocation are refused."
    )
    granted: int = Field(0, ge=0, description="Operate leases granted since the last revocation.")


class EpisodeSandboxStatus(Model):
    """Observed state. Ready is the summary; Admitted says whether the episode holds a slot or waits."""

    observed_generation: int | None = Field(None, description="The generation the status was computed from.")
    conditions: Conditions = Field(
        default_factory=list, description="Admitted, PodScheduled, Ready, Reconciling, Stalled."
    )
    queue_position: int | None = Field(
        None,
        ge=1,
        description="1 for the next episode to be admitted. While slots keep freeing, a position past"
        " the third is rewritten only once it has halved (at most twice the true place); exact five seconds"
        " after the last admission.",
    )
    admitted_at: datetime | None = Field(None, description="When the episode took a concurrency slot.")
    expires_at: datetime | None = Field(
        None, description="admittedAt + ttlSeconds; the reaper deletes it then."
    )
    runtime: str | None = Field(
        None,
        description="The runtime profile the sandbox runs under, written at admission: spec.runtime, else"
        " its host's episodes.runtime, else the host's own runtime.",
    )
    pod_name: str | None = Field(None, description="The sandbox pod.")
    pod_ip: str | None = Field(None, alias="podIP", description="The sandbox pod's IP.")
    lease_secret_name: str | None = Field(None, description="Secret holding the owner lease token.")
    operate_leases: OperateLeases | None = Field(None, description="Operate leases the broker granted.")
    failure: Failure | None = Field(None, description="Why the episode cannot become Ready, classified.")
