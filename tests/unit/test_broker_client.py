"""BrokerClient and AsyncBrokerClient against a scripted transport: headers, wire bodies, error mapping, and
which calls retry. Every test runs against both clients (the `mode` fixture)."""

from __future__ import annotations

import asyncio
import json
import ssl
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest

from gymsandbox.broker.models import CreateEpisode, Episode, EpisodeList, ExecResult, Health, LeaseGrant
from gymsandbox.client import AsyncBrokerClient, BrokerClient, BrokerClientError

IMAGE = "registry.example.com/episodes/python-sandbox:3.12"
TOKEN = "gs1.payload.signature"
EPISODE = {"id": "ep-1", "rolloutId": "r-1", "image": IMAGE, "ready": True, "reason": "SandboxReady"}
EXEC_RESULT = {
    "exitCode": 0,
    "stdout": "hi\n",
    "stderr": "",
    "truncated": False,
    "timedOut": False,
    "durationSeconds": 0.01,
}

Answer = Callable[[httpx.Request], httpx.Response]


def ok(body: Any = None, status: int = 200, **headers: str) -> Answer:
    def answer(_: httpx.Request) -> httpx.Response:
        return httpx.Response(status, json=body if body is not None else EPISODE, headers=headers)

    return answer


def raw(status: int, content: bytes = b"", **headers: str) -> Answer:
    return lambda _: httpx.Response(status, content=content, headers=headers)


def error(status: int, code: str, message: str = "no", **headers: str) -> Answer:
    return lambda _: httpx.Response(status, json={"code": code, "message": message}, headers=headers)


def refused(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("connection refused", request=request)


def read_timeout(request: httpx.Request) -> httpx.Response:
    raise httpx.ReadTimeout("timed out", request=request)


class Blocking:
    """An AsyncBrokerClient driven from blocking code, so that one test speaks to both clients."""

    def __init__(self, client: AsyncBrokerClient) -> None:
        self._client = client

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._client, name)
        return lambda *args, **kwargs: asyncio.run(method(*args, **kwargs))

    def __repr__(self) -> str:
        return repr(self._client)

    def __enter__(self) -> Blocking:
        return self

    def __exit__(self, *_: object) -> None:
        asyncio.run(self._client.aclose())


@dataclass
class Scripted:
    """A client whose transport answers from a script (the last answer repeats) and records everything."""

    answers: list[Answer]
    requests: list[httpx.Request] = field(default_factory=list)
    sleeps: list[float] = field(default_factory=list)
    mode: ClassVar[str] = "sync"  # or "async": set by the `mode` fixture

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self.answers[min(len(self.requests), len(self.answers)) - 1](request)

    def client(self, **options: Any) -> Any:
        """The client under test (BrokerClient, or AsyncBrokerClient behind `Blocking`)."""
        options = {"token": TOKEN, **options} if "token_file" not in options else options
        transport = httpx.MockTransport(self.handle)
        if self.mode == "sync":
            return BrokerClient(
                "http://broker.test", transport=transport, sleep=self.sleeps.append, **options
            )

        async def sleep(seconds: float) -> None:
            self.sleeps.append(seconds)

        return Blocking(AsyncBrokerClient("http://broker.test", transport=transport, sleep=sleep, **options))

    def body(self, index: int = -1) -> Any:
        return json.loads(self.requests[index].content)


def scripted(*answers: Answer, **options: Any) -> tuple[Any, Scripted]:
    script = Scripted(list(answers))
    return script.client(**options), script


@pytest.fixture(autouse=True, params=["sync", "async"])
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(Scripted, "mode", request.param)
    return str(request.param)


# --- headers and wire bodies ---------------------------------------------------------------------------


def test_every_call_sends_the_bearer_token_and_the_rollout_id_when_set() -> None:
    client, script = scripted(ok(), rollout_id="r-9")
    with client:
        client.get_episode("ep-1")
        client.put_file("ep-1", "a.txt", b"x")
    for request in script.requests:
        assert request.headers["Authorization"] == f"Bearer {TOKEN}"
        assert request.headers["X-Rollout-Id"] == "r-9"


