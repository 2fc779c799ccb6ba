#!/usr/bin/env python3
"""Broker exec benchmark: concurrent execs through the episode broker, against direct pods/exec.

    python -m bench.broker [--episodes 20] [--execs 200] [--concurrency 200] [--sequential-rounds 5]
                           [--keep]

Set-up: a fresh namespace `bench-broker-XXXXXX` with the sample PVC and GymHost (episodes.maxConcurrent =
the number of episodes), its own `gymsandbox operator --namespace bench-broker-XXXXXX` and its own
`gymsandbox broker --listen 127.0.0.1:PORT`. The episodes are created through the broker (POST /v1/episodes
with the host's lease token from Secret `swe-gym-run-1-lease`); once all are Ready, kwok is told to run
each episode pod's execs as local processes (hack/localcluster/kwok.py's enable_exec; local control plane
only). Each pod then gets one untimed exec by each path (so neither phase pays for kwok picking up its Exec
object). Then execs one at a time: SEQUENTIAL_ROUNDS passes over every pod by each path in turn, each pass
over a second after the last, so the broker never finds an episode's reads kept from its previous exec (an
agent's next command comes seconds after its last).

Broker phase: EXECS execs of `echo ok` (EXECS / EPISODES per episode) as POST /v1/episodes/{id}/exec,
started together from a pool of CONCURRENCY threads sharing one httpx.Client (as many connections as
threads), each asking for at most 4 KiB of output; an exec fails on a transport error, an HTTP status
other than 200, exitCode != 0 or stdout other than "ok\\n". The broker runs with --max-calls-per-host
at least CONCURRENCY (every episode is under one host), as a deployment sized for that many rollouts a
host would. Direct phase: the same execs on the same pods with the kubernetes client's
`stream(connect_get_namespaced_pod_exec, ...)` from the same kind of thread pool, each thread with an
ApiClient of its own (the client's stream() swaps a method on the ApiClient it is given while it
connects, so sharing one across threads is unsafe). The broker runs every command inside its deadline
wrapper (broker/backend.py DEADLINE_WRAPPER, `sh -c ... 31 ARGV` for its default 30 s), so the direct
phase runs exactly that argv: the two differ by the broker alone.

Reported, never asserted: latency p50/p90/p99/max of the execs that succeeded (client side, nearest
rank), wall time (first exec sent to last answer) and errors by kind for both phases, with ratios
broker/direct; the broker's own view of the time spent in pods/exec (`durationSeconds`); p50 and p90 of
each path one at a time; the broker's peak RSS (VmHWM). When the broker phase fails, the broker's
exception lines and its first traceback are printed. The last line is the same as JSON.

Uses the cluster KUBECONFIG names, else the local control plane (`python -m hack.localcluster up`, reused if
it runs; never stopped here). Every wait is bounded; traffic is loopback only. Episodes are closed, the
GymHost and the namespace deleted, and the broker and operator stopped at the end (the namespace is kept with
--keep).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import math
import os
import queue
import re
import shutil
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from hack.localcluster import kwok
from hack.localcluster.processes import free_port
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.stream import stream
from kubernetes.stream.ws_client import ERROR_CHANNEL
from tests.support.cluster import Cluster
from tests.support.processes import gymsandbox_cli

from bench import common
from bench.common import GROUP, HOST, IMAGE, OPERATOR_NAMESPACE, PLURAL, VERSION, Child, log, plain
from gymsandbox.broker.backend import DEADLINE_WRAPPER
from gymsandbox.broker.recent import KEEP_SECONDS
from gymsandbox.desired.pod import EPISODE_CONTAINER_NAME

NAMESPACE_PREFIX = "bench-broker"
COLUMNS = ("broker", "direct")
ARGV = ["echo", "ok"]
EXPECTED_STDOUT = "ok\n"
EXEC_TIMEOUT = 30  # the broker's default timeoutSeconds
DIRECT_ARGV = ["sh", "-c", DEADLINE_WRAPPER, "sh", str(math.ceil(EXEC_TIMEOUT) + 1), *ARGV]  # as the broker
MAX_OUTPUT = 4096  # bytes of stdout (and of stderr) each exec asks for: what the broker reserves for it
CLIENT_TIMEOUT = 120.0  # one exec, either path, client side
EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit)\b")  # the last line of a traceback
LOG_RECORD_LINE = re.compile(r"^(\d{4}-\d\d-\d\d |INFO:|ERROR:|WARNING:)")


# ---------------------------------------------------------------------------------------------- cluster


def enable_exec(cluster: Cluster, namespace: str, pod: str, served: bool = False) -> None:
    """Tell kwok to run this pod's execs as local processes (the local control plane only); `served`: and
    wait until kwok runs them (kwok reads Exec objects from one watch, in order: the last one served means
    all are)."""
    kwok.enable_exec(cluster.paths, namespace, pod, served=served)  # a kubectl failure raises


def forget_exec_dirs(cluster: Cluster, namespace: str) -> None:
    """The per-pod directories enable_exec made for this run's namespace (and only those)."""
    if cluster.local and namespace.startswith(f"{NAMESPACE_PREFIX}-"):
        shutil.rmtree(Path(cluster.paths.exec) / namespace, ignore_errors=True)


