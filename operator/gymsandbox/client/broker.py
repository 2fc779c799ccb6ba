"""Typed clients for the episode broker (API v1): `BrokerClient` (blocking) and `AsyncBrokerClient`.

Both send the same calls (`gymsandbox.client.calls`, whose docstring says which calls are retried and why)
and take the same options; they differ only in how they wait.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

import httpx

from gymsandbox.api.names import ENV_BROKER_CA, ENV_BROKER_URL, ENV_LEASE_TOKEN, ENV_LEASE_TOKEN_FILE
from gymsandbox.broker.models import Episode, EpisodeList, ExecResult, Health, LeaseGrant, LeaseRevocation
from gymsandbox.client import calls
from gymsandbox.client.calls import (
    DEFAULT_MAX_OUTPUT_BYTES,
    ROLLOUT_HEADER,
    Backoff,
    BrokerClientError,
    Call,
    broker_ssl_context,
    read_token,
)

__all__ = ["AsyncBrokerClient", "BrokerClient", "BrokerClientError", "broker_ssl_context"]

log = logging.getLogger("gymsandbox.client.broker")

T = TypeVar("T")


class _Options:
    """What both clients take, and the token they send.

    `token` is a host, owner or operate lease, sent as `Authorization: Bearer`; or `token_file`, a file
    holding one (the host pod's mounted lease Secret), read at start and again once when the broker answers
    401, so that a renewed token or a rotated key is picked up without a restart. `rollout_id` is sent as
    `X-Rollout-Id` (an operate lease needs it). `ca_bundle` (PEM) is the CA to verify an https broker with,
    when no public CA signed its certificate. `retries` is how many times an idempotent call is repeated
    after its first attempt. `sleep` is called with each retry delay (inject it in tests).
    Inside a GymHost pod, `from_environment()` reads the URL, the token and the CA from the pod's environment.
    """

    def __init__(
        self,
        base_url: str,
        token: str | None,
        *,
        token_file: str | Path | None,
        rollout_id: str | None,
        ca_bundle: str | None,
        timeout: float,
        retries: int,
        backoff_seconds: float,
        max_backoff_seconds: float,
        max_retry_after_seconds: float,
    ) -> None:
        if retries < 0:
            raise ValueError("retries must be 0 or more")
        if (token is None) == (token_file is None):
            raise ValueError("give exactly one of token and token_file")
        self._token_file = None if token_file is None else Path(token_file)
        if self._token_file is not None:
            token = read_token(self._token_file)
        self._headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        if rollout_id is not None:
            self._headers[ROLLOUT_HEADER] = rollout_id
        self._base_url = base_url
        self._verify = broker_ssl_context(ca_bundle) if ca_bundle else True
        self._timeout = timeout
        self._backoff = Backoff(retries, backoff_seconds, max_backoff_seconds, max_retry_after_seconds)

    @property
    def retries(self) -> int:
        return self._backoff.retries

    @classmethod
    def from_environment(cls, **options: Any) -> Self:
        """The client of the GymHost pod this runs in: the broker's URL, the host's lease token (its file,
        else its variable) and the broker's CA (if any) from the variables the operator sets; `options` as
        for the constructor."""
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
        return f"{type(self).__name__}({self._base_url!r})"

    def _token_changed(self, headers: httpx.Headers) -> bool:
        """Read the token file again; True when it now holds another token (now sent)."""
        if self._token_file is None:
            return False
        try:
            token = read_token(self._token_file)
        except BrokerClientError:
            return False
        if headers["Authorization"] == f"Bearer {token}":
            return False
        headers["Authorization"] = f"Bearer {token}"
        log.info("the lease token file holds a new token; sending it")
        return True

    def _arguments(self, call: Call[Any]) -> dict[str, Any]:
        extra: dict[str, Any] = {} if call.timeout is None else {"timeout": call.timeout}
        return {"headers": dict(call.headers), "json": call.json, "content": call.content, **extra}


class BrokerClient(_Options):
    """One broker session over `httpx.Client`; use it as a context manager or call `close()`.
    The options are `_Options`'."""

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
        super().__init__(
            base_url,
            token,
            token_file=token_file,
            rollout_id=rollout_id,
            ca_bundle=ca_bundle,
            timeout=timeout,
            retries=retries,
            backoff_seconds=backoff_seconds,
            max_backoff_seconds=max_backoff_seconds,
            max_retry_after_seconds=max_retry_after_seconds,
        )
        self._http = httpx.Client(
            base_url=base_url,
            headers=self._headers,
            timeout=timeout,
            transport=transport,
            follow_redirects=False,
            verify=self._verify,
        )
        self._sleep = sleep

    def __enter__(self) -> BrokerClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # --- API v1 -------------------------------------------------------------------------------------------

    def health(self) -> Health:
        return self._send(calls.health())

    def create_episode(
        self, rollout_id: str, image: str, *, idempotency_key: str | None = None, **fields: Any
    ) -> Episode:
        """Create an episode; `fields` are the other `CreateEpisode` fields, in snake_case or camelCase.

        Retried like the other idempotent calls: with `idempotency_key`, or with a fresh UUID made for this
        call when none is given (a retry then returns the same episode instead of making a second one).
        """
        return self._send(calls.create_episode(rollout_id, image, idempotency_key, fields))

    def get_episode(self, episode_id: str) -> Episode:
        return self._send(calls.get_episode(episode_id))

    def list_episodes(self) -> EpisodeList:
        return self._send(calls.list_episodes())

    def close_episode(self, episode_id: str) -> Episode:
        """Close (delete) the episode; closing a closed one answers the same."""
        return self._send(calls.close_episode(episode_id))

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
        return self._send(
            calls.exec_command(
                episode_id,
                argv=argv,
                shell=shell,
                env=env,
                workdir=workdir,
                timeout_seconds=timeout_seconds,
                max_output_bytes=max_output_bytes,
                client_timeout=self._timeout,
            )
        )

    def put_file(self, episode_id: str, path: str, data: bytes) -> None:
        """Write `data` to `path` (absolute, or relative to the sandbox's working directory), whole."""
        self._send(calls.put_file(episode_id, path, data))

    def get_file(self, episode_id: str, path: str) -> bytes:
        return self._send(calls.get_file(episode_id, path))

    def put_directory(self, episode_id: str, path: str, tar_bytes: bytes) -> None:
        """Unpack a tar into `path`, replacing the directory whole."""
        self._send(calls.put_directory(episode_id, path, tar_bytes))

    def get_directory(self, episode_id: str, path: str) -> bytes:
        """The directory as a tar (members relative to it, `./...`)."""
        return self._send(calls.get_directory(episode_id, path))

    def grant_lease(
        self, episode_id: str, ttl_seconds: int = 600, *, rollout_id: str | None = None
    ) -> LeaseGrant:
        """An `operate` lease for a co-worker, bound to the episode's own rollout (`rollout_id`, when
        given, must be it). Never retried."""
        return self._send(calls.grant_lease(episode_id, ttl_seconds, rollout_id))

    def revoke_leases(self, episode_id: str) -> LeaseRevocation:
        """End every operate lease granted for the episode so far. Retried: a repeat revokes nothing more."""
        return self._send(calls.revoke_leases(episode_id))

    def renew(self, episode_id: str, ttl_seconds: int) -> Episode:
        """Set the episode's TTL (counted from its admission). Never retried."""
        return self._send(calls.renew(episode_id, ttl_seconds))

    # --- transport ----------------------------------------------------------------------------------------

    def _send(self, call: Call[T]) -> T:
        """The 2xx answer, read; retries as `calls` says, raises otherwise."""
        attempt, reread = 0, False
        while True:
            try:
                response = self._http.request(call.method, call.url, **self._arguments(call))
            except httpx.TransportError as error:
                delay = calls.transport_failure(call, error, attempt, self._backoff)
            else:
                if response.is_success:
                    return call.read(response)
                if response.status_code == 401 and not reread and self._token_changed(self._http.headers):
                    reread = True  # a refused token did nothing: any call may be sent again with the new one
                    continue
                delay = calls.answer_failure(call, response, attempt, self._backoff)
            log.info(calls.retry_message(call, delay, attempt, self.retries))
            self._sleep(delay)
            attempt += 1


class AsyncBrokerClient(_Options):
    """One broker session over `httpx.AsyncClient`: `BrokerClient`'s calls, awaited. Use it as an async
    context manager or await `aclose()`. Many calls may be in flight at once on one client."""

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
        transport: httpx.AsyncBaseTransport | None = None,
        backoff_seconds: float = 0.5,
        max_backoff_seconds: float = 8.0,
        max_retry_after_seconds: float = 30.0,
        max_connections: int = 100,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        super().__init__(
            base_url,
            token,
            token_file=token_file,
            rollout_id=rollout_id,
            ca_bundle=ca_bundle,
            timeout=timeout,
            retries=retries,
            backoff_seconds=backoff_seconds,
            max_backoff_seconds=max_backoff_seconds,
            max_retry_after_seconds=max_retry_after_seconds,
        )
        self._http = httpx.AsyncClient(
            base_url=base_url,
            headers=self._headers,
            timeout=timeout,
            transport=transport,
            follow_redirects=False,
            verify=self._verify,
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
        )
        self._sleep = sleep

    async def __aenter__(self) -> AsyncBrokerClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    # --- API v1 (as BrokerClient's) -----------------------------------------------------------------------

    async def health(self) -> Health:
        return await self._send(calls.health())

    async def create_episode(
        self, rollout_id: str, image: str, *, idempotency_key: str | None = None, **fields: Any
    ) -> Episode:
        return await self._send(calls.create_episode(rollout_id, image, idempotency_key, fields))

    async def get_episode(self, episode_id: str) -> Episode:
        return await self._send(calls.get_episode(episode_id))

    async def list_episodes(self) -> EpisodeList:
        return await self._send(calls.list_episodes())

    async def close_episode(self, episode_id: str) -> Episode:
        return await self._send(calls.close_episode(episode_id))

    async def exec(
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
        return await self._send(
            calls.exec_command(
                episode_id,
                argv=argv,
                shell=shell,
                env=env,
                workdir=workdir,
                timeout_seconds=timeout_seconds,
                max_output_bytes=max_output_bytes,
                client_timeout=self._timeout,
            )
        )

    async def put_file(self, episode_id: str, path: str, data: bytes) -> None:
        await self._send(calls.put_file(episode_id, path, data))

    async def get_file(self, episode_id: str, path: str) -> bytes:
        return await self._send(calls.get_file(episode_id, path))

    async def put_directory(self, episode_id: str, path: str, tar_bytes: bytes) -> None:
        await self._send(calls.put_directory(episode_id, path, tar_bytes))

    async def get_directory(self, episode_id: str, path: str) -> bytes:
        return await self._send(calls.get_directory(episode_id, path))

    async def grant_lease(
        self, episode_id: str, ttl_seconds: int = 600, *, rollout_id: str | None = None
    ) -> LeaseGrant:
        return await self._send(calls.grant_lease(episode_id, ttl_seconds, rollout_id))

    async def revoke_leases(self, episode_id: str) -> LeaseRevocation:
        return await self._send(calls.revoke_leases(episode_id))

    async def renew(self, episode_id: str, ttl_seconds: int) -> Episode:
        return await self._send(calls.renew(episode_id, ttl_seconds))

    # --- transport ----------------------------------------------------------------------------------------

    async def _send(self, call: Call[T]) -> T:
        """As `BrokerClient._send`, awaited."""
        attempt, reread = 0, False
        while True:
            try:
                response = await self._http.request(call.method, call.url, **self._arguments(call))
            except httpx.TransportError as error:
                delay = calls.transport_failure(call, error, attempt, self._backoff)
            else:
                if response.is_success:
                    return call.read(response)
                if response.status_code == 401 and not reread and self._token_changed(self._http.headers):
                    reread = True
                    continue
                delay = calls.answer_failure(call, response, attempt, self._backoff)
            log.info(calls.retry_message(call, delay, attempt, self.retries))
            await self._sleep(delay)
            attempt += 1
