"""The episode broker over HTTP, against the real API server and the running operator."""

from __future__ import annotations

import io
import os
import signal
import tarfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from hack.localcluster.kwok import enable_exec
from hack.localcluster.paths import cluster_paths
from kubernetes import client

from gymsandbox.leases import SIGNING_KEY_SECRET, Claims, Scope, issue, key_from_secret, operate_claims, peek
from tests.support.archives import tar_of, untar
from tests.support.chart import OPERATOR_NAMESPACE, Identities
from tests.support.cluster import Cluster
from tests.support.episodes import EPISODE_IMAGE, Episodes
from tests.support.gymhosts import eventually, read_token
from tests.support.processes import BrokerProcess
from tests.support.scrape import scrape

pytestmark = pytest.mark.integration

HOST = "swe-gym-run-1"


@pytest.fixture
def http(broker: BrokerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=broker.url, timeout=30) as session:
        yield session


def auth(token: str, **headers: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", **headers}


def new_episode(http: httpx.Client, token: str, **fields: Any) -> httpx.Response:
    return http.post(
        "/v1/episodes", json={"rolloutId": "r-1", "image": EPISODE_IMAGE, **fields}, headers=auth(token)
    )


def test_healthz_names_the_protocol(http: httpx.Client) -> None:
    assert http.get("/healthz").json() == {"status": "ok", "protocol": "v1"}


def test_create_get_list_and_close_twice(
    http: httpx.Client, host_token: str, api_client: client.ApiClient, namespace: str
) -> None:
    created = new_episode(http, host_token)
    assert created.status_code == 201, created.text
    episode_id = created.json()["id"]
    episodes = Episodes(api_client, namespace)
    episodes.wait_ready(episode_id)
    assert http.get(f"/v1/episodes/{episode_id}", headers=auth(host_token)).json()["ready"] is True
    listed = http.get("/v1/episodes", headers=auth(host_token)).json()["episodes"]
    assert [e["id"] for e in listed] == [episode_id]
    first = http.delete(f"/v1/episodes/{episode_id}", headers=auth(host_token))
    second = http.delete(f"/v1/episodes/{episode_id}", headers=auth(host_token))
    assert (first.status_code, second.status_code) == (200, 200)
    assert second.json()["reason"] == "Closed"
    after = http.get(f"/v1/episodes/{episode_id}", headers=auth(host_token))
    assert (after.status_code, after.json()["code"]) == (404, "session_lost")


def test_labels_reach_the_pod_under_the_user_prefix_and_the_view_carries_stalled_and_failure(
    http: httpx.Client, host_token: str, api_client: client.ApiClient, core: client.CoreV1Api, namespace: str
) -> None:
    created = new_episode(http, host_token, labels={"instance-id": "django__django-11099"})
    assert created.status_code == 201, created.text
    view = created.json()
    assert (view["stalled"], view["failure"]) == (False, None)
    episodes = Episodes(api_client, namespace)
    episodes.wait_ready(view["id"])
    pod = (episodes.get(view["id"]) or {})["status"]["podName"]
    labels = core.read_namespaced_pod(pod, namespace).metadata.labels
    assert labels["user.gymsandbox.dev/instance-id"] == "django__django-11099"
    prefixed = new_episode(http, host_token, labels={"app.kubernetes.io/name": "gymsandbox-broker"})
    assert (prefixed.status_code, prefixed.json()["code"]) == (422, "invalid_request"), prefixed.text
    assert "plain names without a prefix" in prefixed.json()["message"]
    http.delete(f"/v1/episodes/{view['id']}", headers=auth(host_token))


def test_retried_create_with_the_same_idempotency_key_returns_the_same_episode(
    http: httpx.Client, host_token: str
) -> None:
    body = {"rolloutId": "r-1", "image": EPISODE_IMAGE}
    first = http.post("/v1/episodes", json=body, headers=auth(host_token, **{"Idempotency-Key": "k-1"}))
    again = http.post("/v1/episodes", json=body, headers=auth(host_token, **{"Idempotency-Key": "k-1"}))
    other = http.post(
        "/v1/episodes",
        json={**body, "rolloutId": "r-2"},
        headers=auth(host_token, **{"Idempotency-Key": "k-1"}),
    )
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["id"] == again.json()["id"]
    assert (other.status_code, other.json()["code"]) == (409, "conflict")


def test_the_hosts_cap_answers_429_with_retry_after(http: httpx.Client, host_token: str) -> None:
    for _ in range(3):
        assert new_episode(http, host_token).status_code == 201
    over = new_episode(http, host_token)
    assert (over.status_code, over.json()["code"]) == (429, "quota_exceeded")
    assert int(over.headers["Retry-After"]) > 0


@pytest.mark.parametrize(
    ("header", "code"),
    [
        (None, "unauthorized"),
        ("Basic abc", "unauthorized"),
        ("Bearer not-a-token", "unauthorized"),
        ("Bearer gs1.e30.AAAA", "unauthorized"),
    ],
    ids=["missing", "wrong-scheme", "malformed", "bad-signature"],
)
def test_bad_credentials_are_refused_with_401(
    http: httpx.Client, host_token: str, header: str | None, code: str
) -> None:
    headers = {"Authorization": header} if header else {}
    answer = http.get("/v1/episodes", headers=headers)
    assert (answer.status_code, answer.json()["code"]) == (401, code)


def test_tampered_expired_and_foreign_tokens_are_refused(
    http: httpx.Client, host_token: str, core: client.CoreV1Api, namespace: str
) -> None:
    version, payload, signature = host_token.split(".")
    tampered = ".".join([version, payload, signature[:-2] + ("AA" if signature[-2:] != "AA" else "BB")])
    key = key_from_secret(
        client.ApiClient().sanitize_for_serialization(
            core.read_namespaced_secret(SIGNING_KEY_SECRET, OPERATOR_NAMESPACE)
        )
    )
    claims = peek(host_token)
    expired = issue(
        Claims(
            kind="GymHost",
            namespace=claims.namespace,
            name=claims.name,
            uid=claims.uid,
            scope=Scope.HOST,
            expires_at=int(time.time()) - 1,
        ),
        key,
    )
    foreign = issue(
        Claims(
            kind="GymHost",
            namespace=claims.namespace,
            name="someone-else",
            uid="x",
            scope=Scope.HOST,
            expires_at=int(time.time()) + 600,
        ),
        key,
    )
    for token in (tampered, expired, foreign):
        answer = http.get("/v1/episodes", headers=auth(token))
        assert (answer.status_code, answer.json()["code"]) == (401, "unauthorized"), token


def test_an_operate_lease_cannot_close_and_needs_its_rollout(
    http: httpx.Client, host_token: str, core: client.CoreV1Api, api_client: client.ApiClient, namespace: str
) -> None:
    episode_id = new_episode(http, host_token).json()["id"]
    episodes = Episodes(api_client, namespace)
    episodes.wait_ready(episode_id)
    owner = read_token(core, namespace, f"{episode_id}-sandbox-token")
    key = key_from_secret(
        client.ApiClient().sanitize_for_serialization(
            core.read_namespaced_secret(SIGNING_KEY_SECRET, OPERATOR_NAMESPACE)
        )
    )
    operate = issue(operate_claims(peek(owner), peek(owner).expires_at), key)
    closing = http.delete(f"/v1/episodes/{episode_id}", headers=auth(operate, **{"X-Rollout-Id": "r-1"}))
    assert (closing.status_code, closing.json()["code"]) == (403, "forbidden")
    wrong_rollout = http.get(f"/v1/episodes/{episode_id}", headers=auth(operate, **{"X-Rollout-Id": "r-9"}))
    assert (wrong_rollout.status_code, wrong_rollout.json()["code"]) == (403, "forbidden")
    assert (
        http.get(f"/v1/episodes/{episode_id}", headers=auth(operate, **{"X-Rollout-Id": "r-1"})).status_code
        == 200
    )
    assert http.delete(f"/v1/episodes/{episode_id}", headers=auth(owner)).status_code == 200


@pytest.mark.parametrize(
    ("body", "code", "words"),
    [
        ({"rolloutId": "r-1", "image": "docker.io/evil/miner:1"}, "image_not_approved", "approved list"),
        ({"rolloutId": "r-1", "image": EPISODE_IMAGE, "privileged": True}, "invalid_request", "privileged"),
        ({"rolloutId": "r-1", "image": EPISODE_IMAGE, "user": "root"}, "invalid_request", "user"),
        ({"rolloutId": "r-1", "image": EPISODE_IMAGE, "ttlSeconds": 7200}, "invalid_request", "1800"),
        ({"image": EPISODE_IMAGE}, "invalid_request", "rolloutId"),
    ],
    ids=["unapproved-image", "unknown-field", "named-user", "ttl-over-cap", "missing-rollout"],
)
def test_bad_create_requests_answer_their_code(
    http: httpx.Client, host_token: str, body: dict[str, Any], code: str, words: str
) -> None:
    answer = http.post("/v1/episodes", json=body, headers=auth(host_token))
    assert (answer.status_code, answer.json()["code"]) == (422, code)
    assert words in answer.json()["message"]


def test_invalid_json_and_unknown_episode_answer_their_code(http: httpx.Client, host_token: str) -> None:
    garbled = http.post(
        "/v1/episodes", content=b"{not json", headers=auth(host_token, **{"Content-Type": "application/json"})
    )
    assert (garbled.status_code, garbled.json()["code"]) == (422, "invalid_request")
    missing = http.get("/v1/episodes/nope", headers=auth(host_token))
    assert (missing.status_code, missing.json()["code"]) == (404, "episode_not_found")


def test_exec_requests_over_the_caps_are_refused(http: httpx.Client, host_token: str) -> None:
    episode_id = new_episode(http, host_token).json()["id"]
    over_timeout = http.post(
        f"/v1/episodes/{episode_id}/exec",
        json={"argv": ["true"], "timeoutSeconds": 5000},
        headers=auth(host_token),
    )
    huge_argv = http.post(
        f"/v1/episodes/{episode_id}/exec", json={"argv": ["x"] * 10_000}, headers=auth(host_token)
    )
    both = http.post(
        f"/v1/episodes/{episode_id}/exec", json={"argv": ["true"], "shell": "true"}, headers=auth(host_token)
    )
    for answer in (over_timeout, huge_argv, both):
        assert (answer.status_code, answer.json()["code"]) == (422, "invalid_request"), answer.text


def test_a_granted_operate_lease_uses_but_cannot_close_and_renewal_moves_expiry(
    http: httpx.Client, host_token: str, api_client: client.ApiClient, namespace: str
) -> None:
    created = new_episode(http, host_token, ttlSeconds=300)
    assert created.status_code == 201, created.text
    episode_id = created.json()["id"]
    episodes = Episodes(api_client, namespace)
    episodes.wait_ready(episode_id)
    grant = http.post(f"/v1/episodes/{episode_id}/leases", json={"ttlSeconds": 60}, headers=auth(host_token))
    assert grant.status_code == 201, grant.text
    lease = grant.json()
    assert (lease["scope"], lease["rolloutId"]) == ("operate", "r-1")
    operate = auth(lease["token"], **{"X-Rollout-Id": "r-1"})
    assert http.get(f"/v1/episodes/{episode_id}", headers=operate).status_code == 200
    regrant = http.post(f"/v1/episodes/{episode_id}/leases", json={"rolloutId": "r-6"}, headers=operate)
    assert (regrant.status_code, regrant.json()["code"]) == (403, "forbidden")
    before = (episodes.get(episode_id) or {})["status"]["expiresAt"]
    renewed = http.post(
        f"/v1/episodes/{episode_id}/renew", json={"ttlSeconds": 900}, headers=auth(host_token)
    )
    assert renewed.status_code == 200, renewed.text
    eventually(
        lambda: ((episodes.get(episode_id) or {}).get("status") or {}).get("expiresAt") not in (None, before),
        timeout=10,
        what="expiresAt to move",
    )
    over = http.post(f"/v1/episodes/{episode_id}/renew", json={"ttlSeconds": 7200}, headers=auth(host_token))
    assert (over.status_code, over.json()["code"]) == (422, "invalid_request")


@pytest.fixture
def sandbox(
    http: httpx.Client, host_token: str, cluster: Cluster, api_client: client.ApiClient, namespace: str
) -> str:
    """A Ready episode whose pod runs commands (on the local control plane, kwok runs them as processes)."""
    created = new_episode(http, host_token)
    assert created.status_code == 201, created.text
    episode_id = str(created.json()["id"])
    episodes = Episodes(api_client, namespace)
    episodes.wait_ready(episode_id)
    if cluster.local:
        pod = (episodes.get(episode_id) or {})["status"]["podName"]
        paths = cluster_paths()
        enable_exec(paths, namespace, pod, served=True)
    return episode_id


def run(http: httpx.Client, token: str, episode_id: str, **body: Any) -> dict[str, Any]:
    answer = http.post(f"/v1/episodes/{episode_id}/exec", json=body, headers=auth(token))
    assert answer.status_code == 200, answer.text
    result: dict[str, Any] = answer.json()
    return result


def test_exec_runs_argv_and_shell_and_reports_exit_codes(
    http: httpx.Client, host_token: str, sandbox: str
) -> None:
    echoed = run(http, host_token, sandbox, argv=["echo", "hello"])
    assert (echoed["exitCode"], echoed["stdout"], echoed["timedOut"]) == (0, "hello\n", False)
    failed = run(http, host_token, sandbox, shell="echo oops >&2; exit 3", env={"GREETING": "hi"})
    assert (failed["exitCode"], failed["stderr"].splitlines()[0]) == (3, "oops")
    env = run(http, host_token, sandbox, shell='echo "$GREETING"', env={"GREETING": "hi"})
    assert env["stdout"] == "hi\n"


def test_a_command_past_its_deadline_answers_minus_one_in_about_its_timeout(
    http: httpx.Client, host_token: str, sandbox: str
) -> None:
    started = time.monotonic()
    result = run(http, host_token, sandbox, argv=["sleep", "30"], timeoutSeconds=1)
    assert (result["exitCode"], result["timedOut"]) == (-1, True)
    assert time.monotonic() - started < 5


def test_output_over_the_cap_is_truncated_with_a_marker(
    http: httpx.Client, host_token: str, sandbox: str
) -> None:
    result = run(http, host_token, sandbox, shell="head -c 5000 /dev/zero | tr '\\0' x", maxOutputBytes=100)
    assert result["truncated"] is True
    assert result["stdout"].startswith("x" * 100)
    assert "[output truncated]" in result["stdout"]


def test_a_directory_uploaded_comes_back_byte_identical(
    http: httpx.Client, host_token: str, sandbox: str
) -> None:
    files = {"blob.bin": os.urandom(200_000), "nested/notes.txt": b"line\r\n\x00end"}
    put = http.put(
        f"/v1/episodes/{sandbox}/directories/data", content=tar_of(files), headers=auth(host_token)
    )
    assert put.status_code == 204, put.text
    got = http.get(f"/v1/episodes/{sandbox}/directories/data", headers=auth(host_token))
    assert got.status_code == 200, got.text
    assert untar(got.content) == files


def test_a_file_uploaded_comes_back_byte_identical(http: httpx.Client, host_token: str, sandbox: str) -> None:
    payload = os.urandom(70_000)
    assert (
        http.put(
            f"/v1/episodes/{sandbox}/files/in/data.bin", content=payload, headers=auth(host_token)
        ).status_code
        == 204
    )
    got = http.get(f"/v1/episodes/{sandbox}/files/in/data.bin", headers=auth(host_token))
    assert (got.status_code, got.content) == (200, payload)


def test_unsafe_uploads_are_refused_and_leave_nothing(
    http: httpx.Client, host_token: str, sandbox: str
) -> None:
    escape = io.BytesIO()
    with tarfile.open(fileobj=escape, mode="w") as archive:
        link = tarfile.TarInfo("out")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc"
        archive.addfile(link)
    attempts = [
        http.put(
            f"/v1/episodes/{sandbox}/directories/evil", content=escape.getvalue(), headers=auth(host_token)
        ),
        http.put(
            f"/v1/episodes/{sandbox}/directories/evil",
            content=tar_of({"../up.txt": b"x"}),
            headers=auth(host_token),
        ),
        http.put(
            f"/v1/episodes/{sandbox}/files/..%2F..%2Fetc%2Fpasswd", content=b"x", headers=auth(host_token)
        ),
        http.put(f"/v1/episodes/{sandbox}/directories/evil", content=b"not a tar", headers=auth(host_token)),
    ]
    for answer in attempts:
        assert (answer.status_code, answer.json()["code"]) == (422, "invalid_request"), answer.text
    listing = run(http, host_token, sandbox, shell="ls -a")
    assert "evil" not in listing["stdout"]
    assert ".gs-part" not in listing["stdout"]
    oversized = http.put(
        f"/v1/episodes/{sandbox}/files/big", content=b"x" * (64 * 1024 * 1024 + 1), headers=auth(host_token)
    )
    assert (oversized.status_code, oversized.json()["code"]) == (413, "payload_too_large")
    assert http.get("/healthz").json()["status"] == "ok"


def test_calls_after_close_answer_session_lost(http: httpx.Client, host_token: str, sandbox: str) -> None:
    assert http.delete(f"/v1/episodes/{sandbox}", headers=auth(host_token)).status_code == 200
    answer = http.post(f"/v1/episodes/{sandbox}/exec", json={"argv": ["true"]}, headers=auth(host_token))
    assert (answer.status_code, answer.json()["code"]) == (404, "session_lost")


def test_metrics_count_requests_by_route_and_logs_hold_no_token(
    http: httpx.Client, host_token: str, sandbox: str, broker: BrokerProcess
) -> None:
    before = scrape(broker.metrics_url)
    run(http, host_token, sandbox, shell="printf 12345")
    put = http.put(f"/v1/episodes/{sandbox}/files/in/m.bin", content=b"x" * 1000, headers=auth(host_token))
    assert put.status_code == 204, put.text
    http.get("/v1/episodes", headers=auth("Bearer garbage"))
    http.get("/v1/episodes")
    after = scrape(broker.metrics_url)
    exec_route = {"route": "/v1/episodes/{episode_id}/exec", "method": "POST"}

    def grown(name: str, **labels: str) -> float:
        return after.value(name, **labels) - before.value(name, **labels)

    assert grown("gymsandbox_broker_requests_total", status="200", **exec_route) == 1
    assert grown("gymsandbox_broker_request_duration_seconds_count", **exec_route) == 1
    assert grown("gymsandbox_broker_exec_duration_seconds_count", outcome="ok") == 1
    assert grown("gymsandbox_broker_sandbox_bytes_total", call="exec", direction="out") == 5
    assert grown("gymsandbox_broker_sandbox_bytes_total", call="transfer", direction="in") == 1000
    assert grown("gymsandbox_broker_auth_failures_total", reason="malformed") == 1
    assert grown("gymsandbox_broker_auth_failures_total", reason="missing_header") == 1
    assert "gymsandbox_broker_requests_in_flight" in after.sample_names()
    # Not on the API port, which every host pod can reach: only scrapers reach the metrics port.
    assert http.get("/metrics").status_code == 422
    log = broker.log.read_text()
    assert '"route": "/v1/episodes/{episode_id}/exec"' in log
    assert host_token not in log
    assert host_token.split(".")[2] not in log  # not even the signature part


def test_on_sigterm_in_flight_execs_finish_while_new_creates_get_503(
    identities: Identities,
    policy_file: Path,
    tmp_path: Path,
    http: httpx.Client,
    host_token: str,
    sandbox: str,
) -> None:
    draining = BrokerProcess.launch(identities.broker, policy_file, tmp_path / "broker.log")
    try:
        with (
            httpx.Client(base_url=draining.url, timeout=30) as own,
            ThreadPoolExecutor(max_workers=1) as pool,
        ):
            slow = pool.submit(run, own, host_token, sandbox, argv=["sleep", "2"], timeoutSeconds=10)
            time.sleep(0.5)
            draining.process.send_signal(signal.SIGTERM)
            time.sleep(0.3)
            refused = new_episode(own, host_token)
            assert (refused.status_code, refused.json()["code"]) == (503, "shutting_down")
            assert own.get("/healthz").status_code == 503
            assert slow.result(timeout=20)["exitCode"] == 0  # the in-flight exec finished
        # uvicorn shuts down cleanly, then re-raises the SIGTERM it captured, as a stopped service should.
        assert draining.process.wait(timeout=20) in (0, -signal.SIGTERM)
        assert "Traceback" not in draining.log.read_text()
    finally:
        draining.stop()


def test_oversized_json_bodies_are_refused_and_the_broker_keeps_serving(
    http: httpx.Client, host_token: str
) -> None:
    huge = {
        "rolloutId": "r-1",
        "image": EPISODE_IMAGE,
        "env": [{"name": "A", "value": "x" * (2 * 1024 * 1024)}],
    }
    answer = http.post("/v1/episodes", json=huge, headers=auth(host_token))
    assert (answer.status_code, answer.json()["code"]) == (413, "payload_too_large")
    assert http.get("/healthz").status_code == 200


def test_concurrent_execs_and_reads_do_not_disturb_each_other(
    http: httpx.Client, host_token: str, sandbox: str
) -> None:
    def one(i: int) -> tuple[int, str]:
        if i % 2:
            return http.get(f"/v1/episodes/{sandbox}", headers=auth(host_token)).status_code, "read"
        answer = http.post(
            f"/v1/episodes/{sandbox}/exec", json={"argv": ["echo", str(i)]}, headers=auth(host_token)
        )
        return answer.status_code, answer.json()["stdout"] if answer.status_code == 200 else answer.text

    with ThreadPoolExecutor(max_workers=32) as pool:
        results = list(pool.map(one, range(64)))
    assert all(status == 200 for status, _ in results), [r for r in results if r[0] != 200][:3]
    assert [out for i, (_, out) in enumerate(results) if i % 2 == 0] == [f"{i}\n" for i in range(0, 64, 2)]