def host_token(core: client.CoreV1Api, namespace: str) -> str:
    data = core.read_namespaced_secret(f"{HOST}-lease", namespace).data or {}
    return base64.b64decode(data["token"]).decode()


def wait_episodes_ready(
    api: client.ApiClient, namespace: str, ids: list[str], timeout: float
) -> dict[str, str]:
    """Episode id -> pod name, once every episode is Ready; TimeoutError (with the reasons) otherwise."""
    custom = client.CustomObjectsApi(api)
    deadline, reasons = time.monotonic() + timeout, {}
    while time.monotonic() < deadline:
        listed = plain(api, custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL))
        pods: dict[str, str] = {}
        for item in listed["items"]:
            name = item["metadata"]["name"]
            ready, reasons[name] = common.ready_condition(item)
            pod = (item.get("status") or {}).get("podName")
            if ready and pod:
                pods[name] = str(pod)
        if all(i in pods for i in ids):
            return {i: pods[i] for i in ids}
        time.sleep(0.5)
    missing = Counter(reasons.get(i, "NeverSeen") for i in ids if i not in pods)
    raise TimeoutError(f"episodes not Ready after {timeout:.0f} s, by last reason: {dict(missing)}")


# ---------------------------------------------------------------------------------------------- processes


def start_broker(cluster: Cluster, policy: Path, workdir: Path, calls: int) -> tuple[Child, str]:
    port = free_port()
    argv = [gymsandbox_cli(), "broker", "--policy", str(policy), "--max-calls-per-host", str(calls)]
    argv += ["--operator-namespace", OPERATOR_NAMESPACE, "--listen", f"127.0.0.1:{port}"]
    broker = Child.launch("broker", argv, cluster.kubeconfig, workdir / "broker.log")
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        try:
            return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    broker.wait_for(healthy, timeout=30)
    return broker, url


# ---------------------------------------------------------------------------------------------- execs


@dataclass(frozen=True)
class Sample:
    latency: float  # seconds, client side
    error: str | None = None
    backend_seconds: float | None = None  # the broker's durationSeconds (time in pods/exec)


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def broker_exec(http: httpx.Client, token: str, episode_id: str) -> Sample:
    started = time.monotonic()
    try:
        answer = http.post(
            f"/v1/episodes/{episode_id}/exec",
            json={"argv": ARGV, "timeoutSeconds": EXEC_TIMEOUT, "maxOutputBytes": MAX_OUTPUT},
            headers=auth(token),
        )
    except httpx.HTTPError as e:
        return Sample(time.monotonic() - started, f"transport: {type(e).__name__}")
    latency = time.monotonic() - started
    if answer.status_code != 200:
        try:
            code = answer.json().get("code")
        except ValueError:
            code = "not JSON"
        return Sample(latency, f"HTTP {answer.status_code} {code}")
    body = answer.json()
    backend = body.get("durationSeconds")
    if body.get("exitCode") != 0:
        return Sample(latency, f"exitCode {body.get('exitCode')}", backend)
    if body.get("stdout") != EXPECTED_STDOUT:
        return Sample(latency, f"stdout {body.get('stdout')!r:.40}", backend)
    return Sample(latency, None, backend)


