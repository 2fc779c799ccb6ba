"""A bounded fuzz run of the real broker from its own OpenAPI document (schemathesis).

Every operation in /openapi.json is fuzzed in both of schemathesis's generation modes (positive: requests
the schema allows; negative: requests it forbids), a fixed number of examples each, derandomized (the
same requests on every run), with no Hypothesis database and a wall-clock budget per operation. It runs
twice: with the GymHost's real lease token, so requests get through authentication to the policy and the
backend, and with garbage tokens (the fuzzer's own Authorization values, forgeries of the real token), so
every call must stop at authentication. Half of the requests aim at a real, Ready episode of that host, so
ids, leases, renewals, exec and file paths are tried against something that exists. Its pod has no kwok
exec, so nothing fuzzed is ever run as a process (exec answers -2, transfers 502 `backend_error`).

Checked on every answer: the broker answers at all (no crash, no hang); never 500; every answer that is
not 2xx is JSON `{code, message}` with a code from errors.STATUS and that code's HTTP status, with no
exemption: the fuzzer does not leave the routes in the schema, and a caller parses every error alike;
2xx bodies match the documented schema; nothing the policy refuses gets a 2xx; with a garbage token nothing
but /healthz succeeds. After each run the broker still answers /healthz. Findings are collected, not
shrunk, and reported together with the exact request and answer.
"""

from __future__ import annotations

import base64
import json
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, Verbosity, given, settings
from hypothesis import strategies as st
from hypothesis.configuration import set_hypothesis_home_dir
from hypothesis.errors import Unsatisfiable
from kubernetes import client
from schemathesis import APIOperation, Case, GenerationMode
from schemathesis.core.failures import FailureGroup
from schemathesis.specs.openapi.checks import response_schema_conformance

from gymsandbox.broker.archive import sandbox_path
from gymsandbox.broker.errors import STATUS, BrokerError
from gymsandbox.broker.service import BrokerSettings
from tests.integration.conftest import BrokerProcess, Cluster, OperatorProcess
from tests.integration.episodes import EPISODE_IMAGE, Episodes
from tests.integration.gymhosts import Hosts, apply, eventually, sample, set_path

pytestmark = pytest.mark.integration

