"""NeMo Gym's sandbox provider: `sandbox_provider: {gymsandbox: {}}` in a NeMo Gym config.

Published under the entry-point group `nemo_gym.sandbox_providers` as `gymsandbox`. It runs inside a
GymHost pod and talks only to the episode broker, with the host's lease (`AsyncBrokerClient.from_environment`:
the mounted token file, reread once on a 401). Each sandbox is one episode. Needs nemo-gym (>= 0.4) and
the light client (httpx, pydantic); never the Kubernetes client.

How a `SandboxSpec` becomes an episode (`episode_fields`), and what is refused (`SandboxSpecError`, a
`SandboxCreateError` of kind Policy): see docs/nemo-gym.md. Results and errors:

- `exec` returns the command's own exit code, or a sentinel with `error_type` set: 124 and "timeout" when
  the deadline killed it (the broker kills it and everything it started), 125 and "sandbox" when the
  sandbox is gone or could not be reached, 125 and "broker" when the broker did not answer or refused.
- `create` raises `EpisodeCreateError` (a `SandboxCreateError`) with `reason` and `kind` (Infrastructure,
  Workload, Policy: mask Infrastructure losses); a sandbox that fails its start is an
  `EpisodeNotReadyError`, also a `SandboxCreateVerificationError`. A create that fails closes its episode.
- `close` is idempotent and safe after the episode was reaped or closed elsewhere.
"""

from __future__ import annotations

import asyncio
import math
import posixpath
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from nemo_gym.sandbox.providers.base import (
    SandboxCreateError,
    SandboxCreateVerificationError,
    SandboxExecResult,
    SandboxHandle,
    SandboxResources,
    SandboxSpec,
    SandboxStatus,
)

from gymsandbox.api.conditions import FailureKind
from gymsandbox.client.broker import AsyncBrokerClient
from gymsandbox.client.calls import BrokerClientError

PROVIDER_NAME: Final = "gymsandbox"
DEFAULT_UID: Final = 65532  # the broker's default episode user (CreateEpisode.user)
DEFAULT_READY_TIMEOUT_S: Final = 300.0
DEFAULT_EXEC_TIMEOUT_S: Final = 180.0
TIMEOUT_RETURN_CODE: Final = 124  # as coreutils' timeout(1)
FAILURE_RETURN_CODE: Final = 125  # as OpenSandbox's provider: no process exit code
PROVIDER_OPTIONS: Final = frozenset({"rollout_id", "user", "egress", "workspace", "idempotency_key"})
GONE: Final = frozenset({"session_lost", "episode_not_found"})  # the broker's codes for an episode no more
RETRY_CREATE: Final = frozenset({"quota_exceeded", "shutting_down", "transport_error", "backend_error"})
# Refusals a change of spec or config must answer. A 401 is not one: a lease is refused for a while after
# a key rotation, until the mounted token follows (Infrastructure: mask the sample, do not score it).
POLICY_CODES: Final = frozenset({"image_not_approved", "invalid_request", "forbidden"})
ROLLOUT_PREFIX: Final = "nemo-gym-"
# Without an entrypoint a sandbox only waits for commands: an image's own CMD (often a shell) would exit.
KEEP_ALIVE: Final = ("sleep", "2147483647")


class EpisodeCreateError(SandboxCreateError):  # type: ignore[misc]
    """The episode could not be made ready. `reason` is the broker's error code or the episode's Ready
    reason; `kind` is Infrastructure, Workload or Policy; `episode_id` is set once the broker named it."""

    def __init__(
        self, message: str, *, reason: str, kind: FailureKind, episode_id: str | None = None
    ) -> None:
        super().__init__(f"{message} (reason {reason}, kind {kind.value})")
        self.reason = reason
        self.kind = kind
        self.episode_id = episode_id


class SandboxSpecError(EpisodeCreateError):
    """A `SandboxSpec` field that gymsandbox cannot honour; nothing was created."""

    def __init__(self, message: str) -> None:
        super().__init__(message, reason="UnsupportedSpec", kind=FailureKind.POLICY)