def direct_exec(core: client.CoreV1Api, namespace: str, pod: str) -> Sample:
    """pods/exec through the API server, read the way the broker's backend reads it."""
    started = time.monotonic()
    deadline = started + EXEC_TIMEOUT
    try:
        ws = stream(
            core.connect_get_namespaced_pod_exec,
            pod,
            namespace,
            command=DIRECT_ARGV,
            container=EPISODE_CONTAINER_NAME,
            stdin=False,
            stdout=True,
            stderr=True,
            tty=False,
            _preload_content=False,
            binary=True,
        )
    except (ApiException, OSError, ValueError) as e:
        return Sample(time.monotonic() - started, f"connect: {type(e).__name__} {getattr(e, 'status', '')}")
    stdout = bytearray()
    try:
        while ws.is_open():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return Sample(time.monotonic() - started, "timed out")
            ws.update(timeout=min(remaining, 0.5))
            if ws.peek_stdout():
                stdout += ws.read_stdout()
            if ws.peek_stderr():
                ws.read_stderr()
        raw = ws.read_channel(ERROR_CHANNEL)
    except (OSError, ValueError) as e:
        return Sample(time.monotonic() - started, f"stream: {type(e).__name__}")
    finally:
        ws.close()
    latency = time.monotonic() - started
    try:
        status = json.loads(raw) if raw else {}
    except ValueError:
        status = {}
    if status.get("status") != "Success":
        return Sample(latency, f"status {str(status.get('message') or 'missing')[:60]}")
    if stdout.decode(errors="replace") != EXPECTED_STDOUT:
        return Sample(latency, f"stdout {bytes(stdout)!r:.40}")
    return Sample(latency)


@dataclass
class PhaseResult:
    samples: list[Sample]
    wall: float
    unfinished: int = 0

    @property
    def latencies(self) -> list[float]:
        """Of the execs that succeeded: a failure is counted under errors, not timed."""
        return sorted(s.latency for s in self.samples if s.error is None)

    @property
    def errors(self) -> Counter[str]:
        found = Counter(s.error for s in self.samples if s.error)
        if self.unfinished:
            found["no answer by the phase deadline"] += self.unfinished
        return found

    @property
    def error_count(self) -> int:
        return sum(self.errors.values())

    def percentile(self, p: float) -> float | None:
        return common.nearest_rank(self.latencies, p)

    @property
    def backend(self) -> list[float]:
        return [s.backend_seconds for s in self.samples if s.backend_seconds is not None]


def run_concurrently(
    call: Callable[[int, str], Sample], episode_ids: list[str], concurrency: int, timeout: float
) -> PhaseResult:
    """call(worker index, episode id) for every id, on a pool of `concurrency` daemon threads released at
    once. Returns within `timeout` (an exec still running then counts as unfinished)."""
    work: queue.SimpleQueue[str] = queue.SimpleQueue()
    for episode_id in episode_ids:
        work.put(episode_id)
    samples: list[Sample] = []
    lock, go = threading.Lock(), threading.Event()
    finished_at: list[float] = []

    def worker(index: int) -> None:
        go.wait()
        while True:
            try:
                episode_id = work.get_nowait()
            except queue.Empty:
                return
            try:
                sample = call(index, episode_id)
            except Exception as e:  # reported as an error of this exec
                sample = Sample(0.0, f"raised {type(e).__name__}")
            with lock:
                samples.append(sample)
                finished_at.append(time.monotonic())

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(concurrency)]
    for thread in threads:
        thread.start()
    started = time.monotonic()
    go.set()
    deadline = started + timeout
    for thread in threads:
        thread.join(timeout=max(0.0, deadline - time.monotonic()))
    with lock:
        done = list(samples)
        wall = (max(finished_at) if finished_at else time.monotonic()) - started
    return PhaseResult(done, wall, unfinished=len(episode_ids) - len(done))