def test_no_rollout_header_without_a_rollout_id_and_no_token_in_the_repr() -> None:
    client, script = scripted(ok())
    with client:
        client.get_episode("ep-1")
        assert TOKEN not in repr(client)
    assert "X-Rollout-Id" not in script.requests[0].headers


def test_create_sends_the_camel_case_wire_body_and_returns_the_episode() -> None:
    client, script = scripted(ok(EPISODE, status=201))
    with client:
        episode = client.create_episode(
            "r-1",
            IMAGE,
            idempotency_key="k-1",
            ttl_seconds=300,
            workdir="/work",
            env=[{"name": "A", "value": "1"}],
        )
    assert episode == Episode(id="ep-1", rollout_id="r-1", image=IMAGE, ready=True, reason="SandboxReady")
    request = script.requests[0]
    assert (request.method, request.url.path) == ("POST", "/v1/episodes")
    assert request.headers["Idempotency-Key"] == "k-1"
    expected = CreateEpisode(
        rollout_id="r-1", image=IMAGE, ttl_seconds=300, workdir="/work", env=[{"name": "A", "value": "1"}]
    ).wire()
    assert script.body() == expected
    assert (script.body()["rolloutId"], script.body()["ttlSeconds"]) == ("r-1", 300)
    assert "rollout_id" not in script.body()


def test_create_takes_camel_case_fields_too() -> None:
    client, script = scripted(ok(EPISODE, status=201))
    with client:
        client.create_episode("r-1", IMAGE, ttlSeconds=300, resources={"cpu": "2", "ephemeralStorage": "2Gi"})
        client.create_episode(
            "r-1", IMAGE, ttl_seconds=300, resources={"cpu": "2", "ephemeral_storage": "2Gi"}
        )
    assert script.body(0) == script.body(1)
    assert script.body(0)["resources"]["ephemeralStorage"] == "2Gi"


def test_exec_lease_and_renew_send_camel_case_bodies() -> None:
    grant = {"token": "t", "scope": "operate", "rolloutId": "r-5", "expiresAt": 123}
    client, script = scripted(ok(EXEC_RESULT), ok(grant, status=201), ok(EPISODE))
    with client:
        result = client.exec(
            "ep-1", shell="echo hi", env={"A": "1"}, workdir="/w", timeout_seconds=5, max_output_bytes=10
        )
        lease = client.grant_lease("ep-1", ttl_seconds=60)
        renewed = client.renew("ep-1", 900)
    assert result == ExecResult(
        exit_code=0, stdout="hi\n", stderr="", truncated=False, timed_out=False, duration_seconds=0.01
    )
    assert lease == LeaseGrant(token="t", scope="operate", rollout_id="r-5", expires_at=123)
    assert renewed.id == "ep-1"
    assert [(r.method, r.url.path) for r in script.requests] == [
        ("POST", "/v1/episodes/ep-1/exec"),
        ("POST", "/v1/episodes/ep-1/leases"),
        ("POST", "/v1/episodes/ep-1/renew"),
    ]
    assert script.body(0) == {
        "shell": "echo hi",
        "env": {"A": "1"},
        "workdir": "/w",
        "timeoutSeconds": 5,
        "maxOutputBytes": 10,
    }
    assert script.body(1) == {"ttlSeconds": 60}
    assert script.body(2) == {"ttlSeconds": 900}


def test_exec_waits_for_the_command_longer_than_the_default_timeout() -> None:
    client, script = scripted(ok(EXEC_RESULT), timeout=60)
    with client:
        client.exec("ep-1", ["sleep", "100"], timeout_seconds=100)
        client.exec("ep-1", ["true"], timeout_seconds=1)
    assert script.requests[0].extensions["timeout"]["read"] == 130
    assert script.requests[1].extensions["timeout"]["read"] == 60
    assert script.body(0)["argv"] == ["sleep", "100"]