class EpisodeNotReadyError(EpisodeCreateError, SandboxCreateVerificationError):  # type: ignore[misc]
    """The episode was created but its sandbox did not become ready (stalled, or not before the timeout)."""


@dataclass
class Episode:
    """`SandboxHandle.raw`: what the provider needs to reach the episode again."""

    id: str
    user: int
    workdir: str | None = None
    closed: bool = False

    def path(self, path: str) -> str:
        """A sandbox path: a relative one is taken from the workdir, as NeMo Gym's callers expect."""
        return posixpath.join(self.workdir, path) if self.workdir else path


def episode_fields(spec: SandboxSpec) -> dict[str, Any]:
    """The broker's CreateEpisode fields (besides rollout id and image) for `spec`, or a SandboxSpecError.
    `spec.files` are not here: NeMo Gym's `AsyncSandbox.start` uploads them after `create`. Nor is
    `spec.workdir`: a working directory the runtime makes for the container belongs to root, where the
    sandbox user could not write; `create` makes it as that user instead."""
    options = dict(spec.provider_options or {})
    unknown = sorted(set(options) - PROVIDER_OPTIONS)
    if unknown:
        known = ", ".join(sorted(PROVIDER_OPTIONS))
        raise SandboxSpecError(f"unknown provider_options {', '.join(unknown)}; gymsandbox takes {known}")
    if spec.workdir is not None and not spec.workdir.startswith("/"):
        raise SandboxSpecError(f"workdir {spec.workdir!r} must be an absolute path")
    fields: dict[str, Any] = {
        "user": _uid(options.get("user", DEFAULT_UID), "provider_options.user"),
        "env": [{"name": name, "value": str(value)} for name, value in (spec.env or {}).items()],
        "resources": _resources(spec.resources),
        "labels": _labels(spec.metadata or {}),
        "command": list(spec.entrypoint) if spec.entrypoint else list(KEEP_ALIVE),
        "egress": options.get("egress"),
        "workspace": options.get("workspace"),
    }
    if spec.ttl_s is not None:
        if not spec.ttl_s > 0:
            raise SandboxSpecError(f"ttl_s must be positive, not {spec.ttl_s}")
        fields["ttl_seconds"] = math.ceil(spec.ttl_s)
    return {name: value for name, value in fields.items() if value is not None}


def rollout_id(spec: SandboxSpec, default: str | None) -> str:
    """provider_options.rollout_id, else the provider's, else one made for this sandbox alone."""
    chosen = (spec.provider_options or {}).get("rollout_id") or default
    return str(chosen) if chosen else ROLLOUT_PREFIX + uuid.uuid4().hex[:16]


def _uid(user: object, what: str) -> int:
    if isinstance(user, int) and not isinstance(user, bool) and user > 0:
        return user
    if isinstance(user, str) and user.isdigit() and int(user) > 0:
        return int(user)
    raise SandboxSpecError(
        f"{what} {user!r} cannot be honoured: episodes run as a numeric non-root uid (Pod Security "
        f"restricted); give one, such as {DEFAULT_UID}, or leave it unset"
    )


def _resources(resources: SandboxResources) -> dict[str, Any]:
    if resources.gpu_type:
        raise SandboxSpecError(
            f"resources.gpu_type {resources.gpu_type!r} cannot be honoured: episodes ask for nvidia.com/gpu "
            "by count only; leave gpu_type unset"
        )
    asked = {
        "cpu": None if resources.cpu is None else f"{max(1, round(resources.cpu * 1000))}m",
        "memory": None if resources.memory_mib is None else f"{resources.memory_mib}Mi",
        "ephemeral_storage": None if resources.disk_gib is None else f"{resources.disk_gib}Gi",
        "gpu": resources.gpu or None,
    }
    return {name: value for name, value in asked.items() if value is not None}


def _labels(metadata: Mapping[str, Any]) -> dict[str, str]:
    """metadata as the sandbox pod's labels (user.gymsandbox.dev/<key>); the broker checks their form."""
    return {str(key): str(value) for key, value in metadata.items()}