HOST = "swe-gym-run-1"
EXAMPLES = 10  # per operation and generation mode: about 230 requests a run
MODES = (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
RUN_BUDGET_SECONDS = 30.0  # per run, shared by operation and mode; past its share, an operation stops sending
REQUEST_TIMEOUT_SECONDS = 30.0
MAX_TTL_SECONDS = 1800  # the sample host's spec.episodes.maxTTLSeconds
FINDINGS_SHOWN = 25
# What a caller without a valid token may hear: refused (401), or stopped before authentication by
# request validation (422) or the upload limit (413).
BEFORE_AUTH = frozenset({"unauthorized", "invalid_request", "payload_too_large"})
STATUS_OF: dict[str, int] = dict(STATUS)  # the fixed set of error codes and their HTTP statuses
UNREACHED_BACKEND = "the cluster could not be reached"  # app._unexpected: an exception no handler expected


def read_token(core: client.CoreV1Api, namespace: str, secret: str) -> str:
    return base64.b64decode(core.read_namespaced_secret(secret, namespace).data["token"]).decode()


@pytest.fixture
def hypothesis_home(tmp_path: Path) -> Iterator[None]:
    """Hypothesis keeps caches (constants, unicode data) beside the database: in a temporary directory."""
    set_hypothesis_home_dir(tmp_path / "hypothesis")
    yield
    set_hypothesis_home_dir(None)


@pytest.fixture
def host_token(
    cluster: Cluster, operator: OperatorProcess, namespace: str, hosts: Hosts, core: client.CoreV1Api
) -> str:
    claim, host = sample()
    set_path(host, "spec.episodes.maxConcurrent", 3)
    set_path(host, "spec.episodes.maxTTLSeconds", MAX_TTL_SECONDS)
    apply(cluster, namespace, claim, host)
    hosts.wait_reason(HOST, "HostReady")
    return read_token(core, namespace, f"{HOST}-lease")


@pytest.fixture
def episode_id(broker: BrokerProcess, host_token: str, api_client: client.ApiClient, namespace: str) -> str:
    """A Ready episode of the host. No kwok Exec object is made for its pod: fuzzed commands never run."""
    created = httpx.post(
        f"{broker.url}/v1/episodes",
        json={"rolloutId": "r-1", "image": EPISODE_IMAGE},
        headers={"Authorization": f"Bearer {host_token}"},
        timeout=30,
    )
    assert created.status_code == 201, created.text
    name = str(created.json()["id"])
    episodes = Episodes(api_client, namespace)
    eventually(lambda: episodes.ready_reason(name) == "SandboxReady", timeout=30, what="Ready")
    return name


def forgeries(token: str) -> list[str | None]:
    """Authorization values that must all be refused; None keeps whatever the fuzzer generated (or none)."""
    version, payload, signature = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    longer = {**claims, "expires_at": claims["expires_at"] + 86_400}
    resigned = base64.urlsafe_b64encode(json.dumps(longer, sort_keys=True, separators=(",", ":")).encode())
    flipped = ("A" if signature[-1] != "A" else "B") + signature[:-1][::-1]
    return [
        None,
        "Bearer not-a-token",
        f"Bearer {version}.{payload}.{flipped}",  # the real claims, a wrong signature
        f"Bearer {version}.{resigned.decode().rstrip('=')}.{signature}",  # claims changed under the signature
        f"Bearer {version}.{payload}.",  # no signature at all
        f"Basic {token}",  # the real token under the wrong scheme
        f"Bearer {token}x",
    ]


@dataclass
class Finding:
    problem: str
    request: str
    answer: str


@dataclass
class Run:
    """One fuzz run: who calls, what exists, and what was found."""

    url: str
    token: str  # the real host token: sent as is (valid run) or forged (garbage run)
    episode_id: str
    valid: bool
    known_ids: set[str] = field(default_factory=set)
    sent: dict[str, int] = field(default_factory=dict)
    statuses: Counter[tuple[str, int]] = field(default_factory=Counter)
    findings: dict[tuple[str, str], Finding] = field(default_factory=dict)

    def authorizations(self) -> st.SearchStrategy[str | None]:
        if self.valid:
            return st.just(f"Bearer {self.token}")
        return st.sampled_from(forgeries(self.token))

    def redact(self, text: str) -> str:
        _, payload, signature = self.token.split(".")
        return text.replace(payload, "<host token payload>").replace(signature, "<host token signature>")

    def note(self, label: str, problem: str, case: Case, response: Any | None, detail: str = "") -> None:
        key = (label, problem.split(":", maxsplit=1)[0])
        if key in self.findings:
            return
        if response is not None:
            request = response.request
            body = request.body if isinstance(request.body, bytes) else (request.body or "").encode()
            headers = {k: v for k, v in request.headers.items() if k not in ("User-Agent", "Accept-Encoding")}
            sent = f"{request.method} {request.url}\n    headers: {headers}\n    body: {body[:400]!r}"
            answer = f"{response.status_code} {response.headers}\n    {response.content[:600]!r}"
        else:
            sent, answer = case.as_curl_command(), detail
        self.findings[key] = Finding(problem, self.redact(sent), self.redact(answer))


def content_type(response: Any) -> str:
    values = next((v for k, v in response.headers.items() if k.lower() == "content-type"), [""])
    return str(values[0]).split(";")[0].strip()


def check_error(run: Run, label: str, case: Case, response: Any) -> None:
    """A non-2xx answer: `{code, message}` with a known code and that code's status; no 500, ever."""
    status = response.status_code
    if status == 500:
        run.note(label, "HTTP 500", case, response)
        return
    try:
        body = json.loads(response.content)
    except ValueError:
        body = None
    if content_type(response) != "application/json" or not isinstance(body, dict):
        run.note(label, f"HTTP {status}: error body is not a JSON object", case, response)
        return
    code, message = body.get("code"), body.get("message")
    if set(body) != {"code", "message"} or not isinstance(code, str) or not isinstance(message, str):
        run.note(label, f"HTTP {status}: error body is not {{code, message}}", case, response)
    elif code not in STATUS_OF:
        run.note(label, f"HTTP {status}: unknown error code {code!r}", case, response)
    elif STATUS_OF[code] != status:
        run.note(label, f"HTTP {status}: code {code!r} belongs to HTTP {STATUS_OF[code]}", case, response)
    elif code == "backend_error" and message == UNREACHED_BACKEND:
        run.note(label, "an unexpected exception in the broker, answered as 502", case, response)
    elif not run.valid and code not in BEFORE_AUTH:
        run.note(label, f"HTTP {status}: {code!r} told to a caller without a valid token", case, response)


def check_success(run: Run, label: str, case: Case, response: Any) -> None:
    """A 2xx answer: documented, and only for what the token and the policy allow."""
    if label == "GET /healthz":
        return
    if not run.valid:
        run.note(label, "2xx with a garbage token", case, response)
        return
    target = (case.path_parameters or {}).get("episode_id")
    if target is not None and target not in run.known_ids:
        run.note(label, "2xx for an episode this host does not have", case, response)
    if label == "POST /v1/episodes":
        run.known_ids.add(json.loads(response.content)["id"])
    check_policy(run, label, case, response)
    if content_type(response) == "application/json":
        try:
            case.validate_response(response, checks=[response_schema_conformance])
        except FailureGroup as e:
            run.note(label, "2xx body does not match the OpenAPI schema", case, response, str(e))


def check_policy(run: Run, label: str, case: Case, response: Any) -> None:
    """What a 2xx proves was allowed: each must be within the policy and the host's caps."""
    body = case.body if isinstance(case.body, dict) else {}
    if label == "POST /v1/episodes" and (
        json.loads(response.content)["image"] != EPISODE_IMAGE
        or (body.get("ttlSeconds") or 0) > MAX_TTL_SECONDS
    ):
        run.note(label, "an episode created against the policy", case, response)
    if label.endswith("/renew") and body.get("ttlSeconds", 0) > MAX_TTL_SECONDS:
        run.note(label, "renewed past the host's maxTTLSeconds", case, response)
    if label.endswith("/exec") and body.get("timeoutSeconds", 0) > BrokerSettings().max_exec_timeout_seconds:
        run.note(label, "exec past the broker's timeout cap", case, response)
    if label.endswith("/leases") and json.loads(response.content).get("scope") != "operate":
        run.note(label, "a lease grant that is not an operate lease", case, response)
    if "{path}" in label:
        try:
            sandbox_path((case.path_parameters or {})["path"])
        except BrokerError:
            run.note(label, "a transfer outside the sandbox's working directory", case, response)


def send(run: Run, label: str, case: Case, authorization: str | None, session: requests.Session) -> None:
    if authorization is not None:
        case.headers = case.headers or {}  # type: ignore[assignment]
        for name in [k for k in case.headers if k.lower() == "authorization"]:
            del case.headers[name]
        case.headers["Authorization"] = authorization
    try:
        response = case.call(
            base_url=run.url, session=session, timeout=REQUEST_TIMEOUT_SECONDS, allow_redirects=False
        )
    except requests.RequestException as e:
        run.note(label, f"no answer: {type(e).__name__}", case, None, str(e)[:300])
        return
    run.sent[label] = run.sent.get(label, 0) + 1
    run.statuses[label, response.status_code] += 1
    if 200 <= response.status_code < 300:
        check_success(run, label, case, response)
    else:
        check_error(run, label, case, response)


def fuzz(run: Run) -> set[str]:
    """Fuzz every operation in both modes; returns the operations' labels."""
    schema = schemathesis.openapi.from_url(f"{run.url}/openapi.json", timeout=REQUEST_TIMEOUT_SECONDS)
    operations = [result.ok() for result in schema.get_all_operations()]
    # Closing the real episode ends what the others can do with it: DELETE goes last.
    operations.sort(key=lambda operation: operation.method.upper() == "DELETE")
    runs = [(operation, mode) for operation in operations for mode in MODES]
    end = time.monotonic() + RUN_BUDGET_SECONDS
    with requests.Session() as session:
        for index, (operation, mode) in enumerate(runs):
            share = (end - time.monotonic()) / (len(runs) - index)  # what the fast ones leave goes on
            fuzz_operation(run, operation, mode, session, time.monotonic() + share)
    return {operation.label for operation in operations}


def fuzz_operation(
    run: Run, operation: APIOperation, mode: GenerationMode, session: requests.Session, deadline: float
) -> None:
    cases = operation.as_strategy(generation_mode=mode)
    if "{episode_id}" in operation.path:
        aimed = operation.as_strategy(generation_mode=mode, path_parameters={"episode_id": run.episode_id})
        cases = st.one_of(cases, aimed)
    sent = 0

    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.explicit, Phase.generate],  # findings are collected, never shrunk
        suppress_health_check=list(HealthCheck),
        verbosity=Verbosity.quiet,
    )
    @given(case=cases, authorization=run.authorizations())
    def example(case: Case, authorization: str | None) -> None:
        nonlocal sent
        if sent == 0 or time.monotonic() < deadline:  # past its share, an operation still sends one
            send(run, operation.label, case, authorization, session)
            sent += 1

    try:
        example()
    except Unsatisfiable:
        # No request can break the schema here (no parameters, or only free-form headers).
        assert mode is GenerationMode.NEGATIVE, operation.label