def warm_up(task: Callable[[str], Sample], ids: list[str], what: str, timeout: float) -> None:
    """One successful exec per episode (kwok needs a moment to pick up each Exec object); bounded."""
    deadline = time.monotonic() + timeout
    pending = list(ids)
    last: dict[str, str | None] = {}
    while pending and time.monotonic() < deadline:
        for episode_id in list(pending):
            sample = task(episode_id)
            last[episode_id] = sample.error
            if sample.error is None:
                pending.remove(episode_id)
        if pending:
            time.sleep(0.5)
    if pending:
        errors = Counter(str(last.get(i)) for i in pending)
        raise RuntimeError(f"{what}: {len(pending)} episodes never ran `echo ok`: {dict(errors)}")


def one_at_a_time(
    paths: dict[str, Callable[[str], Sample]], ids: list[str], rounds: int
) -> dict[str, list[float]]:
    """Latencies of execs one at a time: `rounds` passes over every episode by each path in turn, each pass
    begun over KEEP_SECONDS after the last, so that no exec finds the broker's reads of its episode kept
    from the one before (an agent's next command comes seconds after its last, not within a second)."""
    latencies: dict[str, list[float]] = {name: [] for name in paths}
    for _ in range(rounds):
        for name, task in paths.items():
            time.sleep(KEEP_SECONDS + 0.1)
            latencies[name] += [s.latency for s in map(task, ids) if s.error is None]
    return latencies


# ---------------------------------------------------------------------------------------------- report


def report(
    args: argparse.Namespace,
    broker: PhaseResult,
    direct: PhaseResult,
    seq: dict[str, list[float]],
    rss: float | None,
) -> None:
    rows: list[tuple[str, str, float | None, float | None]] = [
        (f"p{p}_s", f"p{p} exec latency (s)", broker.percentile(p), direct.percentile(p))
        for p in (50, 90, 99)
    ]
    rows.append(("max_s", "max exec latency (s)", broker.percentile(100), direct.percentile(100)))
    rows.append(("wall_s", "wall, first sent to last answer (s)", broker.wall, direct.wall))
    rows.append(("ok", "execs OK (timed above)", float(len(broker.latencies)), float(len(direct.latencies))))
    rows.append(("errors", "errors", float(broker.error_count), float(direct.error_count)))
    for p in (50, 90):
        rows.append(
            (
                f"sequential_p{p}_s",
                f"one at a time, p{p} (s)",
                common.nearest_rank(seq["broker"], p),
                common.nearest_rank(seq["direct"], p),
            )
        )
    print()
    print(
        f"{args.execs} execs of {' '.join(ARGV)!r} across {args.episodes} episodes, "
        f"{args.concurrency} client threads per phase (broker phase first)"
    )
    counts = ("ok", "errors")  # whole numbers
    common.print_ratio_table(COLUMNS, [(label, a, b, 0 if key in counts else 3) for key, label, a, b in rows])
    backend_p50, backend_p99 = (
        common.nearest_rank(broker.backend, 50),
        common.nearest_rank(broker.backend, 99),
    )
    print(
        f"{'broker-side pods/exec time p50/p99 (s)':<40} "
        f"{common.fmt(backend_p50):>10} {common.fmt(backend_p99):>10}"
    )
    print(f"{'broker peak RSS, VmHWM (MiB)':<40} {common.fmt(rss, 1):>10}")
    for label, phase in (("broker", broker), ("direct", direct)):
        if phase.errors:
            print(f"{label} errors: {dict(phase.errors)}")
    if broker.error_count or direct.error_count:
        print("NOTE: a phase had errors; its percentiles cover only the execs that succeeded.")
    summary: dict[str, Any] = {
        "episodes": args.episodes,
        "execs": args.execs,
        "concurrency": args.concurrency,
        "answered": {"broker": len(broker.samples), "direct": len(direct.samples)},
        "errors_by_kind": {"broker": dict(broker.errors), "direct": dict(direct.errors)},
        "broker_backend_p50_s": backend_p50,
        "broker_backend_p99_s": backend_p99,
        "broker_peak_rss_mib": rss,
    }
    for key, _, a, b in rows:
        summary[key] = common.compared(COLUMNS, a, b)
    print()
    print(json.dumps(summary, sort_keys=True))


