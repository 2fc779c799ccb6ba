"""The broker's wire format (API v1). Unknown fields are refused; every bound is explicit."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator

from gymsandbox.api.common import Failure, Model
from gymsandbox.api.episode import (
    MAX_LABELS,
    ROLLOUT_ID_PATTERN,
    EpisodeEgress,
    EpisodeEnvVar,
    EpisodeResources,
    EpisodeWorkspace,
    LabelValue,
)
from gymsandbox.api.gymhost import Image

PROTOCOL_VERSION = "v1"
MAX_ARGV_ITEMS = 256
MAX_ARG_LENGTH = 4096
MAX_SHELL_LENGTH = 65_536


class Health(Model):
    status: str
    protocol: str = PROTOCOL_VERSION


class ErrorBody(Model):
    code: str
    message: str


class CreateEpisode(Model):
    """What a host may choose for an episode; everything else is fixed by the broker and the policy."""

    rollout_id: str = Field(pattern=ROLLOUT_ID_PATTERN, min_length=1, max_length=253)
    image: Image
    command: list[Annotated[str, Field(max_length=MAX_ARG_LENGTH)]] | None = Field(None, max_length=64)
    args: list[Annotated[str, Field(max_length=MAX_ARG_LENGTH)]] | None = Field(
        None, max_length=MAX_ARGV_ITEMS
    )
    user: int = Field(65532, ge=1, le=2_147_483_647, strict=True)
    workdir: str | None = Field(None, pattern=r"^/([A-Za-z0-9._-]+/?)*$", max_length=253)
    env: list[EpisodeEnvVar] = Field(default_factory=list, max_length=128)
    resources: EpisodeResources = Field(default_factory=EpisodeResources)
    ttl_seconds: int | None = Field(None, ge=1, le=86_400, alias="ttlSeconds")
    egress: EpisodeEgress = Field(default_factory=EpisodeEgress)
    workspace: EpisodeWorkspace | None = None
    # On the sandbox pod as user.gymsandbox.dev/<name> (EpisodeSandbox spec.labels: plain names only).
    labels: dict[str, LabelValue] = Field(default_factory=dict, max_length=MAX_LABELS)


class Episode(Model):
    id: str
    rollout_id: str
    image: str
    ready: bool
    reason: str | None = None
    message: str | None = None
    queue_position: int | None = None
    expires_at: str | None = None
    # The episode's workspace, if it has one, as the host sees it: this directory of its episodesMountPath.
    workspace_dir: str | None = None
    # Stalled: it will not become Ready without a change (a Policy or Workload failure, or expiry). failure:
    # why it is not Ready, classified (Infrastructure, Workload, Policy) so a trainer can mask the sample.
    stalled: bool = False
    failure: Failure | None = None


class EpisodeList(Model):
    episodes: list[Episode]


class ExecRequest(Model):
    """Either `argv` or `shell` (run as `sh -c`), with optional environment and working directory."""

    argv: list[Annotated[str, Field(max_length=MAX_ARG_LENGTH)]] | None = Field(
        None, min_length=1, max_length=MAX_ARGV_ITEMS
    )
    shell: str | None = Field(None, min_length=1, max_length=MAX_SHELL_LENGTH)
    env: dict[Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=256)], str] = Field(
        default_factory=dict, max_length=128
    )
    workdir: str | None = Field(None, pattern=r"^/[^\x00]*$", max_length=1024)
    timeout_seconds: float = Field(30, gt=0, le=3600)
    max_output_bytes: int = Field(1_048_576, ge=1, le=16_777_216)

    @model_validator(mode="after")
    def _one_command(self) -> ExecRequest:
        if (self.argv is None) == (self.shell is None):
            raise ValueError("give exactly one of argv and shell")
        return self


class ExecResult(Model):
    """exit_code -1: killed at its deadline; -2: the sandbox could not be reached."""

    exit_code: int
    stdout: str
    stderr: str
    truncated: bool
    timed_out: bool
    duration_seconds: float


class LeaseRequest(Model):
    """An `operate` lease for a co-worker: it may use the episode (exec, files), sending the episode's own
    rollout id. `rolloutId`, when given, must be that id."""

    rollout_id: str | None = Field(None, pattern=ROLLOUT_ID_PATTERN, min_length=1, max_length=253)
    ttl_seconds: int = Field(600, ge=1, le=86_400, alias="ttlSeconds")


class LeaseGrant(Model):
    token: str
    scope: str
    rollout_id: str
    expires_at: int  # unix seconds; never later than the episode's own expiry


class LeaseRevocation(Model):
    epoch: int  # operate leases granted before this epoch are refused from now on


class RenewRequest(Model):
    ttl_seconds: int = Field(ge=1, le=86_400, alias="ttlSeconds")