def _failure_kind(code: str) -> FailureKind:
    return FailureKind.POLICY if code in POLICY_CODES else FailureKind.INFRASTRUCTURE


class GymsandboxProvider:
    """NeMo Gym's `SandboxProvider` over the episode broker. Config keys (all optional): `rollout_id` for
    every sandbox it makes (else one each), `poll_interval_s` while a sandbox starts, `max_output_bytes` of
    an exec's stdout and of its stderr, and `client` options for `AsyncBrokerClient.from_environment`."""

    name = PROVIDER_NAME

    def __init__(
        self,
        *,
        rollout_id: str | None = None,
        poll_interval_s: float = 0.25,
        max_output_bytes: int = 1_048_576,
        client: Mapping[str, Any] | None = None,
    ) -> None:
        self._rollout_id = rollout_id
        self._poll = poll_interval_s
        self._max_output = max_output_bytes
        self._client = AsyncBrokerClient.from_environment(**dict(client or {}))
        self._closed = False

    # --- lifecycle ----------------------------------------------------------------------------------------

    async def create(self, spec: SandboxSpec) -> SandboxHandle:
        if not spec.image:
            raise SandboxSpecError("image is required: one of the host's spec.episodes.images")
        fields = episode_fields(spec)
        timeout = DEFAULT_READY_TIMEOUT_S if spec.ready_timeout_s is None else float(spec.ready_timeout_s)
        deadline = time.monotonic() + timeout
        key = str((spec.provider_options or {}).get("idempotency_key") or uuid.uuid4())
        episode_id = await self._create(rollout_id(spec, self._rollout_id), spec.image, key, fields, deadline)
        episode = Episode(episode_id, fields["user"], spec.workdir)
        try:
            await self._until_ready(episode_id, deadline, timeout)
            if spec.workdir:
                await self._make_workdir(episode_id, spec.workdir, episode.user)
        except BaseException:
            await self._close_quietly(episode_id)
            raise
        return SandboxHandle(episode_id, PROVIDER_NAME, episode)

    async def _make_workdir(self, episode_id: str, workdir: str, user: int) -> None:
        try:
            made = await self._client.exec(episode_id, ["mkdir", "-p", "--", workdir])
        except BrokerClientError as error:
            made_error: str | None = error.message
        else:
            made_error = (
                None if made.exit_code == 0 else (made.stderr.strip() or f"exit code {made.exit_code}")
            )
        if made_error is not None:
            raise EpisodeNotReadyError(
                f"workdir {workdir} cannot be made as uid {user}: {made_error}",
                reason="WorkdirUnavailable",
                kind=FailureKind.WORKLOAD,
                episode_id=episode_id,
            )

    async def _create(
        self, rollout: str, image: str, key: str, fields: dict[str, Any], deadline: float
    ) -> str:
        """The new episode's id. A full host (quota_exceeded) or a broker away is waited for until the
        deadline, sending the same Idempotency-Key, so that a retry never makes a second episode."""
        while True:
            try:
                return (await self._client.create_episode(rollout, image, idempotency_key=key, **fields)).id
            except BrokerClientError as error:
                wait = error.retry_after if error.retry_after is not None else self._poll
                if error.code not in RETRY_CREATE or time.monotonic() + wait >= deadline:
                    raise EpisodeCreateError(
                        f"the broker did not create the episode: {error.message}",
                        reason=error.code,
                        kind=_failure_kind(error.code),
                    ) from None
                await asyncio.sleep(wait)

    async def _until_ready(self, episode_id: str, deadline: float, timeout: float) -> None:
        reason, kind = "Pending", FailureKind.INFRASTRUCTURE
        while True:
            try:
                episode = await self._client.get_episode(episode_id)
            except BrokerClientError as error:
                if error.code in GONE or error.code in POLICY_CODES or error.code == "unauthorized":
                    raise EpisodeNotReadyError(
                        f"episode {episode_id} is gone: {error.message}",
                        reason=error.code,
                        kind=FailureKind.INFRASTRUCTURE,
                        episode_id=episode_id,
                    ) from None
                reason = error.code
            else:
                if episode.ready:
                    return
                reason = episode.reason or reason
                kind = FailureKind(episode.failure.kind) if episode.failure else FailureKind.INFRASTRUCTURE
                if episode.stalled:
                    raise EpisodeNotReadyError(
                        f"episode {episode_id} will not become ready: {episode.message or reason}",
                        reason=reason,
                        kind=kind,
                        episode_id=episode_id,
                    )
            if time.monotonic() + self._poll >= deadline:
                raise EpisodeNotReadyError(
                    f"episode {episode_id} was not ready within {timeout:g} s (last: {reason})",
                    reason=reason,
                    kind=kind,
                    episode_id=episode_id,
                )
            await asyncio.sleep(self._poll)

    async def status(self, handle: SandboxHandle) -> SandboxStatus:
        episode = _episode(handle)
        if episode.closed:
            return SandboxStatus.STOPPED
        try:
            view = await self._client.get_episode(episode.id)
        except BrokerClientError as error:
            return SandboxStatus.STOPPED if error.code in GONE else SandboxStatus.UNKNOWN
        if view.ready:
            return SandboxStatus.RUNNING
        return SandboxStatus.ERROR if view.stalled else SandboxStatus.STARTING

    async def close(self, handle: SandboxHandle) -> None:
        episode = _episode(handle)
        if not episode.closed:
            await self._close_quietly(episode.id, raise_other=True)
            episode.closed = True

    async def _close_quietly(self, episode_id: str, *, raise_other: bool = False) -> None:
        try:
            await self._client.close_episode(episode_id)
        except BrokerClientError as error:
            if error.code not in GONE and raise_other:
                raise

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            await self._client.aclose()

    # --- commands and files -------------------------------------------------------------------------------

    async def exec(
        self,
        handle: SandboxHandle,
        command: str,
        *,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_s: float | None = None,
        user: str | int | None = None,
    ) -> SandboxExecResult:
        episode = _episode(handle)
        if user is not None and str(user) != str(episode.user):
            raise SandboxSpecError(
                f"user {user!r} cannot be honoured: this sandbox runs as uid {episode.user} (Pod Security "
                "restricted); ask for that uid or leave user unset"
            )
        timeout = DEFAULT_EXEC_TIMEOUT_S if timeout_s is None else float(timeout_s)
        try:
            result = await self._client.exec(
                episode.id,
                shell=command,
                env=env,
                workdir=episode.path(cwd) if cwd else episode.workdir,
                timeout_seconds=timeout,
                max_output_bytes=self._max_output,
            )
        except BrokerClientError as error:
            if error.code == "invalid_request" and error.status is None:
                raise ValueError(f"exec cannot be sent: {error.message}") from None
            kind = "sandbox" if error.code in GONE or error.code == "sandbox_tool_missing" else "broker"
            return SandboxExecResult("", str(error), FAILURE_RETURN_CODE, kind)
        if result.timed_out:
            return SandboxExecResult(result.stdout, result.stderr, TIMEOUT_RETURN_CODE, "timeout")
        if result.exit_code < 0:
            return SandboxExecResult(result.stdout, result.stderr, FAILURE_RETURN_CODE, "sandbox")
        return SandboxExecResult(result.stdout, result.stderr, result.exit_code)

    async def upload_file(self, handle: SandboxHandle, source_path: Path, target_path: str) -> None:
        episode = _episode(handle)
        data = await asyncio.to_thread(Path(source_path).read_bytes)
        await self._client.put_file(episode.id, episode.path(target_path), data)

    async def download_file(self, handle: SandboxHandle, source_path: str, target_path: Path) -> None:
        episode = _episode(handle)
        data = await self._client.get_file(episode.id, episode.path(source_path))
        await asyncio.to_thread(_write, Path(target_path), data)


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def _episode(handle: SandboxHandle) -> Episode:
    if handle.provider_name != PROVIDER_NAME or not isinstance(handle.raw, Episode):
        raise ValueError(f"not a {PROVIDER_NAME} sandbox handle: {handle.provider_name}")
    return handle.raw
