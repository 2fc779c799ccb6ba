"""The broker's logic: authenticate, authorize, apply policy, then call the backend (in threads)."""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from functools import partial
from typing import Any

from fastapi.concurrency import run_in_threadpool
from pydantic import ValidationError

from gymsandbox.api.common import validation_message
from gymsandbox.api.conditions import ConditionType, Reason
from gymsandbox.api.episode import EpisodeSandboxSpec
from gymsandbox.api.gymhost import GymHostSpec
from gymsandbox.api.names import API_VERSION
from gymsandbox.broker.archive import check_archive, sandbox_path, tar_is_complete
from gymsandbox.broker.auth import Caller, authenticate, authorize_episode, operate_leases, require_host
from gymsandbox.broker.backend import EXIT_UNREACHABLE, ExecOutcome, KubeBackend
from gymsandbox.broker.command import delivery
from gymsandbox.broker.errors import BrokerError, ErrorCode
from gymsandbox.broker.guards import HostShares, not_its_sandbox
from gymsandbox.broker.models import (
    CreateEpisode,
    Episode,
    EpisodeList,
    ExecRequest,
    ExecResult,
    LeaseGrant,
    LeaseRequest,
    LeaseRevocation,
    RenewRequest,
)
from gymsandbox.broker.telemetry import Telemetry
from gymsandbox.desired.names import child_name
from gymsandbox.desired.owner import Manifest, Owner
from gymsandbox.desired.pod import EPISODE_CONTAINER_NAME, episode_pod_name
from gymsandbox.desired.workspace import episode_workspace_dir
from gymsandbox.leases import Claims, Scope, SigningKey, issue, operate_claims
from gymsandbox.policy.cluster import ClusterPolicy
from gymsandbox.policy.episodes import EpisodeRequest, admit_episode

LOG = logging.getLogger("gymsandbox.broker")
RETRY_AFTER_SECONDS = 5
MAX_OPERATE_LEASES = 16  # per episode, until revoked
LEASE_WRITE_ATTEMPTS = 5
KILLED_BY_SIGNAL = 128  # a shell's exit status for a process that died of signal N is 128 + N
EPISODE_ID = re.compile(r"[a-z0-9]([-a-z0-9]{0,251}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*")

TRANSFER_ERROR_BYTES = 64 * 1024  # what a transfer's command may say on stderr (and a write's on stdout)


@dataclass(frozen=True)
class Upload:
    """A request body not read yet: its size as declared (or the transfer cap, when streamed without one),
    reserved against the host's memory share before `read` brings it in."""

    declared: int
    read: Callable[[], Awaitable[bytes]]


@dataclass
class BrokerSettings:
    max_exec_timeout_seconds: float = 600
    max_transfer_bytes: int = 64 * 1024 * 1024  # one file or one tar, either way
    transfer_timeout_seconds: float = 300
    max_calls_per_host: int = 32  # commands and transfers in flight at once, per GymHost

    # Memory for the input and output of calls in flight (reserved at their worst case before anything is
    # read), per GymHost and for the whole process; within the chart's memory limit for the broker.
    max_bytes_per_host: int = 192 * 1024 * 1024
    max_bytes_total: int = 320 * 1024 * 1024

    @property
    def worker_threads(self) -> int:
        """Threads for blocking work (API reads, and each command or transfer while it runs): four hosts at
        their full share of calls, and reads besides. anyio starts them only as calls need them."""
        return max(64, 4 * self.max_calls_per_host + 16)


@dataclass
class BrokerState:
    backend: KubeBackend
    key: SigningKey
    policy: ClusterPolicy
    settings: BrokerSettings
    shutting_down: bool = False
    in_flight: int = 0  # requests being served, for a graceful stop