def broker_log_since(broker: BrokerProcess, offset: int) -> str:
    return broker.log.read_bytes()[offset:].decode(errors="replace")


def report(run: Run, log: str) -> str:
    lines = [f"{len(run.findings)} finding(s), requests sent per operation: {run.sent}"]
    for finding in list(run.findings.values())[:FINDINGS_SHOWN]:
        lines += [f"- {finding.problem}", f"  request: {finding.request}", f"  answer:  {finding.answer}"]
    failures = [line for line in log.splitlines() if "backend failure" in line or "Traceback" in line]
    if failures:
        lines += ["broker log:", *failures[:FINDINGS_SHOWN]]
    return run.redact("\n".join(lines))


@pytest.mark.timeout(90)  # the hard stop; a run normally takes 10 to 20 s after its setup
@pytest.mark.parametrize("valid", [True, False], ids=["host-token", "garbage-token"])
def test_fuzzing_the_openapi_operations_finds_no_500_no_stray_error_and_no_way_past_the_policy(
    broker: BrokerProcess, host_token: str, episode_id: str, valid: bool, hypothesis_home: None
) -> None:
    offset = broker.log.stat().st_size
    run = Run(broker.url, host_token, episode_id, valid, known_ids={episode_id})
    started = time.monotonic()
    labels = fuzz(run)
    elapsed = time.monotonic() - started
    print(f"{len(labels)} operations, {sum(run.sent.values())} requests, {elapsed:.1f} s: {run.statuses}")
    log = broker_log_since(broker, offset)
    assert broker.process.poll() is None, f"the broker exited\n{report(run, log)}"
    health = httpx.get(f"{broker.url}/healthz", timeout=10)
    assert (health.status_code, health.json()["status"]) == (200, "ok"), health.text
    assert not run.findings, report(run, log)
    assert set(run.sent) == labels, f"operations never sent: {labels - set(run.sent)}"