# ---------------------------------------------------------------------------------------------- main


@dataclass
class Run(common.BenchRun):
    namespace: str | None = None
    broker: Child | None = None
    url: str = ""
    token: str = ""
    episodes: list[str] = field(default_factory=list)

    def http(self, connections: int = 10) -> httpx.Client:
        limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
        return httpx.Client(base_url=self.url, timeout=CLIENT_TIMEOUT, limits=limits)

    def close_episodes(self) -> None:
        if self.args.keep or not (self.episodes and self.broker and self.broker.running):
            return
        answers: Counter[str] = Counter()
        with self.http() as http:
            for episode_id in self.episodes:
                try:
                    answers[str(http.delete(f"/v1/episodes/{episode_id}", headers=auth(self.token)))] += 1
                except httpx.HTTPError as e:
                    answers[type(e).__name__] += 1
        log(f"closed {len(self.episodes)} episodes through the broker: {dict(answers)}")
        self.episodes.clear()

    def clean_up(self) -> None:
        self.close_episodes()
        namespace = self.namespace
        if namespace is not None and not self.args.keep:
            self.delete_host_then_namespace(namespace)
            forget_exec_dirs(self.cluster, namespace)
            self.namespace = None
        for child in (self.broker, self.operator):
            if child is not None:
                child.stop()
        self.broker = self.operator = None


def set_up(run: Run) -> dict[str, str]:
    """Namespace, operator, broker, host, episodes (through the broker); returns episode id -> pod."""
    args = run.args
    run.namespace = namespace = common.create_namespace(run.core, NAMESPACE_PREFIX)
    log(f"namespace {namespace}")
    policy = common.write_policy(run.workdir, args.episodes)
    run.operator = common.start_operator(run.cluster.kubeconfig, policy, namespace, run.workdir)
    run.broker, run.url = start_broker(run.cluster, policy, run.workdir, max(32, args.concurrency))
    common.create_host(run.api, namespace, args.episodes, timeout=120)
    run.token = host_token(run.core, namespace)
    log(f"GymHost Ready; creating {args.episodes} episodes through the broker at {run.url}")
    with run.http() as http:
        for _ in range(args.episodes):
            answer = http.post(
                "/v1/episodes", json={"rolloutId": "bench", "image": IMAGE}, headers=auth(run.token)
            )
            if answer.status_code != 201:
                raise RuntimeError(f"POST /v1/episodes answered {answer.status_code}: {answer.text[:500]}")
            run.episodes.append(str(answer.json()["id"]))
    pods = wait_episodes_ready(run.api, namespace, run.episodes, timeout=args.ready_timeout)
    log(f"all {len(pods)} episodes Ready")
    if run.cluster.local:
        with stderr_to(run.workdir / "enable-exec.log"):  # each call logs finding the cached binaries
            names = list(pods.values())
            for index, pod in enumerate(names):
                enable_exec(run.cluster, namespace, pod, served=index == len(names) - 1)
        log("kwok exec enabled for every episode pod")
    return pods