def test_reads_writes_and_lists_use_their_routes_and_models() -> None:
    listing = {"episodes": [EPISODE]}
    client, script = scripted(
        ok({"status": "ok", "protocol": "v1"}),
        ok(listing),
        raw(204),
        raw(200, b"\x00bytes"),
        raw(204),
        raw(200, b"tar!"),
        ok({**EPISODE, "ready": False, "reason": "Closed"}),
    )
    with client:
        assert client.health() == Health(status="ok")
        assert client.list_episodes() == EpisodeList(episodes=[Episode.model_validate(EPISODE)])
        client.put_file("ep-1", "a/b.bin", b"\x00bytes")
        assert client.get_file("ep-1", "a/b.bin") == b"\x00bytes"
        client.put_directory("ep-1", "data", b"tar!")
        assert client.get_directory("ep-1", "data") == b"tar!"
        assert client.close_episode("ep-1").reason == "Closed"
    assert [(r.method, r.url.path) for r in script.requests] == [
        ("GET", "/healthz"),
        ("GET", "/v1/episodes"),
        ("PUT", "/v1/episodes/ep-1/files/a/b.bin"),
        ("GET", "/v1/episodes/ep-1/files/a/b.bin"),
        ("PUT", "/v1/episodes/ep-1/directories/data"),
        ("GET", "/v1/episodes/ep-1/directories/data"),
        ("DELETE", "/v1/episodes/ep-1"),
    ]
    assert script.requests[2].content == b"\x00bytes"
    assert script.requests[2].headers["Content-Type"] == "application/octet-stream"
    assert script.requests[4].headers["Content-Type"] == "application/x-tar"


def test_fields_a_newer_broker_adds_are_ignored() -> None:
    client, _ = scripted(ok({"episodes": [{**EPISODE, "future": 1}], "next": None}))
    with client:
        assert client.list_episodes().episodes[0].id == "ep-1"


@pytest.mark.parametrize(
    ("path", "quoted"),
    [
        ("in/data.bin", "in/data.bin"),
        ("my dir/a#b?c%d.txt", "my%20dir/a%23b%3Fc%25d.txt"),
        ("../../etc/passwd", "%2E%2E/%2E%2E/etc/passwd"),
        ("./x/./y", "%2E/x/%2E/y"),
        ("ünï/cödé", "%C3%BCn%C3%AF/c%C3%B6d%C3%A9"),
        ("/tmp/in/a.txt", "%2Ftmp/in/a.txt"),
    ],
    ids=["plain", "reserved", "dot-dot", "dot", "unicode", "absolute"],
)
def test_paths_are_quoted_per_segment_and_never_resolved(path: str, quoted: str) -> None:
    client, script = scripted(raw(200, b"x"))
    with client:
        client.get_file("ep/1", path)
        client.get_directory("..", path)
    assert script.requests[0].url.raw_path.decode() == f"/v1/episodes/ep%2F1/files/{quoted}"
    assert script.requests[1].url.raw_path.decode() == f"/v1/episodes/%2E%2E/directories/{quoted}"


# --- errors --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "code", "status"),
    [
        (error(404, "session_lost", "episode ep-1 was closed"), "session_lost", 404),
        (error(404, "episode_not_found"), "episode_not_found", 404),
        (error(401, "unauthorized"), "unauthorized", 401),
        (error(403, "forbidden"), "forbidden", 403),
        (error(409, "conflict"), "conflict", 409),
        (error(413, "payload_too_large"), "payload_too_large", 413),
        (error(422, "invalid_request"), "invalid_request", 422),
        (raw(500, b"<html>Internal Server Error</html>"), "backend_error", 500),
        (ok({"detail": "Not Found"}, status=404), "backend_error", 404),
        (raw(307, location="/elsewhere"), "backend_error", 307),
        (ok({"not": "an episode"}), "backend_error", 200),
        (raw(200, b"{truncated"), "backend_error", 200),
    ],
    ids=[
        "session-lost",
        "not-found",
        "unauthorized",
        "forbidden",
        "conflict",
        "too-large",
        "invalid",
        "html-page",
        "no-code",
        "redirect",
        "wrong-model",
        "bad-json",
    ],
)
def test_answers_map_to_broker_client_errors(answer: Answer, code: str, status: int) -> None:
    client, script = scripted(answer)
    with client, pytest.raises(BrokerClientError) as raised:
        client.get_episode("ep-1")
    assert (raised.value.code, raised.value.status) == (code, status)
    assert len(script.requests) == 1  # none of these is retried


