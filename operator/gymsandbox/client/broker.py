"""A typed client for the episode broker (API v1), retrying only the calls that are safe to repeat.

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
Every other error is raised at once as a `BrokerClientError`.
"""

from __future__ import annotations

import email.utils
import logging
import math
import os
import secrets
import ssl
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Final, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel, ValidationError

from gymsandbox.api.common import validation_message
from gymsandbox.api.names import ENV_BROKER_CA, ENV_BROKER_URL, ENV_LEASE_TOKEN, ENV_LEASE_TOKEN_FILE
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

__all__ = ["BrokerClient", "BrokerClientError", "broker_ssl_context"]

log = logging.getLogger("gymsandbox.client.broker")

RETRY_STATUSES: Final = frozenset({429, 502, 503})
IDEMPOTENT_METHODS: Final = frozenset({"GET", "PUT", "DELETE", "HEAD", "OPTIONS"})
IDEMPOTENCY_HEADER: Final = "Idempotency-Key"
ROLLOUT_HEADER: Final = "X-Rollout-Id"
TRANSPORT_ERROR: Final = "transport_error"  # the client's own code: the broker gave no answer
EXEC_GRACE_SECONDS: Final = 30.0  # an exec may take timeout_seconds; the HTTP read waits this much longer
DEFAULT_MAX_OUTPUT_BYTES: Final = 1_048_576

M = TypeVar("M", bound=BaseModel)


def _read_token(path: Path) -> str:
    try:
        token = path.read_text().strip()
    except OSError as e:
        raise BrokerClientError(
            TRANSPORT_ERROR, f"cannot read the lease token file {path}: {e.strerror}"
        ) from None
    if not token:
        raise BrokerClientError(TRANSPORT_ERROR, f"the lease token file {path} is empty")
    return token


def broker_ssl_context(ca_bundle: str) -> ssl.SSLContext:
    """Verification of the broker's certificate (chain and host name) against `ca_bundle` (PEM) alone."""
    return ssl.create_default_context(cadata=ca_bundle)


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


