"""A bounded fuzz run of the real broker from its own OpenAPI document (schemathesis).

Every operation in /openapi.json is fuzzed in both of schemathesis's generation modes (positive: requests
the schema allows; negative: requests it forbids), a fixed number of examples each, derandomized, with no
Hypothesis database and a wall-clock budget per run. Before the fuzzing, fixed probes send the ids and
paths that break servers and sandboxes (`a/b`, `a%b`, `.`, `?`, `#`, `../../etc/passwd`, NUL, newline,
over-long values) to every episode route. All of it runs twice: with the GymHost's real lease token, so
requests get through authentication to the policy and the backend, and with garbage tokens (the
fuzzer's own Authorization values, forgeries of the real token), so every call must stop at
authentication. Half the fuzzed calls on episode routes aim at a real, Ready episode, so leases,
renewals, exec and file paths are tried against something that exists. Its pod has no kwok exec, so
nothing fuzzed is ever run as a process (exec answers -2, transfers 502 `backend_error`).

Derandomized means: the same checkout and test selection send the same requests. Hypothesis also mixes
literals from the project's loaded modules into what it draws, so a code change may change them.

Checked on every answer: the broker answers at all (no crash, no hang); never 500; every answer that is
not 2xx is JSON `{code, message}` with a code from errors.STATUS and that code's HTTP status, with no
exemption for the router's own 404/400: every request is for an operation of the schema, and a caller
parses every error alike; an exception no handler expected (502 "the cluster could not be reached" while
the cluster is up) is a finding; 2xx bodies match the documented schema; nothing the policy refuses gets
a 2xx, and no path the broker's own path check refuses reaches the backend; with a garbage token nothing
but /healthz succeeds. After each run the broker still answers /healthz. Findings are collected, not
shrunk, and reported together with the exact request and answer, grouped by problem and probe.
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
from urllib.parse import quote, unquote

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
from tests.support.cluster import Cluster
from tests.support.episodes import EPISODE_IMAGE, Episodes
from tests.support.gymhosts import Hosts, apply, read_token, sample, set_path
from tests.support.processes import BrokerProcess, OperatorProcess

pytestmark = pytest.mark.integration

HOST = "swe-gym-run-1"
EXAMPLES = 10  # per operation and generation mode: about 210 fuzzed requests a run, and 120 probes
MODES = (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
RUN_BUDGET_SECONDS = 30.0  # per run (about 15 s are used); past it, each operation and mode sends only one
REQUEST_TIMEOUT_SECONDS = 30.0
STEERED_EXEC_TIMEOUT_SECONDS = 5
MAX_TTL_SECONDS = 1800  # the sample host's spec.episodes.maxTTLSeconds
FINDINGS_SHOWN = 25
# What a caller without a valid token may hear: refused (401), or stopped before authentication by
# request validation (422) or the upload limit (413).
BEFORE_AUTH = frozenset({"unauthorized", "invalid_request", "payload_too_large"})
# Probes sent as they are before the fuzzing: ids and paths that have broken servers (and sandboxes) before.
# "?watch=true" once turned a read into a watch that never answered; "#x" once aliased the real episode.
TRICKY_IDS = ("a/b", "a%b", ".", "..", "?", "#", "?watch=true", "a\nb", "a\x00b", "x" * 300)
TRICKY_PATHS = ("../../etc/passwd", "/etc/passwd", "a/../../b", ".", "..", "a\nb", "a\x00b", "x" * 1100)
STATUS_OF: dict[str, int] = dict(STATUS)  # the fixed set of error codes and their HTTP statuses
UNREACHED_BACKEND = "the cluster could not be reached"  # app._backend_error: an exception nothing expected


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
    episodes.wait_ready(name, timeout=30)
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
    source: str  # "fuzzed", or the probe's tricky value
    request: str
    answer: str
    labels: list[str]


@dataclass
class Run:
    """One fuzz run: who calls, what exists, and what was found."""

    url: str
    token: str = field(repr=False)  # the real host token: sent as is (valid run) or forged (garbage run)
    episode_id: str
    valid: bool
    known_ids: set[str] = field(default_factory=set)
    sent: dict[str, int] = field(default_factory=dict)
    statuses: Counter[tuple[str, int]] = field(default_factory=Counter)
    findings: dict[tuple[str, str, str], Finding] = field(default_factory=dict)
    source: str = "fuzzed"  # what is being sent now

    def authorizations(self) -> st.SearchStrategy[str | None]:
        if self.valid:
            return st.just(f"Bearer {self.token}")
        return st.sampled_from(forgeries(self.token))

    def redact(self, text: str) -> str:
        _, payload, signature = self.token.split(".")
        return text.replace(payload, "<host token payload>").replace(signature, "<host token signature>")

    def note(self, label: str, problem: str, case: Case, response: Any | None, detail: str = "") -> None:
        # One finding per problem and probe value (over all operations); fuzzed ones per operation too.
        key = (problem.split(":", maxsplit=1)[0], self.source, label if self.source == "fuzzed" else "")
        if key in self.findings:
            if label not in self.findings[key].labels:
                self.findings[key].labels.append(label)
            return
        if response is not None:
            request = response.request
            body = request.body if isinstance(request.body, bytes) else (request.body or "").encode()
            headers = {k: v for k, v in request.headers.items() if k not in ("User-Agent", "Accept-Encoding")}
            sent = f"{request.method} {request.url}\n    headers: {headers}\n    body: {body[:400]!r}"
            answer = f"{response.status_code} {response.headers}\n    {response.content[:600]!r}"
        else:
            sent, answer = case.as_curl_command(), detail
        self.findings[key] = Finding(problem, self.source, self.redact(sent), self.redact(answer), [label])


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
    elif code == "backend_error" and "{path}" in label and not inside_sandbox(case):
        run.note(label, "a path outside the sandbox got past the path check", case, response)
    elif not run.valid and code not in BEFORE_AUTH:
        run.note(label, f"HTTP {status}: {code!r} told to a caller without a valid token", case, response)


def check_success(run: Run, label: str, case: Case, response: Any) -> None:
    """A 2xx answer: documented, and only for what the token and the policy allow."""
    if label == "GET /healthz":
        return
    if not run.valid:
        run.note(label, "2xx with a garbage token", case, response)
        return
    target = parameter(case, "episode_id")
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
    if "{path}" in label and not inside_sandbox(case):
        run.note(label, "a transfer outside the sandbox's working directory", case, response)


def parameter(case: Case, name: str) -> str | None:
    """A path parameter as the broker sees it (schemathesis keeps them percent-encoded)."""
    value = (case.path_parameters or {}).get(name)
    return None if value is None else unquote(str(value))


def inside_sandbox(case: Case) -> bool:
    try:
        sandbox_path(parameter(case, "path") or "")
    except BrokerError:
        return False
    return True


def send(run: Run, label: str, case: Case, authorization: str | None, session: requests.Session) -> None:
    if authorization is not None:
        case.headers["Authorization"] = authorization  # case-insensitive: replaces the fuzzer's own
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
    deadline = time.monotonic() + RUN_BUDGET_SECONDS
    forged = forgeries(run.token)
    with requests.Session() as session:
        for operation in operations:  # first the probes, while the real episode is surely there
            for index, (source, case) in enumerate(probe_cases(run, operation)):
                authorization = f"Bearer {run.token}" if run.valid else forged[index % len(forged)]
                run.source = source
                send(run, operation.label, case, authorization, session)
        run.source = "fuzzed"
        for operation in operations:
            for mode in MODES:
                fuzz_operation(run, operation, mode, session, deadline)
    return {operation.label for operation in operations}


def encode(value: str) -> str:
    """Percent-encoded as schemathesis keeps path parameters; dots too, or the client would resolve them."""
    return quote(value, safe="").replace(".", "%2E")


def probe_cases(run: Run, operation: APIOperation) -> list[tuple[str, Case]]:
    """Tricky ids for every episode route, tricky paths against the real episode; bodies that are valid,
    so only the id or path is in question. The real episode is not closed or renewed here."""
    if "{episode_id}" not in operation.path:
        return []
    ids = list(TRICKY_IDS)
    if operation.method.upper() != "DELETE":
        ids.append(f"{run.episode_id}#x")  # another id, which must not reach the real episode
    targets = [(f"probe id {value!r}", {"episode_id": encode(value), "path": "f"}) for value in ids]
    if "{path}" in operation.path:
        targets += [
            (f"probe path {value!r}", {"episode_id": run.episode_id, "path": encode(value)})
            for value in TRICKY_PATHS
        ]
    body: dict[str, Any] = {}
    if operation.path.endswith("/exec"):
        body = {"body": {"argv": ["true"]}, "media_type": "application/json"}
    elif operation.path.endswith("/leases"):
        body = {"body": {"rolloutId": "r-1"}, "media_type": "application/json"}
    elif operation.path.endswith("/renew"):
        body = {"body": {"ttlSeconds": 600}, "media_type": "application/json"}
    elif operation.method.upper() == "PUT":
        body = {"body": b"x", "media_type": "application/octet-stream"}
    names = [p.name for p in operation.path_parameters]
    return [
        (source, operation.Case(path_parameters={k: v for k, v in target.items() if k in names}, **body))
        for source, target in targets
    ]


def one_command(case: Case) -> Case:
    """The schema cannot say "exactly one of argv and shell": steer an exec at the real episode to one, so
    it reaches the backend, with a short timeout (a real sandbox, on a cluster other than kwok, runs it)."""
    body = case.body
    if isinstance(body, dict):
        if body.get("argv") is not None:
            body.pop("shell", None)
        elif body.get("shell") is None:
            body["argv"] = ["true"]
        timeout = body.get("timeoutSeconds")
        if isinstance(timeout, int | float) and timeout > STEERED_EXEC_TIMEOUT_SECONDS:
            body["timeoutSeconds"] = STEERED_EXEC_TIMEOUT_SECONDS
    return case


def fuzz_operation(
    run: Run, operation: APIOperation, mode: GenerationMode, session: requests.Session, deadline: float
) -> None:
    cases = operation.as_strategy(generation_mode=mode)
    if "{episode_id}" in operation.path:
        aimed = operation.as_strategy(generation_mode=mode, path_parameters={"episode_id": run.episode_id})
        if mode is GenerationMode.POSITIVE and operation.path.endswith("/exec"):
            aimed = aimed.map(one_command)
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
        if sent == 0 or time.monotonic() < deadline:  # past the deadline, each operation still sends one
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
        where = f"{len(finding.labels)} operation(s): {', '.join(finding.labels)}"
        lines += [f"- {finding.problem} [{finding.source}] on {where}"]
        lines += [f"  request: {finding.request}", f"  answer:  {finding.answer}"]
    marks = ("backend failure", "Exception in ASGI application", "ApiException: (", "HTTP response body:")
    failures = [line.strip(" |") for line in log.splitlines() if any(mark in line for mark in marks)]
    if failures:
        lines += ["broker log:", *list(dict.fromkeys(failures))[:FINDINGS_SHOWN]]
    return run.redact("\n".join(lines))


@pytest.mark.timeout(90, func_only=True)  # the hard stop for the fuzzing; a run takes 10 to 35 s
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
    if run.findings:
        pytest.fail(report(run, log), pytrace=False)
    assert set(run.sent) == labels, f"operations never sent: {labels - set(run.sent)}"
