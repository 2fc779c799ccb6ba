"""The broker's API v1 as calls, and when a failed call is sent again: shared by the sync and async clients.

Which calls are retried, and why:

- GET (health, get, list, read a file or directory): reads.
- PUT (write a file or directory): each replaces its target whole, so writing it twice leaves the same.
- DELETE (close): closing a closed episode answers the same.
- POST /v1/episodes (create) carries an `Idempotency-Key`; the broker names the episode after it, so a
  repeated create returns the episode the first one made. When the caller gives no key, `create_episode`
  makes one (a random UUID) for that call, so that a create whose answer was lost is retried rather than
  left ambiguous, and never makes a second episode. Two separate calls are two episodes; give your own
  key to make creates idempotent across calls or processes.
- Never retried: exec, lease grants and renewals. A repeated command may not be harmless, so the caller
  decides; after a transport error on these the call may or may not have taken effect.

Retries happen on transport errors (`httpx.TransportError`) and on HTTP 429, 502 and 503, with
exponential backoff (with jitter) or, when the broker sends `Retry-After`, after that many seconds (capped).
A 401 is sent again once, with the token the token file holds now, when it holds another one. Every other
error is raised at once as a `BrokerClientError`. Everything here is pure: no I/O but reading the token file.
"""

from __future__ import annotations

import email.utils
import math
import secrets
import ssl
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Generic, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel, ValidationError

from gymsandbox.api.common import validation_message
from gymsandbox.broker.models import (
    CreateEpisode,
    Episode,
    EpisodeList,
    ExecRequest,
    ExecResult,
    Health,
    LeaseGrant,
    LeaseRequest,
    LeaseRevocation,
    RenewRequest,
)

RETRY_STATUSES: Final = frozenset({429, 502, 503})
IDEMPOTENT_METHODS: Final = frozenset({"GET", "PUT", "DELETE", "HEAD", "OPTIONS"})
IDEMPOTENCY_HEADER: Final = "Idempotency-Key"
ROLLOUT_HEADER: Final = "X-Rollout-Id"
TRANSPORT_ERROR: Final = "transport_error"  # the client's own code: the broker gave no answer
EXEC_GRACE_SECONDS: Final = 30.0  # an exec may take timeout_seconds; the HTTP read waits this much longer
DEFAULT_MAX_OUTPUT_BYTES: Final = 1_048_576

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")

_jitter = secrets.SystemRandom()


class BrokerClientError(Exception):
    """A call failed. `code` is the broker's stable error code (see `gymsandbox.broker.errors`).

    `status` is the HTTP status (None when no answer came: code `transport_error`); `retry_after` is the
    broker's `Retry-After` in seconds, when it sent one. An answer that is not `{code, message}` (a proxy's
    page, a truncated body) has code `backend_error`. Arguments refused before sending have code
    `invalid_request` and status None.
    """

    def __init__(
        self, code: str, message: str, status: int | None = None, retry_after: float | None = None
    ) -> None:
        super().__init__(f"{code}: {message}" if status is None else f"{code} (HTTP {status}): {message}")
        self.code = code
        self.message = message
        self.status = status
        self.retry_after = retry_after


def broker_ssl_context(ca_bundle: str) -> ssl.SSLContext:
    """Verification of the broker's certificate (chain and host name) against `ca_bundle` (PEM) alone."""
    return ssl.create_default_context(cadata=ca_bundle)


def read_token(path: Path) -> str:
    try:
        token = path.read_text().strip()
    except OSError as e:
        raise BrokerClientError(
            TRANSPORT_ERROR, f"cannot read the lease token file {path}: {e.strerror}"
        ) from None
    if not token:
        raise BrokerClientError(TRANSPORT_ERROR, f"the lease token file {path} is empty")
    return token


# --- the calls -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Call(Generic[T]):
    """One request and how to read its 2xx answer."""

    method: str
    url: str
    read: Callable[[httpx.Response], T]
    json: object = None
    content: bytes | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    timeout: httpx.Timeout | None = None

    @property
    def idempotent(self) -> bool:
        return self.method in IDEMPOTENT_METHODS or IDEMPOTENCY_HEADER in self.headers