def measure(run: Run, pods: dict[str, str]) -> None:
    args, namespace, ids = run.args, run.namespace, list(pods)
    assert namespace is not None
    per_episode = [ids[i % len(ids)] for i in range(args.execs)]  # execs / episodes each, round robin
    configuration = client.Configuration()
    config.load_kube_config(  # type: ignore[no-untyped-call]
        config_file=str(run.cluster.kubeconfig), client_configuration=configuration
    )
    api_clients = [client.ApiClient(configuration) for _ in range(args.concurrency)]
    cores = [client.CoreV1Api(api) for api in api_clients]
    try:
        with run.http(connections=args.concurrency) as http:

            def via_broker(episode_id: str) -> Sample:
                return broker_exec(http, run.token, episode_id)

            def via_api(episode_id: str) -> Sample:
                return direct_exec(cores[0], namespace, pods[episode_id])

            warm_up(via_broker, ids, "broker warm-up", timeout=60)
            warm_up(via_api, ids, "direct warm-up", timeout=60)
            seq = one_at_a_time({"broker": via_broker, "direct": via_api}, ids, args.sequential_rounds)
            log(f"warm-up done; broker phase: {args.execs} execs, {args.concurrency} threads")
            broker = run_concurrently(
                lambda _, episode_id: via_broker(episode_id),
                per_episode,
                args.concurrency,
                args.phase_timeout,
            )
        rss = common.resident_mib(run.broker.process) if run.broker else None
        log(f"broker phase: {len(broker.samples)} answered, {broker.error_count} errors")
        if broker.error_count:
            show_broker_problems(run)
        log(f"direct phase: {args.execs} execs, {args.concurrency} threads")
        direct = run_concurrently(
            lambda worker, episode_id: direct_exec(cores[worker], namespace, pods[episode_id]),
            per_episode,
            args.concurrency,
            args.phase_timeout,
        )
        log(f"direct phase: {len(direct.samples)} answered, {direct.error_count} errors")
    finally:
        for api in api_clients:
            api.close()  # type: ignore[no-untyped-call]
    report(args, broker, direct, seq, rss)


def show_broker_problems(run: Run) -> None:
    """What the broker logged about its failures: exception lines by count, then its first traceback."""
    if run.broker is None:
        return
    lines = run.broker.text().splitlines()
    exceptions = Counter(line[:200] for line in lines if EXCEPTION_LINE.match(line))
    failures = sum(1 for line in lines if "backend failure" in line)
    log(f"the broker logged {failures} 'backend failure' lines; exception lines by count:")
    for line, count in exceptions.most_common(8):
        print(f"  {count:5d}  {line}", file=sys.stderr)
    if "Traceback (most recent call last):" in lines:
        first = lines.index("Traceback (most recent call last):")
        block = [lines[first]]
        for line in lines[first + 1 : first + 1000]:
            if LOG_RECORD_LINE.match(line):
                break
            block.append(line)
        if len(block) > 60:  # the cause's head and the innermost frames of the last exception
            block = [*block[:20], f"... ({len(block) - 60} lines) ...", *block[-40:]]
        print(
            "  the broker's first traceback:\n" + "\n".join(f"    {b[:300]}" for b in block), file=sys.stderr
        )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--episodes", type=int, default=20, help="episodes (default 20)")
    parser.add_argument("--execs", type=int, default=200, help="execs per phase (default 200)")
    parser.add_argument(
        "--concurrency", type=int, default=200, help="client threads per phase (default 200: all at once)"
    )
    parser.add_argument(
        "--sequential-rounds",
        type=int,
        default=5,
        help="passes over every episode, one exec at a time, per path (default 5)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the namespace and the logs")
    parser.add_argument("--ready-timeout", type=float, default=180, help="episodes Ready within (180 s)")
    parser.add_argument("--phase-timeout", type=float, default=300, help="per-phase limit (300 s)")
    args = parser.parse_args(argv)
    if not 1 <= args.episodes <= 1000:
        parser.error("--episodes must be between 1 and 1000 (the CRD's maxConcurrent bound)")
    if args.execs < 1 or args.concurrency < 1 or args.sequential_rounds < 1:
        parser.error("--execs, --concurrency and --sequential-rounds must be positive")
    return args


@contextlib.contextmanager
def stderr_to(path: Path) -> Iterator[None]:
    """Send file descriptor 2 (this process's and its children's stderr) to a file for a while."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with path.open("ab") as out:
            os.dup2(out.fileno(), 2)
            yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with common.prepared_cluster("gymsandbox-bench-broker-", args.keep) as (cluster, api, directory):
        run = Run(args, cluster, api, directory)
        try:
            pods = set_up(run)
            measure(run, pods)
        finally:
            if args.keep and run.namespace:
                log(f"kept namespace {run.namespace}; its GymHost keeps its finalizer until an operator runs")
            run.clean_up()
    return 0


if __name__ == "__main__":
    sys.exit(main())