def test_an_error_carries_the_brokers_message_and_retry_after() -> None:
    client, _ = scripted(error(429, "quota_exceeded", "the host has 3 open episodes", **{"Retry-After": "5"}))
    with client, pytest.raises(BrokerClientError) as raised:
        client.exec("ep-1", ["true"])
    assert (raised.value.code, raised.value.status, raised.value.retry_after) == ("quota_exceeded", 429, 5)
    assert raised.value.message == "the host has 3 open episodes"


def test_bad_arguments_are_refused_before_sending() -> None:
    client, script = scripted(ok())
    with client:
        for call in (
            lambda: client.exec("ep-1", ["true"], shell="true"),
            lambda: client.exec("ep-1"),
            lambda: client.create_episode("r-1", IMAGE, privileged=True),
            lambda: client.create_episode("r-1", IMAGE, rolloutId="r-2"),
            lambda: client.renew("ep-1", 0),
            lambda: client.get_episode(""),
        ):
            with pytest.raises(BrokerClientError) as raised:
                call()
            assert (raised.value.code, raised.value.status) == ("invalid_request", None)
    assert script.requests == []


def test_a_closed_client_sends_nothing() -> None:
    client, script = scripted(ok())
    with client:
        pass
    with pytest.raises(RuntimeError):
        client.get_episode("ep-1")
    assert script.requests == []


# --- retries -------------------------------------------------------------------------------------------


def test_a_transport_error_on_get_is_retried_n_times_then_raised() -> None:
    client, script = scripted(refused, retries=3)
    with client, pytest.raises(BrokerClientError) as raised:
        client.get_episode("ep-1")
    assert len(script.requests) == 4
    assert len(script.sleeps) == 3
    assert (raised.value.code, raised.value.status) == ("transport_error", None)
    assert isinstance(raised.value.__cause__, httpx.ConnectError)


def test_retries_zero_means_one_attempt() -> None:
    client, script = scripted(refused, retries=0)
    with client, pytest.raises(BrokerClientError):
        client.list_episodes()
    assert (len(script.requests), script.sleeps) == (1, [])


IDEMPOTENT_CALLS: dict[str, Callable[[Any], object]] = {
    "health": lambda c: c.health(),
    "get": lambda c: c.get_episode("ep-1"),
    "list": lambda c: c.list_episodes(),
    "close": lambda c: c.close_episode("ep-1"),
    "put-file": lambda c: c.put_file("ep-1", "a", b"x"),
    "get-file": lambda c: c.get_file("ep-1", "a"),
    "put-directory": lambda c: c.put_directory("ep-1", "d", b"tar"),
    "get-directory": lambda c: c.get_directory("ep-1", "d"),
    "create-with-key": lambda c: c.create_episode("r-1", IMAGE, idempotency_key="k-1"),
    "create-without-key": lambda c: c.create_episode("r-1", IMAGE),
}
NEVER_RETRIED: dict[str, Callable[[Any], object]] = {
    "exec": lambda c: c.exec("ep-1", ["true"]),
    "grant-lease": lambda c: c.grant_lease("ep-1"),
    "renew": lambda c: c.renew("ep-1", 600),
}
HEALTHY = {"status": "ok", "protocol": "v1"}


def success_for(name: str) -> Answer:
    return {"health": ok(HEALTHY), "list": ok({"episodes": []})}.get(name, ok(EPISODE))


@pytest.mark.parametrize("name", list(IDEMPOTENT_CALLS))
@pytest.mark.parametrize(
    "failure", [refused, read_timeout, error(502, "backend_error"), error(503, "shutting_down")]
)
def test_idempotent_calls_are_retried_until_they_succeed(name: str, failure: Answer) -> None:
    client, script = scripted(failure, failure, success_for(name))
    with client:
        IDEMPOTENT_CALLS[name](client)
    assert len(script.requests) == 3
    assert len({(r.method, str(r.url), r.content) for r in script.requests}) == 1  # the same request again


@pytest.mark.parametrize("name", list(IDEMPOTENT_CALLS))
def test_idempotent_calls_give_up_after_the_retries_with_the_last_error(name: str) -> None:
    client, script = scripted(error(503, "shutting_down", "bye"), retries=2)
    with client, pytest.raises(BrokerClientError) as raised:
        IDEMPOTENT_CALLS[name](client)
    assert len(script.requests) == 3
    assert (raised.value.code, raised.value.status) == ("shutting_down", 503)