def health() -> Call[Health]:
    return Call("GET", "/healthz", _reader(Health))


def create_episode(
    rollout_id: str, image: str, idempotency_key: str | None, fields: Mapping[str, Any]
) -> Call[Episode]:
    for clash in ("rolloutId", "rollout_id", "image"):
        if clash in fields:
            raise BrokerClientError("invalid_request", f"{clash} is given twice")
    body = _build(CreateEpisode, {"rollout_id": rollout_id, "image": image, **fields})
    key = idempotency_key if idempotency_key is not None else str(uuid.uuid4())
    return Call("POST", "/v1/episodes", _reader(Episode), json=body.wire(), headers={IDEMPOTENCY_HEADER: key})


def get_episode(episode_id: str) -> Call[Episode]:
    return Call("GET", _episode(episode_id), _reader(Episode))


def list_episodes() -> Call[EpisodeList]:
    return Call("GET", "/v1/episodes", _reader(EpisodeList))


def close_episode(episode_id: str) -> Call[Episode]:
    return Call("DELETE", _episode(episode_id), _reader(Episode))


def exec_command(
    episode_id: str,
    *,
    argv: Sequence[str] | None,
    shell: str | None,
    env: Mapping[str, str] | None,
    workdir: str | None,
    timeout_seconds: float,
    max_output_bytes: int,
    client_timeout: float,
) -> Call[ExecResult]:
    body = _build(
        ExecRequest,
        {
            "argv": list(argv) if argv is not None else None,
            "shell": shell,
            "env": dict(env or {}),
            "workdir": workdir,
            "timeout_seconds": timeout_seconds,
            "max_output_bytes": max_output_bytes,
        },
    )
    wait = httpx.Timeout(client_timeout, read=max(client_timeout, timeout_seconds + EXEC_GRACE_SECONDS))
    return Call("POST", f"{_episode(episode_id)}/exec", _reader(ExecResult), json=body.wire(), timeout=wait)


def put_file(episode_id: str, path: str, data: bytes) -> Call[None]:
    return _upload(f"{_episode(episode_id)}/files/{_path(path)}", data, "application/octet-stream")


def get_file(episode_id: str, path: str) -> Call[bytes]:
    return Call("GET", f"{_episode(episode_id)}/files/{_path(path)}", _content)


def put_directory(episode_id: str, path: str, tar_bytes: bytes) -> Call[None]:
    return _upload(f"{_episode(episode_id)}/directories/{_path(path)}", tar_bytes, "application/x-tar")


def get_directory(episode_id: str, path: str) -> Call[bytes]:
    return Call("GET", f"{_episode(episode_id)}/directories/{_path(path)}", _content)


def grant_lease(episode_id: str, ttl_seconds: int, rollout_id: str | None) -> Call[LeaseGrant]:
    body = _build(LeaseRequest, {"rollout_id": rollout_id, "ttl_seconds": ttl_seconds})
    return Call("POST", f"{_episode(episode_id)}/leases", _reader(LeaseGrant), json=body.wire())


def revoke_leases(episode_id: str) -> Call[LeaseRevocation]:
    return Call("DELETE", f"{_episode(episode_id)}/leases", _reader(LeaseRevocation))


def renew(episode_id: str, ttl_seconds: int) -> Call[Episode]:
    body = _build(RenewRequest, {"ttl_seconds": ttl_seconds})
    return Call("POST", f"{_episode(episode_id)}/renew", _reader(Episode), json=body.wire())


# --- when to send again --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Backoff:
    retries: int
    seconds: float
    max_seconds: float
    max_retry_after_seconds: float

    def delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, self.max_retry_after_seconds)
        return min(self.max_seconds, self.seconds * 2.0**attempt) * _jitter.uniform(0.5, 1.0)


def transport_failure(call: Call[Any], error: httpx.TransportError, attempt: int, backoff: Backoff) -> float:
    """The delay before sending `call` again after `error`; raises when it is not sent again."""
    failure = BrokerClientError(TRANSPORT_ERROR, f"{call.method} {call.url}: {type(error).__name__}: {error}")
    retryable = not isinstance(error, httpx.UnsupportedProtocol)
    if not (call.idempotent and retryable and attempt < backoff.retries):
        raise failure from error
    return backoff.delay(attempt, None)