def episode_view(obj: Mapping[str, Any]) -> Episode:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    ready: Mapping[str, Any] = conditions.get(ConditionType.READY, {})
    return Episode(
        id=obj["metadata"]["name"],
        rollout_id=spec.get("rolloutId", ""),
        image=spec.get("image", ""),
        ready=ready.get("status") == "True",
        reason=ready.get("reason"),
        message=ready.get("message"),
        queue_position=status.get("queuePosition"),
        expires_at=status.get("expiresAt"),
        workspace_dir=episode_workspace_dir(obj["metadata"]["uid"])
        if spec.get("workspace") is not None
        else None,
        stalled=(conditions.get(ConditionType.STALLED) or {}).get("status") == "True",
        failure=status.get("failure"),
    )


EPISODE_ID_PURPOSE = "episode-id"
_NONCE_CHARS = 10


def episode_name(host: str, host_uid: str, idempotency_key: str | None, key: SigningKey) -> str:
    """`<host>-ep-<nonce><tag>`. A retried create with the same key names the same episode; without a key
    every create is new. The tag (the signing key's MAC of host uid and nonce) lets any broker replica, or
    a restarted one, tell an id it minted for this host, now gone (session_lost), from one it never did."""
    seed = f"{host_uid}/{idempotency_key}" if idempotency_key else secrets.token_hex(16)
    nonce = hashlib.sha256(seed.encode()).hexdigest()[:_NONCE_CHARS]
    return child_name(host, f"ep-{nonce}{key.tag(EPISODE_ID_PURPOSE, f'{host_uid}/{nonce}')}")


def minted_for(episode_id: str, host: str, host_uid: str, key: SigningKey) -> bool:
    """Whether `episode_name` made `episode_id` for this host (the same host uid: not a namesake)."""
    nonce = episode_id[-8 - _NONCE_CHARS : -8]
    expected = child_name(host, f"ep-{nonce}{key.tag(EPISODE_ID_PURPOSE, f'{host_uid}/{nonce}')}")
    return len(nonce) == _NONCE_CHARS and hmac.compare_digest(expected, episode_id)