@pytest.mark.parametrize("name", list(NEVER_RETRIED))
@pytest.mark.parametrize(
    "failure",
    [
        refused,
        read_timeout,
        error(502, "backend_error"),
        error(503, "shutting_down"),
        error(429, "quota_exceeded"),
    ],
)
def test_exec_leases_and_renew_are_never_retried(name: str, failure: Answer) -> None:
    client, script = scripted(failure, ok(EPISODE), retries=5)
    with client, pytest.raises(BrokerClientError):
        NEVER_RETRIED[name](client)
    assert (len(script.requests), script.sleeps) == (1, [])


@pytest.mark.parametrize("status", [400, 401, 403, 404, 409, 413, 422])
def test_other_client_errors_are_never_retried(status: int) -> None:
    client, script = scripted(error(status, "invalid_request"), retries=5)
    with client, pytest.raises(BrokerClientError):
        client.get_file("ep-1", "a")
    assert len(script.requests) == 1


def test_a_retried_create_resends_the_given_key_and_returns_the_same_episode() -> None:
    client, script = scripted(refused, error(503, "shutting_down"), ok(EPISODE, status=200))
    with client:
        episode = client.create_episode("r-1", IMAGE, idempotency_key="k-1")
    assert episode.id == "ep-1"
    assert [r.headers["Idempotency-Key"] for r in script.requests] == ["k-1"] * 3
    assert all(r.content == script.requests[0].content for r in script.requests)


def test_a_create_without_a_key_makes_one_per_call_and_keeps_it_across_retries() -> None:
    client, script = scripted(refused, ok(EPISODE, status=201))
    with client:
        client.create_episode("r-1", IMAGE)
        first = [r.headers["Idempotency-Key"] for r in script.requests]
        client.create_episode("r-1", IMAGE)
    assert len(first) == 2
    assert first[0] == first[1]
    assert uuid.UUID(first[0]).version == 4
    assert script.requests[-1].headers["Idempotency-Key"] != first[0]  # another call, another episode


def test_429_waits_as_long_as_retry_after_says() -> None:
    client, script = scripted(error(429, "quota_exceeded", **{"Retry-After": "7"}), ok(EPISODE, status=201))
    with client:
        client.create_episode("r-1", IMAGE, idempotency_key="k-1")
    assert script.sleeps == [7.0]
    assert len(script.requests) == 2


def test_retry_after_is_capped() -> None:
    client, script = scripted(
        error(503, "shutting_down", **{"Retry-After": "3600"}), ok(EPISODE), max_retry_after_seconds=30
    )
    with client:
        client.get_episode("ep-1")
    assert script.sleeps == [30.0]


def test_retry_after_as_an_http_date() -> None:
    when = format_datetime(datetime.now(UTC) + timedelta(seconds=20), usegmt=True)
    client, script = scripted(error(429, "quota_exceeded", **{"Retry-After": when}), ok(EPISODE))
    with client:
        client.get_episode("ep-1")
    assert 15 <= script.sleeps[0] <= 20


@pytest.mark.parametrize("value", ["soon", "nan", "-5"])
def test_an_unreadable_or_negative_retry_after_still_waits_a_bounded_time(value: str) -> None:
    client, script = scripted(error(429, "quota_exceeded", **{"Retry-After": value}), ok(EPISODE))
    with client:
        client.get_episode("ep-1")
    assert 0 <= script.sleeps[0] <= 1


def test_backoff_is_exponential_with_jitter_and_bounded() -> None:
    client, script = scripted(refused, retries=6, backoff_seconds=0.5, max_backoff_seconds=4)
    with client, pytest.raises(BrokerClientError):
        client.get_episode("ep-1")
    ceilings = [0.5, 1, 2, 4, 4, 4]
    assert len(script.sleeps) == len(ceilings)
    for slept, ceiling in zip(script.sleeps, ceilings, strict=True):
        assert ceiling / 2 <= slept <= ceiling