def answer_failure(call: Call[Any], response: httpx.Response, attempt: int, backoff: Backoff) -> float:
    """The delay before sending `call` again after a non-2xx answer; raises when it is not sent again."""
    failure = _failure(response)
    if not (call.idempotent and response.status_code in RETRY_STATUSES and attempt < backoff.retries):
        raise failure
    return backoff.delay(attempt, failure.retry_after)


def retry_message(call: Call[Any], delay: float, attempt: int, retries: int) -> str:
    return f"retrying {call.method} {call.url} in {delay:.1f} s (retry {attempt + 1} of {retries})"


# --- helpers -------------------------------------------------------------------------------------------


def _upload(url: str, data: bytes, content_type: str) -> Call[None]:
    return Call("PUT", url, _nothing, content=data, headers={"Content-Type": content_type})


def _nothing(_: httpx.Response) -> None:
    return None


def _content(response: httpx.Response) -> bytes:
    return response.content


def _segment(text: str) -> str:
    """One URL path segment. Dot segments are encoded too: httpx would otherwise resolve `..` itself."""
    quoted = quote(text, safe="")
    return quoted.replace(".", "%2E") if quoted in (".", "..") else quoted


def _path(path: str) -> str:
    """Each segment quoted; a leading `/` (an absolute path in the sandbox) as `%2F`, so that no proxy
    folds it into the route's own slash."""
    quoted = "/".join(_segment(part) for part in path.split("/"))
    return "%2F" + quoted[1:] if quoted.startswith("/") else quoted


def _episode(episode_id: str) -> str:
    if not episode_id:
        raise BrokerClientError("invalid_request", "an episode id must not be empty")
    return f"/v1/episodes/{_segment(episode_id)}"


def _build(model: type[M], fields: Mapping[str, Any]) -> M:
    """The request body as the model checks it; refused locally, as the broker would refuse it."""
    try:
        return model.model_validate({k: v for k, v in fields.items() if v is not None})
    except ValidationError as error:
        raise BrokerClientError("invalid_request", validation_message(error)) from None


def _known(model: type[BaseModel], data: object) -> object:
    """`data` without the keys `model` does not know: a newer broker may answer with more fields."""
    if not isinstance(data, dict):
        return data
    names = {key for name, f in model.model_fields.items() for key in (name, f.alias) if key}
    return {k: v for k, v in data.items() if k in names}


def _reader(model: type[M]) -> Callable[[httpx.Response], M]:
    return lambda response: _parse(response, model)


def _parse(response: httpx.Response, model: type[M]) -> M:
    try:
        data = _known(model, response.json())
        if model is EpisodeList and isinstance(data, dict) and isinstance(data.get("episodes"), list):
            data["episodes"] = [_known(Episode, e) for e in data["episodes"]]
        return model.model_validate(data)
    except ValueError as error:  # not JSON, or not this model (ValidationError is a ValueError)
        raise BrokerClientError(
            "backend_error",
            f"unexpected answer to {response.request.method} {response.request.url.path}: "
            f"{type(error).__name__}",
            response.status_code,
        ) from None


def _failure(response: httpx.Response) -> BrokerClientError:
    """The broker's `{code, message}` as an exception; anything else is a `backend_error`."""
    retry_after = _retry_after(response.headers.get("Retry-After"))
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("code"), str) and isinstance(body.get("message"), str):
        return BrokerClientError(body["code"], body["message"], response.status_code, retry_after)
    text = response.text.strip().replace("\n", " ")[:200] if response.content else ""
    message = f"HTTP {response.status_code} {response.reason_phrase} without an error body"
    return BrokerClientError(
        "backend_error", f"{message}: {text}" if text else message, response.status_code, retry_after
    )


def _retry_after(value: str | None) -> float | None:
    """`Retry-After` in seconds, from delta-seconds or an HTTP date; None when absent or unreadable."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - datetime.now(UTC)).total_seconds()
    return max(0.0, seconds) if math.isfinite(seconds) else None