class BrokerService:
    """One method per API call; each takes the raw Authorization header and returns a wire model."""

    def __init__(self, state: BrokerState) -> None:
        self.state = state
        settings = state.settings
        self.shares = HostShares(
            settings.max_calls_per_host, settings.max_bytes_per_host, settings.max_bytes_total
        )
        self.telemetry = Telemetry(
            in_flight=lambda: state.in_flight, reserved_bytes=lambda: self.shares.reserved_bytes
        )

    async def caller(self, authorization: str | None) -> Caller:
        try:
            return await run_in_threadpool(authenticate, authorization, self.state.backend, self.state.key)
        except BrokerError as e:
            self.telemetry.auth_failed(e.cause)
            raise

    async def episode(
        self, caller: Caller, episode_id: str, *, destroy: bool, rollout: str | None, fresh: bool = True
    ) -> Manifest:
        """The episode, if this caller may use it (or, with `destroy`, close it or grant leases). Read from
        the API server, or with `fresh=False` as the broker read it a moment ago (a hot path, which must
        confirm a refusal with a fresh read, as `_ready_pod` does)."""
        if len(episode_id) > 253 or not EPISODE_ID.fullmatch(episode_id):  # not a Kubernetes name: no lookup
            raise BrokerError("episode_not_found", "episode ids are Kubernetes names (DNS-1123, at most 253)")
        episode = await run_in_threadpool(
            partial(self.state.backend.get_episode, fresh=fresh), caller.namespace, episode_id
        )
        if episode is None or episode["metadata"].get("deletionTimestamp"):
            if episode is not None or self._minted_for_caller(caller, episode_id):
                raise BrokerError("session_lost", f"episode {episode_id} was closed or expired")
            raise BrokerError("episode_not_found", f"episode {episode_id} not found")
        authorize_episode(caller, episode, destroy=destroy, rollout_id=rollout)
        return episode

    def _minted_for_caller(self, caller: Caller, episode_id: str) -> bool:
        if caller.claims.scope != Scope.HOST:
            return False  # an owner or operate token dies with its episode: it cannot ask about another
        return minted_for(episode_id, caller.claims.name, caller.claims.uid, self.state.key)

    async def create(
        self, authorization: str | None, body: CreateEpisode, idempotency_key: str | None
    ) -> tuple[Episode, bool]:
        if self.state.shutting_down:
            raise BrokerError("shutting_down", "the broker is shutting down; retry shortly")
        caller = await self.caller(authorization)
        require_host(caller)
        host_spec = GymHostSpec.model_validate(caller.live.get("spec") or {})
        spec = self._admitted_spec(caller, host_spec, body)
        name = episode_name(caller.claims.name, caller.claims.uid, idempotency_key, self.state.key)
        backend = self.state.backend
        if (
            not idempotency_key
            or await run_in_threadpool(partial(backend.get_episode, fresh=True), caller.namespace, name)
            is None
        ):
            await self._check_quota(caller, host_spec)
        host = caller.live["metadata"]
        # The host is known here: its controller reference at creation saves the operator a write. Not
        # blocking the host's deletion: that would need update on gymhosts/finalizers where the API server
        # enforces owner-reference permissions, and the host's own finalizer closes its episodes anyway.
        owner = {
            **Owner("GymHost", host["name"], caller.namespace, host["uid"]).reference(),
            "blockOwnerDeletion": False,
        }
        manifest = {
            "apiVersion": API_VERSION,
            "kind": "EpisodeSandbox",
            "metadata": {"name": name, "namespace": caller.namespace, "ownerReferences": [owner]},
            "spec": spec.wire(),
        }
        obj, created = await run_in_threadpool(backend.create_episode, manifest)
        existing_spec = obj.get("spec") or {}
        if not created and (existing_spec.get("rolloutId"), existing_spec.get("image")) != (
            spec.rollout_id,
            spec.image,
        ):
            raise BrokerError("conflict", "this Idempotency-Key was used for a different episode")
        return episode_view(obj), created

    def _admitted_spec(
        self, caller: Caller, host_spec: GymHostSpec, body: CreateEpisode
    ) -> EpisodeSandboxSpec:
        try:
            fields = body.wire()
            ttl = fields.pop("ttlSeconds", None)
            lifetime = {"lifetime": {"ttlSeconds": ttl}} if ttl is not None else {}
            spec = EpisodeSandboxSpec.model_validate(
                {"hostRef": {"name": caller.claims.name}, **fields, **lifetime}
            )
        except ValidationError as e:
            raise BrokerError("invalid_request", validation_message(e)) from None
        refusal = admit_episode(EpisodeRequest(spec, host_spec, self.state.policy))
        if refusal:
            code: ErrorCode = (
                "image_not_approved" if refusal.reason == Reason.IMAGE_NOT_APPROVED else "invalid_request"
            )
            raise BrokerError(code, refusal.message)
        return spec

    async def _check_quota(self, caller: Caller, host_spec: GymHostSpec) -> None:
        siblings = await run_in_threadpool(
            self.state.backend.list_episodes, caller.namespace, caller.claims.name
        )
        open_ones = sum(1 for e in siblings if not e["metadata"].get("deletionTimestamp"))
        cap = host_spec.episodes.max_concurrent
        if open_ones >= cap:
            raise BrokerError(
                "quota_exceeded",
                f"the host has {open_ones} open episodes (cap {cap})",
                retry_after=RETRY_AFTER_SECONDS,
            )

    async def list_episodes(self, authorization: str | None) -> EpisodeList:
        caller = await self.caller(authorization)
        if caller.claims.scope != Scope.HOST:
            return EpisodeList(episodes=[episode_view(caller.live)])
        episodes = await run_in_threadpool(
            self.state.backend.list_episodes, caller.namespace, caller.claims.name
        )
        return EpisodeList(
            episodes=[episode_view(e) for e in episodes if not e["metadata"].get("deletionTimestamp")]
        )

    async def get(self, authorization: str | None, episode_id: str, rollout: str | None) -> Episode:
        caller = await self.caller(authorization)
        return episode_view(await self.episode(caller, episode_id, destroy=False, rollout=rollout))

    async def close(self, authorization: str | None, episode_id: str, rollout: str | None) -> Episode:
        """Idempotent: closing a closed episode answers the same."""
        caller = await self.caller(authorization)
        closed = Episode(id=episode_id, rollout_id="", image="", ready=False, reason="Closed")
        try:
            episode = await self.episode(caller, episode_id, destroy=True, rollout=rollout)
        except BrokerError as e:
            if e.code == "session_lost":
                return closed
            raise
        await run_in_threadpool(self.state.backend.delete_episode, caller.namespace, episode_id)
        return episode_view(episode).model_copy(update={"ready": False, "reason": "Closed"})

    async def exec(
        self, authorization: str | None, episode_id: str, body: ExecRequest, rollout: str | None
    ) -> ExecResult:
        caller = await self.caller(authorization)
        cap = self.state.settings.max_exec_timeout_seconds
        if body.timeout_seconds > cap:
            raise BrokerError(
                "invalid_request", f"timeoutSeconds {body.timeout_seconds:g} exceeds the cap of {cap:g}"
            )
        pod = await self._ready_pod(caller, episode_id, rollout)
        started = time.time()
        sent = delivery(body)  # argv, env and script on stdin: never in the exec URL (broker/command.py)
        outcome = await self._in_sandbox(
            caller,
            pod,
            sent.argv,
            timeout=body.timeout_seconds,
            max_output=body.max_output_bytes,
            stdin=sent.stdin,
        )
        raise_if_tool_missing(outcome)
        if outcome.exit_code >= KILLED_BY_SIGNAL and await run_in_threadpool(
            self.state.backend.pod_went_away, caller.namespace, pod, started
        ):
            stderr = outcome.stderr + b"\n[the sandbox pod was deleted or stopped during the command]\n"
            outcome = replace(outcome, exit_code=EXIT_UNREACHABLE, stderr=stderr)
        self.telemetry.observe_exec(outcome.exit_code, outcome.duration_seconds)
        self.telemetry.moved("exec", 0, len(outcome.stdout) + len(outcome.stderr))
        return ExecResult(
            exit_code=outcome.exit_code,
            stdout=outcome.stdout.decode(errors="replace"),
            stderr=outcome.stderr.decode(errors="replace"),
            truncated=outcome.truncated,
            timed_out=outcome.timed_out,
            duration_seconds=round(outcome.duration_seconds, 3),
        )

    # --- leases and renewal -------------------------------------------------------------------------------

    async def grant_lease(self, authorization: str | None, episode_id: str, body: LeaseRequest) -> LeaseGrant:
        """An operate lease, counted in the episode's status: at most MAX_OPERATE_LEASES until revoked."""
        caller = await self.caller(authorization)
        for _ in range(LEASE_WRITE_ATTEMPTS):
            episode = await self.episode(caller, episode_id, destroy=True, rollout=None)
            owner = owner_claims(episode)
            if owner is None:
                raise BrokerError(
                    "conflict", f"episode {episode_id} is not admitted yet; leases start at admission"
                )
            if body.rollout_id is not None and body.rollout_id != owner.rollout_id:
                raise BrokerError(
                    "invalid_request",
                    f"episode {episode_id} serves rollout {owner.rollout_id}: an operate lease is bound to"
                    " the episode's own rollout",
                )
            epoch, granted = operate_leases(episode)
            if granted >= MAX_OPERATE_LEASES:
                raise BrokerError(
                    "quota_exceeded",
                    f"episode {episode_id} has {granted} operate leases, the cap: revoke them"
                    f" (DELETE /v1/episodes/{episode_id}/leases) to grant more",
                )
            leases = {"epoch": epoch, "granted": granted + 1}
            if await run_in_threadpool(self.state.backend.record_operate_leases, episode, leases) is None:
                continue  # the episode changed since it was read: count again
            claims = operate_claims(owner, int(time.time()) + body.ttl_seconds, epoch)
            return LeaseGrant(
                token=issue(claims, self.state.key),
                scope=claims.scope.value,
                rollout_id=str(claims.rollout_id),
                expires_at=claims.expires_at,
            )
        raise BrokerError(
            "conflict", f"episode {episode_id} kept changing while the lease was counted; retry"
        )

    async def revoke_leases(self, authorization: str | None, episode_id: str) -> LeaseRevocation:
        """Every operate lease granted so far stops working; new ones may be granted."""
        caller = await self.caller(authorization)
        for _ in range(LEASE_WRITE_ATTEMPTS):
            episode = await self.episode(caller, episode_id, destroy=True, rollout=None)
            epoch, _ = operate_leases(episode)
            leases = {"epoch": epoch + 1, "granted": 0}
            if await run_in_threadpool(self.state.backend.record_operate_leases, episode, leases) is not None:
                return LeaseRevocation(epoch=epoch + 1)
        raise BrokerError("conflict", f"episode {episode_id} kept changing during the revocation; retry")

    async def renew(self, authorization: str | None, episode_id: str, body: RenewRequest) -> Episode:
        caller = await self.caller(authorization)
        episode = await self.episode(caller, episode_id, destroy=True, rollout=None)
        host = await run_in_threadpool(
            partial(self.state.backend.get_host, fresh=True), caller.namespace, caller.host_name()
        )
        cap = (
            GymHostSpec.model_validate((host or {}).get("spec") or {}).episodes.max_ttl_seconds if host else 0
        )
        if body.ttl_seconds > cap:
            raise BrokerError(
                "invalid_request", f"ttlSeconds {body.ttl_seconds} exceeds the host's cap of {cap}"
            )
        patched = await run_in_threadpool(
            self.state.backend.patch_episode,
            caller.namespace,
            episode_id,
            {"spec": {"lifetime": {"ttlSeconds": body.ttl_seconds}}},
        )
        return episode_view({**patched, "status": episode.get("status") or {}})

    # --- files ---------------------------------------------------------------------------------------------

    async def _ready_pod(self, caller: Caller, episode_id: str, rollout: str | None) -> str:
        """The episode's own sandbox pod, which alone the broker execs into: named as the operator names it
        and controlled by this very episode (its uid), whatever the episode's status says. Every command
        and transfer asks, so the episode and its pod may be as read a moment ago; a refusal never is."""
        try:
            return await self._sandbox_of(caller, episode_id, rollout, fresh=False)
        except BrokerError:
            return await self._sandbox_of(caller, episode_id, rollout, fresh=True)

    async def _sandbox_of(self, caller: Caller, episode_id: str, rollout: str | None, *, fresh: bool) -> str:
        episode = await self.episode(caller, episode_id, destroy=False, rollout=rollout, fresh=fresh)
        view = episode_view(episode)
        if not (episode.get("status") or {}).get("podName") or not view.ready:
            raise BrokerError("conflict", f"episode {episode_id} is not ready yet ({view.reason})")
        meta = episode["metadata"]
        name = episode_pod_name(Owner("EpisodeSandbox", meta["name"], meta["namespace"], meta["uid"]))
        pod = await run_in_threadpool(
            partial(self.state.backend.get_pod, fresh=fresh), caller.namespace, name
        )
        refusal = not_its_sandbox(pod, episode)
        if refusal:
            raise BrokerError("conflict", f"episode {episode_id} has no sandbox of its own to use: {refusal}")
        return name

    async def _in_sandbox(
        self,
        caller: Caller,
        pod: str,
        argv: list[str],
        *,
        timeout: float,
        max_output: int,
        max_error: int | None = None,
        stdin: bytes | None = None,
        reserved: bool = False,
    ) -> ExecOutcome:
        """Every command and transfer goes through here, within the caller's host's share of calls and of
        memory: its output caps, reserved before it starts (unless the caller has `reserved` them)."""
        max_error = max_output if max_error is None else max_error
        async with self.shares.call(caller, 0 if reserved else max_output + max_error):
            return await run_in_threadpool(
                self.state.backend.exec,
                caller.namespace,
                pod,
                EPISODE_CONTAINER_NAME,
                argv,
                timeout=timeout,
                max_output=max_output,
                max_error=max_error,
                stdin=stdin,
            )

    async def _run(
        self,
        caller: Caller,
        pod: str,
        argv: list[str],
        *,
        stdin: bytes | None = None,
        max_output: int | None = None,
        reserved: bool = False,
    ) -> ExecOutcome:
        settings = self.state.settings
        outcome = await self._in_sandbox(
            caller,
            pod,
            argv,
            timeout=settings.transfer_timeout_seconds,
            max_output=max_output or settings.max_transfer_bytes,
            max_error=TRANSFER_ERROR_BYTES,
            stdin=stdin,
            reserved=reserved,
        )
        self.telemetry.moved("transfer", len(stdin or b""), len(outcome.stdout))
        raise_if_tool_missing(outcome)
        if outcome.exit_code == EXIT_UNREACHABLE or outcome.timed_out:
            raise BrokerError("backend_error", "the sandbox could not be reached for the transfer")
        return outcome

    async def _read(
        self, caller: Caller, pod: str, argv: list[str], complete: Callable[[ExecOutcome], bool]
    ) -> ExecOutcome:
        """Run a read; one that succeeded but arrived cut short (the exec stream can lose its last frames
        under load) is run again, up to READ_ATTEMPTS times, and never handed on incomplete."""
        for attempt in range(1, READ_ATTEMPTS + 1):
            outcome = await self._run(caller, pod, argv)
            if outcome.exit_code != 0 or outcome.truncated or complete(outcome):
                return outcome
            LOG.warning(
                "a read from pod %s arrived cut short (%d bytes in %.1f s; attempt %d of %d)",
                pod,
                len(outcome.stdout),
                outcome.duration_seconds,
                attempt,
                READ_ATTEMPTS,
            )
        raise BrokerError(
            "backend_error", f"the transfer from the sandbox was cut short {READ_ATTEMPTS} times"
        )

    async def _write(
        self,
        authorization: str | None,
        episode_id: str,
        path: str,
        body: Upload,
        rollout: str | None,
        *,
        script: str,
        check: Callable[[bytes, int], object] | None = None,
    ) -> tuple[str, ExecOutcome]:
        """An upload: its declared size reserved before its body is read, the body checked (off the event
        loop), then piped into `script` in the sandbox. Returns the target path and the outcome."""
        caller = await self.caller(authorization)
        target = sandbox_path(path)
        async with self.shares.memory(caller, body.declared + 2 * TRANSFER_ERROR_BYTES):
            data = await body.read()
            if check is not None:
                await run_in_threadpool(check, data, self.state.settings.max_transfer_bytes)
            pod = await self._ready_pod(caller, episode_id, rollout)
            outcome = await self._run(
                caller,
                pod,
                ["sh", "-c", script, "sh", target, str(len(data))],
                stdin=data,
                max_output=TRANSFER_ERROR_BYTES,
                reserved=True,
            )
        return target, outcome

    async def put_file(
        self, authorization: str | None, episode_id: str, path: str, body: Upload, rollout: str | None
    ) -> None:
        target, outcome = await self._write(authorization, episode_id, path, body, rollout, script=WRITE_FILE)
        if outcome.exit_code != 0:
            raise BrokerError("invalid_request", f"cannot write {target}: {_first_line(outcome.stderr)}")

    async def get_file(
        self, authorization: str | None, episode_id: str, path: str, rollout: str | None
    ) -> bytes:
        caller = await self.caller(authorization)
        target = sandbox_path(path)
        pod = await self._ready_pod(caller, episode_id, rollout)
        outcome = await self._read(caller, pod, ["sh", "-c", READ_FILE, "sh", target], _file_complete)
        if outcome.truncated:
            raise BrokerError(
                "payload_too_large", f"{target} is larger than {self.state.settings.max_transfer_bytes} bytes"
            )
        if outcome.exit_code != 0:
            raise BrokerError("invalid_request", f"cannot read {target}: {_first_line(outcome.stderr)}")
        return outcome.stdout

    async def put_directory(
        self, authorization: str | None, episode_id: str, path: str, body: Upload, rollout: str | None
    ) -> None:
        """Unpack a tar into `path`, replacing it whole; a refused or failed upload leaves nothing behind."""
        target, outcome = await self._write(
            authorization, episode_id, path, body, rollout, script=WRITE_DIRECTORY, check=check_archive
        )
        if outcome.exit_code != 0:
            raise BrokerError(
                "invalid_request", f"cannot unpack into {target}: {_first_line(outcome.stderr)}"
            )

    async def get_directory(
        self, authorization: str | None, episode_id: str, path: str, rollout: str | None
    ) -> bytes:
        caller = await self.caller(authorization)
        target = sandbox_path(path)
        pod = await self._ready_pod(caller, episode_id, rollout)
        outcome = await self._read(caller, pod, ["tar", "-c", "-f", "-", "-C", target, "."], _tar_complete)
        if outcome.truncated:
            raise BrokerError(
                "payload_too_large",
                f"{target} packs to more than {self.state.settings.max_transfer_bytes} bytes",
            )
        if outcome.exit_code != 0:
            raise BrokerError("invalid_request", f"cannot pack {target}: {_first_line(outcome.stderr)}")
        return outcome.stdout