class BrokerClient:
    """One broker session over `httpx.Client`; use it as a context manager or call `close()`.

    `token` is a host, owner or operate lease, sent as `Authorization: Bearer`; or `token_file`, a file
    holding one (the host pod's mounted lease Secret), read at start and again once when the broker answers
    401, so that a renewed token or a rotated key is picked up without a restart. `rollout_id` is sent as
    `X-Rollout-Id` (an operate lease needs it). `ca_bundle` (PEM) is the CA to verify an https broker with,
    when no public CA signed its certificate. `retries` is how many times an idempotent call is repeated
    after its first attempt. `sleep` is called with each retry delay (inject it in tests).
    Inside a GymHost pod, `BrokerClient.from_environment()` reads all three from the pod's environment.
    """

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        token_file: str | Path | None = None,
        rollout_id: str | None = None,
        ca_bundle: str | None = None,
        timeout: float = 60,
        retries: int = 3,
        transport: httpx.BaseTransport | None = None,
        backoff_seconds: float = 0.5,
        max_backoff_seconds: float = 8.0,
        max_retry_after_seconds: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if retries < 0:
            raise ValueError("retries must be 0 or more")
        if (token is None) == (token_file is None):
            raise ValueError("give exactly one of token and token_file")
        self._token_file = None if token_file is None else Path(token_file)
        if self._token_file is not None:
            token = _read_token(self._token_file)
        headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        if rollout_id is not None:
            headers[ROLLOUT_HEADER] = rollout_id
        self._http = httpx.Client(
            base_url=base_url,
            headers=headers,
            timeout=timeout,
            transport=transport,
            follow_redirects=False,
            verify=broker_ssl_context(ca_bundle) if ca_bundle else True,
        )
        self._timeout = timeout
        self.retries = retries
        self._backoff = backoff_seconds
        self._max_backoff = max_backoff_seconds
        self._max_retry_after = max_retry_after_seconds
        self._sleep = sleep

    @classmethod
    def from_environment(cls, **options: Any) -> BrokerClient:
        """The client of the GymHost pod this runs in: the broker's URL, the host's lease token and the
        broker's CA (if any) from the variables the operator sets; `options` as for the constructor."""
        token_file = os.environ.get(ENV_LEASE_TOKEN_FILE) or None
        token = None if token_file else os.environ.get(ENV_LEASE_TOKEN) or None
        missing = [] if os.environ.get(ENV_BROKER_URL) else [ENV_BROKER_URL]
        if not (token_file or token):
            missing.append(f"{ENV_LEASE_TOKEN_FILE} (or {ENV_LEASE_TOKEN})")
        if missing:
            raise RuntimeError(f"not in a GymHost pod: {' and '.join(missing)} not set")
        return cls(
            os.environ[ENV_BROKER_URL],
            token,
            token_file=token_file,
            ca_bundle=os.environ.get(ENV_BROKER_CA) or None,
            **options,
        )

    def __repr__(self) -> str:  # never the token
        return f"BrokerClient({str(self._http.base_url)!r})"

    def __enter__(self) -> BrokerClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # --- API v1 -------------------------------------------------------------------------------------------

    def health(self) -> Health:
        return _parse(self._call("GET", "/healthz"), Health)

    def create_episode(
        self, rollout_id: str, image: str, *, idempotency_key: str | None = None, **fields: Any
    ) -> Episode:
        """Create an episode; `fields` are the other `CreateEpisode` fields, in snake_case or camelCase.

        Retried like the other idempotent calls: with `idempotency_key`, or with a fresh UUID made for this
        call when none is given (a retry then returns the same episode instead of making a second one).
        """
        for clash in ("rolloutId", "rollout_id", "image"):
            if clash in fields:
                raise BrokerClientError("invalid_request", f"{clash} is given twice")
        body = _build(CreateEpisode, {"rollout_id": rollout_id, "image": image, **fields})
        key = idempotency_key if idempotency_key is not None else str(uuid.uuid4())
        response = self._call("POST", "/v1/episodes", json=body.wire(), headers={IDEMPOTENCY_HEADER: key})
        return _parse(response, Episode)

    def get_episode(self, episode_id: str) -> Episode:
        return _parse(self._call("GET", _episode(episode_id)), Episode)

    def list_episodes(self) -> EpisodeList:
        return _parse(self._call("GET", "/v1/episodes"), EpisodeList)

    def close_episode(self, episode_id: str) -> Episode:
        """Close (delete) the episode; closing a closed one answers the same."""
        return _parse(self._call("DELETE", _episode(episode_id)), Episode)

    def exec(
        self,
        episode_id: str,
        argv: Sequence[str] | None = None,
        *,
        shell: str | None = None,
        env: Mapping[str, str] | None = None,
        workdir: str | None = None,
        timeout_seconds: float = 30,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
    ) -> ExecResult:
        """Run `argv`, or `shell` under `sh -c`. Never retried: the command may already have run."""
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
        wait = httpx.Timeout(self._timeout, read=max(self._timeout, timeout_seconds + EXEC_GRACE_SECONDS))
        response = self._call("POST", f"{_episode(episode_id)}/exec", json=body.wire(), timeout=wait)
        return _parse(response, ExecResult)

    def put_file(self, episode_id: str, path: str, data: bytes) -> None:
        """Write `data` to `path` (relative to the sandbox's working directory), replacing it whole."""
        self._call(
            "PUT",
            f"{_episode(episode_id)}/files/{_path(path)}",
            content=data,
            headers={"Content-Type": "application/octet-stream"},
        )

    def get_file(self, episode_id: str, path: str) -> bytes:
        return self._call("GET", f"{_episode(episode_id)}/files/{_path(path)}").content

    def put_directory(self, episode_id: str, path: str, tar_bytes: bytes) -> None:
        """Unpack a tar into `path`, replacing the directory whole."""
        self._call(
            "PUT",
            f"{_episode(episode_id)}/directories/{_path(path)}",
            content=tar_bytes,
            headers={"Content-Type": "application/x-tar"},
        )

    def get_directory(self, episode_id: str, path: str) -> bytes:
        """The directory as a tar (members relative to it, `./...`)."""
        return self._call("GET", f"{_episode(episode_id)}/directories/{_path(path)}").content

    def grant_lease(
        self, episode_id: str, ttl_seconds: int = 600, *, rollout_id: str | None = None
    ) -> LeaseGrant:
        """An `operate` lease for a co-worker, bound to the episode's own rollout (`rollout_id`, when
        given, must be it). Never retried."""
        body = _build(LeaseRequest, {"rollout_id": rollout_id, "ttl_seconds": ttl_seconds})
        return _parse(self._call("POST", f"{_episode(episode_id)}/leases", json=body.wire()), LeaseGrant)

    def revoke_leases(self, episode_id: str) -> LeaseRevocation:
        """End every operate lease granted for the episode so far. Retried: a repeat revokes nothing more."""
        return _parse(self._call("DELETE", f"{_episode(episode_id)}/leases"), LeaseRevocation)

    def renew(self, episode_id: str, ttl_seconds: int) -> Episode:
        """Set the episode's TTL (counted from its admission). Never retried."""
        body = _build(RenewRequest, {"ttl_seconds": ttl_seconds})
        return _parse(self._call("POST", f"{_episode(episode_id)}/renew", json=body.wire()), Episode)

    # --- transport ----------------------------------------------------------------------------------------

    def _call(
        self,
        method: str,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        json: object = None,
        content: bytes | None = None,
        timeout: httpx.Timeout | None = None,
    ) -> httpx.Response:
        """The 2xx answer; retries the idempotent calls (see the module docstring), raises otherwise."""
        headers = dict(headers or {})
        idempotent = method in IDEMPOTENT_METHODS or IDEMPOTENCY_HEADER in headers
        extra: dict[str, Any] = {} if timeout is None else {"timeout": timeout}
        attempt, reread = 0, False
        while True:
            failure: BrokerClientError
            try:
                response = self._http.request(
                    method, url, headers=headers, json=json, content=content, **extra
                )
            except httpx.TransportError as error:
                failure = BrokerClientError(
                    TRANSPORT_ERROR, f"{method} {url}: {type(error).__name__}: {error}"
                )
                retryable = not isinstance(error, httpx.UnsupportedProtocol)
                if not (idempotent and retryable and attempt < self.retries):
                    raise failure from error
            else:
                if response.is_success:
                    return response
                if response.status_code == 401 and not reread and self._token_changed():
                    reread = (
                        True  # a refused token did nothing, so any call may be sent again with the new one
                    )
                    continue
                failure = _failure(response)
                if not (idempotent and response.status_code in RETRY_STATUSES and attempt < self.retries):
                    raise failure
            delay = self._delay(attempt, failure.retry_after)
            log.info(
                "retrying %s %s in %.1f s (retry %d of %d): %s",
                method,
                url,
                delay,
                attempt + 1,
                self.retries,
                failure,
            )
            self._sleep(delay)
            attempt += 1

    def _token_changed(self) -> bool:
        """Read the token file again; True when it now holds another token (now sent)."""
        if self._token_file is None:
            return False
        try:
            token = _read_token(self._token_file)
        except BrokerClientError:
            return False
        if self._http.headers["Authorization"] == f"Bearer {token}":
            return False
        self._http.headers["Authorization"] = f"Bearer {token}"
        log.info("the lease token file holds a new token; sending it")
        return True

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, self._max_retry_after)
        return min(self._max_backoff, self._backoff * 2.0**attempt) * _jitter.uniform(0.5, 1.0)


def _segment(text: str) -> str:
    """One URL path segment. Dot segments are encoded too: httpx would otherwise resolve `..` itself."""
    quoted = quote(text, safe="")
    return quoted.replace(".", "%2E") if quoted in (".", "..") else quoted


def _path(path: str) -> str:
    return "/".join(_segment(part) for part in path.split("/"))


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