CLIENTS: dict[str, type[BrokerClient] | type[AsyncBrokerClient]] = {
    "sync": BrokerClient,
    "async": AsyncBrokerClient,
}


def test_a_negative_retry_count_is_refused(mode: str) -> None:
    with pytest.raises(ValueError, match="retries"):
        CLIENTS[mode]("http://broker.test", TOKEN, retries=-1)


def test_from_environment_reads_the_url_the_token_and_the_brokers_ca(
    mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    kind = CLIENTS[mode]
    monkeypatch.setenv("GYMSANDBOX_BROKER_URL", "https://broker.example:8443")
    monkeypatch.setenv("GYMSANDBOX_LEASE_TOKEN", "tok")
    monkeypatch.delenv("GYMSANDBOX_LEASE_TOKEN_FILE", raising=False)
    monkeypatch.delenv("GYMSANDBOX_BROKER_CA", raising=False)
    assert repr(kind.from_environment(retries=0)) == f"{kind.__name__}('https://broker.example:8443')"
    monkeypatch.setenv("GYMSANDBOX_BROKER_CA", "not a certificate")
    with pytest.raises(ssl.SSLError):  # the CA given is the one trusted: a bad one is an error, not ignored
        kind.from_environment()
    monkeypatch.delenv("GYMSANDBOX_LEASE_TOKEN")
    with pytest.raises(
        RuntimeError, match=r"GYMSANDBOX_LEASE_TOKEN_FILE \(or GYMSANDBOX_LEASE_TOKEN\) not set"
    ):
        kind.from_environment()


def test_a_token_file_is_read_again_once_on_a_401_and_the_call_sent_with_the_new_token(
    tmp_path: Path,
) -> None:
    """The operator renews the token or rotates the key; the mounted Secret follows; the client follows it."""
    token_file = tmp_path / "token"
    token_file.write_text("old-token\n")
    script = Scripted([error(401, "unauthorized"), ok(EXEC_RESULT)])
    client = script.client(token_file=token_file, retries=0)
    token_file.write_text("new-token\n")  # the kubelet updated the mounted Secret
    with client:
        # exec is never retried for other failures; a refused token did nothing, so it is sent again
        assert client.exec("ep-1", ["true"]).exit_code == 0
    assert [r.headers["Authorization"] for r in script.requests] == ["Bearer old-token", "Bearer new-token"]


def test_a_401_with_the_token_file_unchanged_is_raised_at_once(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("same-token")
    script = Scripted([error(401, "unauthorized")])
    client = script.client(token_file=token_file)
    with client, pytest.raises(BrokerClientError) as refused:
        client.get_episode("ep-1")
    assert (refused.value.code, len(script.requests)) == ("unauthorized", 1)


def test_exactly_one_of_token_and_token_file(mode: str, tmp_path: Path) -> None:
    kind = CLIENTS[mode]
    with pytest.raises(ValueError, match="exactly one of token and token_file"):
        kind("http://broker.test")
    with pytest.raises(ValueError, match="exactly one of token and token_file"):
        kind("http://broker.test", "t", token_file=tmp_path / "token")
    with pytest.raises(BrokerClientError, match="cannot read the lease token file"):
        kind("http://broker.test", token_file=tmp_path / "missing")


def test_the_async_client_keeps_many_calls_in_flight_on_one_client() -> None:
    """Fifty execs answered only once all fifty have arrived: a client that sent them one by one would time
    out waiting (as a thread pool of a few workers would)."""
    calls, everyone = 50, asyncio.Event()
    arrived = []

    async def handle(request: httpx.Request) -> httpx.Response:
        arrived.append(request)
        if len(arrived) == calls:
            everyone.set()
        await asyncio.wait_for(everyone.wait(), timeout=5)
        return httpx.Response(200, json=EXEC_RESULT)

    async def run_all() -> list[ExecResult]:
        transport = httpx.MockTransport(handle)
        async with AsyncBrokerClient("http://broker.test", TOKEN, transport=transport, retries=0) as client:
            return await asyncio.gather(*(client.exec("ep-1", ["true"]) for _ in range(calls)))

    assert [r.exit_code for r in asyncio.run(run_all())] == [0] * calls