# $1 is the path, $2 the exact byte count: reading a counted length does not depend on stdin reaching
# end-of-file (kwok never sends it). A file is written to a sibling and renamed, so a reader never sees
# half of it and a failure leaves none; a directory is unpacked beside its destination and swapped in. The
# sibling is per attempt ($$): a retry never shares it with an attempt whose broker died mid-stream.
WRITE_FILE = (
    'set -e; part="$1.gs-part.$$"; trap \'rm -f -- "$part"\' EXIT; mkdir -p -- "$(dirname -- "$1")"; '
    'head -c "$2" > "$part"; test "$(wc -c < "$part")" -eq "$2"; mv -f -- "$part" "$1"'
)
WRITE_DIRECTORY = (
    'set -e; part="$1.gs-part.$$"; trap \'rm -rf -- "$part"\' EXIT; rm -rf -- "$part"; mkdir -p -- "$part"; '
    'head -c "$2" | tar -x -f - -C "$part" --no-same-owner --no-same-permissions; '
    'mkdir -p -- "$(dirname -- "$1")"; rm -rf -- "$1"; mv -- "$part" "$1"'
)


# The size first (on stderr), then the bytes: a reader can tell a whole file from one cut short.
READ_FILE = 'wc -c < "$1" >&2 && exec cat -- "$1"'
READ_ATTEMPTS = 3


def _file_complete(outcome: ExecOutcome) -> bool:
    declared = outcome.stderr.decode(errors="replace").strip()
    return declared.isdigit() and int(declared) == len(outcome.stdout)


def _tar_complete(outcome: ExecOutcome) -> bool:
    return tar_is_complete(outcome.stdout)


def raise_if_tool_missing(outcome: ExecOutcome) -> None:
    if outcome.missing_tool:
        raise BrokerError(
            "sandbox_tool_missing",
            f"the episode's image has no `{outcome.missing_tool}`; the broker runs commands and transfers "
            "with sh and sleep (and cat, head, mkdir, mv, tar, wc for files): use an image that has them",
        )


def _first_line(stderr: bytes) -> str:
    return (stderr.decode(errors="replace").strip().splitlines() or ["failed"])[0][:300]


def owner_claims(episode: Mapping[str, Any]) -> Claims | None:
    """The owner lease of an admitted episode, as the operator issues it (None before admission)."""
    meta, spec, status = episode["metadata"], episode.get("spec") or {}, episode.get("status") or {}
    expires = status.get("expiresAt")
    if not expires:
        return None
    expires_at = int(datetime.fromisoformat(str(expires).replace("Z", "+00:00")).timestamp())
    return Claims(
        kind="EpisodeSandbox",
        namespace=meta["namespace"],
        name=meta["name"],
        uid=meta["uid"],
        scope=Scope.OWNER,
        rollout_id=spec.get("rolloutId"),
        expires_at=expires_at,
    )
