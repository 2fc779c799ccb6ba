#!/usr/bin/env python3
"""Episode throughput benchmark: N EpisodeSandboxes under one GymHost, against a plain-client baseline.

    python -m bench.episodes [-n 200] [--hosts H] [--keep] [--slots K --ttl S] [--[no-]agent-sandbox]

Operator phase: a fresh namespace `bench-XXXXXX` with the sample PVC and H GymHosts (episodes.maxConcurrent
= N/H each, so nothing queues) and its own `gymsandbox operator --namespace bench-XXXXXX`, as deployed. N
episodes are created back to back by one client, round-robin over the hosts, each with its host as
controller as the broker makes them; a watch records when each one's Ready condition turns True.
Baseline phase: in `bench-base-XXXXXX`, the same N items made by a plain client, each a Secret, a
NetworkPolicy and a Pod in that order (as the operator does); a watch records when each Pod turns Ready.
Reference phase (--agent-sandbox; by default on the local control plane only): in `bench-asb-XXXXXX`,
agent-sandbox's controller makes the baseline's N Pods as cold Sandboxes (bench/agent_sandbox.py), timed
the same way.

With --slots K and --ttl S (the cap mode) a queue forms instead, K per host, and drains as episodes expire
S s after admission: the latencies then include the wait (not a figure to compare), and the FIFO line
counts episodes admitted at a later second than the next one created for the same host (0 when the queue
drains in order). --refused R adds
R episodes whose image the policy does not approve (refused, so counted as Policy failures; not timed).

Reported, never asserted: create-to-Ready latency p50/p90/p99 (nearest rank; an item's clock starts when
its first create is sent), wall time (first create to last Ready), API writes per item (the operator's,
every one counted by its own request metrics, during the episode phase; the baseline's are 3), the
operator's peak RSS (VmHWM) and its CPU time per episode (first create to last Ready), with ratios
operator/baseline; then the operator's writes, reads and CPU in --steady seconds with every episode Ready
(none are needed). The last line is the same as JSON.

Uses the cluster KUBECONFIG names, else the local control plane (`python -m hack.localcluster up`, reused if
it runs; never stopped here). Every wait is bounded; both namespaces are deleted at the end unless --keep.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import re
import secrets
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException
from kubernetes.utils import parse_quantity
from prometheus_client.parser import text_string_to_metric_families

from bench import agent_sandbox, common
from bench.common import BENCH_LABEL, GROUP, IMAGE, OPERATOR_NAMESPACE, PLURAL, VERSION, Child, log, plain
from gymsandbox.handlers.episode import REAP_SECONDS
from gymsandbox.handlers.episode_queue import COUNTS_SECONDS

RUNTIME_LABEL = "gymsandbox.dev/runtime"
RUNTIME_CLASS = "kata-qemu"
# The episode defaults (api/episode.py), used for the baseline pods too so both phases ask the same.
EPISODE_RESOURCES = {"cpu": "500m", "memory": "512Mi", "ephemeral-storage": "1Gi"}
RUN_AS = 65532
UNAPPROVED_IMAGE = "docker.io/not-approved/miner:1"  # examples/policy.yaml approves no docker.io image
MIB = 1024 * 1024
# The writes that trail the last Ready, counted in the burst's: each host's counts, written on its loop's
# next pass (every REAP_SECONDS at most) and at most once per COUNTS_SECONDS.
TRAILING_SECONDS = REAP_SECONDS + COUNTS_SECONDS + 1.0

# The operator's request counter (gymsandbox/metrics.py), and its verbs as the HTTP methods they are.
REQUESTS_METRIC = "gymsandbox_api_requests"
WRITE_VERBS = {
    "create": "POST",
    "update": "PUT",
    "patch": "PATCH",
    "delete": "DELETE",
    "deletecollection": "DELETE",
}
READ_VERBS = ("get", "list")
COLUMNS = ("operator", "baseline")
REFERENCE_COLUMNS = ("operator", "agent-sandbox")
OPERATOR_STOP_GRACE = 20.0  # seconds from SIGTERM to SIGKILL


# ---------------------------------------------------------------------------------------------- cluster


def quantity(value: str) -> Decimal:
    parsed: Decimal = parse_quantity(value)  # type: ignore[no-untyped-call]
    return parsed


def free_slots(core: client.CoreV1Api, per_pod: Mapping[str, str]) -> tuple[int, str]:
    """How many more pods asking `per_pod` fit on the kata node(s) now, and a one-line account of it."""
    total, notes = 0, []
    for node in plain(core.api_client, core.list_node(label_selector=f"{RUNTIME_LABEL}=kata"))["items"]:
        name, alloc = node["metadata"]["name"], node.get("status", {}).get("allocatable", {})
        pods = plain(
            core.api_client, core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={name}")
        )
        live = [p for p in pods["items"] if p.get("status", {}).get("phase") not in ("Succeeded", "Failed")]
        used: dict[str, Decimal] = {key: Decimal(0) for key in per_pod}
        for pod in live:
            for container in pod["spec"]["containers"]:
                for key, value in container.get("resources", {}).get("requests", {}).items():
                    used[key] = used.get(key, Decimal(0)) + quantity(value)
        fits = int(quantity(alloc.get("pods", "0"))) - len(live)
        for key, value in per_pod.items():
            fits = min(fits, math.floor((quantity(alloc.get(key, "0")) - used[key]) / quantity(value)))
        total += max(0, fits)
        notes.append(
            f"{name}: {len(live)}/{alloc.get('pods')} pods, cpu requested {used['cpu']}/{alloc.get('cpu')}"
        )
    return total, "; ".join(notes) or "no node labelled for the kata runtime"


# ---------------------------------------------------------------------------------------------- watching


def condition_true(conditions: Any, kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True" for c in conditions or [])


def pod_state(obj: Mapping[str, Any]) -> tuple[bool, str]:
    status = obj.get("status") or {}
    conditions = status.get("conditions") or []
    scheduled: dict[str, Any] = next((c for c in conditions if c.get("type") == "PodScheduled"), {})
    if scheduled.get("status") == "False":
        return False, str(scheduled.get("reason") or "NotScheduled")
    return condition_true(conditions, "Ready"), str(status.get("phase") or "NoStatusYet")


class ReadyWatcher(threading.Thread):
    """Watches one list endpoint and records the first moment each object is seen Ready."""

    def __init__(
        self,
        api: client.ApiClient,
        list_call: Callable[..., Any],
        args: tuple[Any, ...],
        state: Callable[[Mapping[str, Any]], tuple[bool, str]],
        deadline: float,
    ) -> None:
        super().__init__(daemon=True)
        self.api, self.list_call, self.args, self.state, self.deadline = api, list_call, args, state, deadline
        self.ready: dict[str, float] = {}
        self.reasons: dict[str, str] = {}
        self.admitted: dict[str, str] = {}  # status.admittedAt, as first seen
        self.stopping = threading.Event()
        self.started_watch = threading.Event()
        self.error: BaseException | None = None

    def observe(self, body: Mapping[str, Any]) -> None:
        name = body["metadata"]["name"]
        is_ready, reason = self.state(body)
        self.reasons[name] = reason
        admitted_at = (body.get("status") or {}).get("admittedAt")
        if admitted_at and name not in self.admitted:
            self.admitted[name] = str(admitted_at)
        if is_ready and name not in self.ready:
            self.ready[name] = time.monotonic()

    def relist(self) -> str:
        listed = plain(self.api, self.list_call(*self.args))
        for item in listed["items"]:
            self.observe(item)
        return str(listed["metadata"]["resourceVersion"])

    def run(self) -> None:
        try:
            version = self.relist()
            self.started_watch.set()
            while not self.stopping.is_set() and time.monotonic() < self.deadline:
                version = self.watch_once(version)
        except BaseException as e:  # reported by the main thread
            self.error = e
            self.started_watch.set()

    def watch_once(self, version: str) -> str:
        """One watch request (at most 5 s), from `version`; returns the version to go on from."""
        stream = watch.Watch()  # type: ignore[no-untyped-call]
        events = stream.stream(  # type: ignore[no-untyped-call]
            self.list_call, *self.args, resource_version=version, timeout_seconds=5
        )
        try:
            for event in events:
                if event["type"] == "ERROR":
                    return self.relist()  # 410 Gone and the like: start again from a fresh list
                body = plain(self.api, event["object"])
                self.observe(body)
                version = str(body["metadata"].get("resourceVersion") or version)
                if self.stopping.is_set():
                    break
        except ApiException as e:
            if e.status != 410:
                raise
            return self.relist()
        finally:
            stream.stop()  # type: ignore[no-untyped-call]
        return version

    def finish(self) -> None:
        """Stop (within one watch request) and re-raise what the thread failed with."""
        self.stopping.set()
        self.join(timeout=15)
        if self.error is not None:
            raise self.error


def wait_all_ready(watcher: ReadyWatcher, names: list[str], stall: float) -> None:
    """Until every name is Ready, the deadline, or `stall` seconds without a new Ready."""
    progress, last = time.monotonic(), -1
    while watcher.is_alive() and time.monotonic() < watcher.deadline:
        done = sum(1 for n in names if n in watcher.ready)
        if done == len(names):
            break
        if done != last:
            progress, last = time.monotonic(), done
        elif time.monotonic() - progress > stall:
            log(f"no new Ready for {stall:.0f} s; giving up with {done}/{len(names)} Ready")
            break
        time.sleep(0.2)


# ---------------------------------------------------------------------------------------------- results


@dataclass
class PhaseResult:
    sent: dict[str, float]  # first create sent, monotonic
    ready: dict[str, float]  # first seen Ready, monotonic
    reasons: dict[str, str]  # last Ready reason seen, for the ones that never got there
    writes: Counter[str] = field(default_factory=Counter)
    create_seconds: float = 0.0
    fifo_inversions: int | None = None
    steady: tuple[int, int] | None = None  # (writes, reads) in --steady seconds once all were Ready
    steady_writes: Counter[str] = field(default_factory=Counter)  # those writes, by kind
    steady_reads: Counter[str] = field(default_factory=Counter)  # those reads, by kind

    @property
    def latencies(self) -> list[float]:
        return sorted(self.ready[n] - t for n, t in self.sent.items() if n in self.ready)

    @property
    def ready_count(self) -> int:
        return sum(1 for n in self.sent if n in self.ready)

    def percentile(self, p: float) -> float | None:
        return common.nearest_rank(self.latencies, p)

    @property
    def wall(self) -> float | None:
        ready = [self.ready[n] for n in self.sent if n in self.ready]
        return max(ready) - min(self.sent.values()) if ready else None

    def not_ready(self) -> Counter[str]:
        return Counter(self.reasons.get(n, "NeverSeen") for n in self.sent if n not in self.ready)


# ---------------------------------------------------------------------------------------------- operator


def operator_requests(operator: Child) -> Counter[tuple[str, str]]:
    """The operator's own API requests so far (watches aside), by verb and resource, from its metrics."""
    counts: Counter[tuple[str, str]] = Counter()
    for family in text_string_to_metric_families(operator.scrape() or ""):
        for sample in family.samples:
            if sample.name == f"{REQUESTS_METRIC}_total":
                counts[(sample.labels["verb"], sample.labels["resource"])] += int(sample.value)
    return counts


def writes_between(before: Counter[tuple[str, str]], after: Counter[tuple[str, str]]) -> Counter[str]:
    """Write requests made between two counts, keyed `METHOD resource` as the baseline's are."""
    writes: Counter[str] = Counter()
    for (verb, resource), count in (after - before).items():
        if verb in WRITE_VERBS:
            collection = " (collection)" if verb == "deletecollection" else ""
            writes[f"{WRITE_VERBS[verb]} {resource}{collection}"] += count
    return writes


def reads_between(before: Counter[tuple[str, str]], after: Counter[tuple[str, str]]) -> Counter[str]:
    """Read requests (a listing's pages each count) made between two counts, keyed `verb resource`."""
    reads: Counter[str] = Counter()
    for (verb, resource), count in (after - before).items():
        if verb in READ_VERBS:
            reads[f"{verb} {resource}"] += count
    return reads


def episode(name: str, host: Mapping[str, Any], ttl: int | None = None, image: str = IMAGE) -> dict[str, Any]:
    """As the broker makes it: the host (its controller) known at creation."""
    lifetime = {"lifetime": {"ttlSeconds": ttl}} if ttl else {}
    meta = host["metadata"]
    owner = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "GymHost",
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": False,
    }
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "EpisodeSandbox",
        "metadata": {"name": name, "ownerReferences": [owner]},
        "spec": {"hostRef": {"name": meta["name"]}, "rolloutId": "bench", "image": image, **lifetime},
    }


def fifo_inversions(names: list[str], hosts: int, admitted: Mapping[str, str]) -> int:
    """Episodes (in creation order, round-robin over `hosts`) admitted at a later second than the next one
    created for the same host."""
    inversions = 0
    for h in range(hosts):
        times = [admitted[n] for n in names[h::hosts] if n in admitted]
        inversions += sum(1 for a, b in itertools.pairwise(times) if a > b)
    return inversions


def operator_phase(run: Run, namespace: str, operator: Child, hosts: list[dict[str, Any]]) -> PhaseResult:
    n, custom = run.args.n, client.CustomObjectsApi(run.api)
    watch_api = run.watch_client()
    watcher = ReadyWatcher(
        watch_api,
        client.CustomObjectsApi(watch_api).list_namespaced_custom_object,
        (GROUP, VERSION, namespace, PLURAL),
        common.ready_condition,
        time.monotonic() + run.args.timeout,
    )
    watcher.start()
    watcher.started_watch.wait(timeout=30)
    names = [f"ep-{i:04d}" for i in range(n)]
    sent: dict[str, float] = {}
    requests_before = operator_requests(operator)
    cpu_start = common.cpu_seconds(operator.process)
    for i, name in enumerate(names):
        sent[name] = time.monotonic()
        body = episode(name, hosts[i % len(hosts)], run.args.ttl)
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
    for i in range(run.args.refused):  # not timed: they are refused, never Ready
        refused = episode(f"refused-{i:04d}", hosts[i % len(hosts)], image=UNAPPROVED_IMAGE)
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, refused)
    created = time.monotonic() - min(sent.values())
    log(f"created {n} episodes in {created:.1f} s; waiting for Ready")
    wait_all_ready(watcher, names, run.args.stall)
    cpu_ready = common.cpu_seconds(operator.process)
    time.sleep(TRAILING_SECONDS)
    requests_ready = operator_requests(operator)
    cpu_steady_start = common.cpu_seconds(operator.process)
    time.sleep(run.args.steady)  # every episode Ready and nothing asked: what does the operator still do?
    requests_steady = operator_requests(operator)
    cpu_steady_end = common.cpu_seconds(operator.process)
    if cpu_start is not None and cpu_ready is not None:
        run.usage["cpu_ms_per_episode"] = (cpu_ready - cpu_start) * 1000 / n
    if cpu_steady_start is not None and cpu_steady_end is not None and run.args.steady > 0:
        run.usage["steady_cpu_ms_per_s"] = (cpu_steady_end - cpu_steady_start) * 1000 / run.args.steady
    watcher.finish()
    writes = writes_between(requests_before, requests_ready)
    result = PhaseResult(sent, dict(watcher.ready), dict(watcher.reasons), writes, created)
    result.fifo_inversions = fifo_inversions(names, len(hosts), watcher.admitted)
    steady_writes = writes_between(requests_ready, requests_steady)
    steady_reads = reads_between(requests_ready, requests_steady)
    result.steady = (sum(steady_writes.values()), sum(steady_reads.values()))
    result.steady_writes, result.steady_reads = steady_writes, steady_reads
    return result


def baseline_items(index: int) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """A Secret, a deny-all-egress NetworkPolicy (DNS and broker only) and a restricted kata Pod."""
    name = f"item-{index:04d}"
    labels = {BENCH_LABEL: name}
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": f"{name}-lease", "labels": labels},
        "type": "Opaque",
        "stringData": {"token": secrets.token_urlsafe(32)},
    }
    peer = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}}}
    network_policy = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": f"{name}-egress", "labels": labels},
        "spec": {
            "podSelector": {"matchLabels": labels},
            "policyTypes": ["Egress"],
            "egress": [
                {
                    "to": [{**peer, "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
                    "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
                },
                {
                    "to": [
                        {
                            "namespaceSelector": {
                                "matchLabels": {"kubernetes.io/metadata.name": OPERATOR_NAMESPACE}
                            },
                            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "gymsandbox-broker"}},
                        }
                    ],
                    "ports": [{"protocol": "TCP", "port": 8443}],
                },
            ],
        },
    }
    security = {"runAsNonRoot": True, "runAsUser": RUN_AS, "runAsGroup": RUN_AS}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{name}-sandbox", "labels": labels},
        "spec": {
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 5,
            "runtimeClassName": RUNTIME_CLASS,
            "nodeSelector": {RUNTIME_LABEL: "kata"},
            "securityContext": {**security, "fsGroup": RUN_AS, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [
                {
                    "name": "sandbox",
                    "image": IMAGE,
                    "resources": {"requests": EPISODE_RESOURCES, "limits": EPISODE_RESOURCES},
                    "securityContext": {
                        **security,
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                        "privileged": False,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                }
            ],
        },
    }
    return secret, network_policy, pod


def baseline_phase(run: Run, namespace: str) -> PhaseResult:
    n, core, networking = run.args.n, run.core, client.NetworkingV1Api(run.api)
    deadline = time.monotonic() + run.args.timeout
    watch_api = run.watch_client()
    list_pods = client.CoreV1Api(watch_api).list_namespaced_pod
    watcher = ReadyWatcher(watch_api, list_pods, (namespace,), pod_state, deadline)
    watcher.start()
    watcher.started_watch.wait(timeout=30)
    sent: dict[str, float] = {}
    names = []
    for i in range(n):
        secret, network_policy, pod = baseline_items(i)
        name = pod["metadata"]["name"]
        names.append(name)
        sent[name] = time.monotonic()
        # The client takes plain dicts as bodies; its annotations name only its models.
        core.create_namespaced_secret(namespace, secret)  # type: ignore[arg-type]
        networking.create_namespaced_network_policy(namespace, network_policy)  # type: ignore[arg-type]
        core.create_namespaced_pod(namespace, pod)  # type: ignore[arg-type]
    created = time.monotonic() - min(sent.values())
    log(f"created {n} Secrets, NetworkPolicies and Pods in {created:.1f} s; waiting for Ready")
    wait_all_ready(watcher, names, run.args.stall)
    watcher.finish()
    writes = Counter({"POST secrets": n, "POST networkpolicies": n, "POST pods": n})
    return PhaseResult(sent, dict(watcher.ready), dict(watcher.reasons), writes, created)


# ---------------------------------------------------------------------------------------------- report


SUMMARY_KEYS = ("p50_s", "p90_s", "p99_s", "wall_s", "create_s", "writes_per_item")


def compared_rows(n: int, a: PhaseResult, b: PhaseResult) -> list[tuple[str, float | None, float | None]]:
    """The figures of two phases side by side, in SUMMARY_KEYS' order."""
    rows: list[tuple[str, float | None, float | None]] = [
        (f"p{p} create-to-Ready (s)", a.percentile(p), b.percentile(p)) for p in (50, 90, 99)
    ]
    rows.append(("wall, first create to last Ready (s)", a.wall, b.wall))
    rows.append(("creates sent in (s)", a.create_seconds, b.create_seconds))
    rows.append(("API writes per item", sum(a.writes.values()) / n, sum(b.writes.values()) / n))
    return rows


def report(
    n: int,
    hosts: int,
    *,
    op: PhaseResult,
    base: PhaseResult,
    reference: PhaseResult | None,
    usage: Mapping[str, float | None],
) -> dict[str, Any]:
    rows = compared_rows(n, op, base)
    print()
    print(
        f"N = {n} over {hosts} host(s); Ready: operator {op.ready_count}/{n}, baseline {base.ready_count}/{n}"
    )
    common.print_ratio_table(COLUMNS, [(label, a, b, 3) for label, a, b in rows])
    print(f"{'operator peak RSS, VmHWM (MiB)':<40} {common.fmt(usage.get('peak'), 1):>10}")
    print(f"{'  peak by the last Ready (MiB)':<40} {common.fmt(usage.get('at_ready'), 1):>10}")
    print(f"{'  resident after --steady (MiB)':<40} {common.fmt(usage.get('steady'), 1):>10}")
    print(f"{'operator CPU per episode (ms)':<40} {common.fmt(usage.get('cpu_ms_per_episode'), 1):>10}")
    print(f"{'  at steady state (ms per second)':<40} {common.fmt(usage.get('steady_cpu_ms_per_s'), 1):>10}")
    print(f"{'FIFO inversions (admittedAt, per host)':<40} {op.fifo_inversions:>10}")
    writes, reads = op.steady or (None, None)
    print(f"{'steady state: writes, reads (not watches)':<40} {writes!s:>10} {reads!s:>10}")
    if op.steady_writes:
        print(f"  steady-state writes: {dict(op.steady_writes)}")
    if op.steady_reads:
        print(f"  steady-state reads: {dict(op.steady_reads)}")
    print()
    print("operator writes during the episode phase, per episode:")
    for key, count in op.writes.most_common():
        print(f"  {key:<50} {count / n:8.2f}  ({count})")
    phases = [("operator", op), ("baseline", base)] + ([("agent-sandbox", reference)] if reference else [])
    for label, phase in phases:
        if missing := phase.not_ready():
            print(f"{label}: not Ready at the end, by last reason: {dict(missing)}")
    summary: dict[str, Any] = {
        "n": n,
        "hosts": hosts,
        "fifo_inversions": op.fifo_inversions,
        "steady_writes_reads": op.steady,
        "ready": {"operator": op.ready_count, "baseline": base.ready_count},
        "operator_peak_rss_mib": usage.get("peak"),
        "operator_rss_at_ready_mib": usage.get("at_ready"),
        "operator_rss_after_steady_mib": usage.get("steady"),
        "operator_cpu_ms_per_episode": usage.get("cpu_ms_per_episode"),
        "operator_steady_cpu_ms_per_s": usage.get("steady_cpu_ms_per_s"),
        "operator_writes": dict(op.writes),
        "not_ready": {"operator": dict(op.not_ready()), "baseline": dict(base.not_ready())},
    }
    for key, (_, a, b) in zip(SUMMARY_KEYS, rows, strict=True):
        summary[key] = common.compared(COLUMNS, a, b)
    if reference is not None:
        summary["agent_sandbox"] = report_reference(n, op, reference, usage)
    print()
    print(json.dumps(summary, sort_keys=True))
    return summary


def report_reference(
    n: int, op: PhaseResult, reference: PhaseResult, usage: Mapping[str, float | None]
) -> dict[str, Any]:
    """The operator beside agent-sandbox's controller (same run, same pods), and its part of the JSON."""
    rows = compared_rows(n, op, reference)
    print()
    print(f"beside agent-sandbox's controller (cold Sandboxes): Ready {reference.ready_count}/{n}")
    common.print_ratio_table(REFERENCE_COLUMNS, [(label, a, b, 3) for label, a, b in rows])
    cpu = (usage.get("cpu_ms_per_episode"), usage.get("reference_cpu_ms_per_item"))
    print(f"{'controller CPU per item (ms)':<40} {common.fmt(cpu[0], 1):>10} {common.fmt(cpu[1], 1):>10}")
    print(
        f"{'controller peak RSS (MiB)':<40} {common.fmt(usage.get('peak'), 1):>10} "
        f"{common.fmt(usage.get('reference_peak'), 1):>10}"
    )
    print(f"  agent-sandbox's writes: {dict(reference.writes)}")
    summary: dict[str, Any] = {
        key: common.compared(REFERENCE_COLUMNS, a, b)
        for key, (_, a, b) in zip(SUMMARY_KEYS, rows, strict=True)
    }
    summary["cpu_ms_per_item"] = common.compared(REFERENCE_COLUMNS, *cpu)
    summary["ready"] = reference.ready_count
    return summary


# ---------------------------------------------------------------------------------------------- main


@dataclass
class Run(common.BenchRun):
    namespaces: list[str] = field(default_factory=list)
    usage: dict[str, float | None] = field(default_factory=dict)  # RSS and CPU

    def watch_client(self) -> client.ApiClient:
        """A connection pool of its own for a watching thread."""
        return common.new_client(self.cluster.kubeconfig)

    def remove(self, namespace: str) -> None:
        if self.args.keep or namespace not in self.namespaces:
            return
        self.delete_host_then_namespace(namespace)
        self.namespaces.remove(namespace)

    def stop_operator(self) -> None:
        if self.operator is not None:
            self.usage["peak"] = common.resident_mib(self.operator.process)
            self.operator.stop(grace=OPERATOR_STOP_GRACE)
            self.operator = None


def preflight(run: Run) -> None:
    n = run.args.n
    slots, account = free_slots(run.core, EPISODE_RESOURCES)
    log(f"kata capacity now: {account}; about {slots} pods of {EPISODE_RESOURCES} fit")
    host_pod_share = 4 * run.args.hosts  # a GymHost pod asks 2 CPUs: four episode pods' worth
    if n + host_pod_share > slots:
        log(
            f"WARNING: N={n} exceeds what the kata node(s) can hold now "
            f"(~{slots - host_pod_share} episodes): the rest stay Pending (Unschedulable) "
            "and each phase ends when Ready stalls"
        )


def phase_one(run: Run) -> PhaseResult:
    args = run.args
    namespace = common.create_namespace(run.core, "bench")
    run.namespaces.append(namespace)
    log(f"operator phase in namespace {namespace}")
    per_host = math.ceil(args.n / args.hosts)
    policy = common.write_policy(run.workdir, per_host)
    run.operator = common.start_operator(
        run.cluster.kubeconfig, policy, namespace, run.workdir, verbose=args.verbose_operator
    )
    hosts = [
        common.create_host(run.api, namespace, args.slots or per_host, timeout=120, name=name)
        for name in run.host_names
    ]
    log(f"{len(hosts)} GymHost(s) Ready; creating episodes")
    result = operator_phase(run, namespace, run.operator, hosts)
    run.usage["at_ready"] = common.resident_mib(run.operator.process)
    run.usage["steady"] = common.resident_mib(run.operator.process, field="VmRSS")
    if result.ready_count < args.n:
        problems = [
            line for line in run.operator.text().splitlines() if re.search(r"\[(WARNING|ERROR)", line)
        ]
        shown = "\n".join(line[:400] for line in problems[-12:])
        log(f"not all Ready; the operator logged {len(problems)} warnings/errors, the last ones:\n{shown}")
    run.remove(namespace)  # while the operator runs
    run.stop_operator()
    return result


def phase_three(run: Run) -> PhaseResult:
    """agent-sandbox's controller making the baseline's pods, one cold Sandbox each (bench/agent_sandbox.py),
    created back to back like the episodes and timed the same way."""
    component = agent_sandbox.build()
    namespace = common.create_namespace(run.core, "bench-asb")
    run.namespaces.append(namespace)
    log(f"agent-sandbox phase in namespace {namespace}")
    controller = agent_sandbox.Controller.start(run.cluster, component, run.workdir / "agent-sandbox.log")
    try:
        custom = client.CustomObjectsApi(run.api)
        watch_api = run.watch_client()
        watcher = ReadyWatcher(
            watch_api,
            client.CustomObjectsApi(watch_api).list_namespaced_custom_object,
            (agent_sandbox.GROUP, agent_sandbox.VERSION, namespace, agent_sandbox.PLURAL),
            common.ready_condition,
            time.monotonic() + run.args.timeout,
        )
        watcher.start()
        watcher.started_watch.wait(timeout=30)
        names = [f"sb-{i:04d}" for i in range(run.args.n)]
        sent: dict[str, float] = {}
        requests_before = controller.requests() or Counter()
        cpu_start = common.cpu_seconds(controller.process)
        for i, name in enumerate(names):
            sent[name] = time.monotonic()
            body = agent_sandbox.sandbox(name, baseline_items(i)[2])
            custom.create_namespaced_custom_object(
                agent_sandbox.GROUP, agent_sandbox.VERSION, namespace, agent_sandbox.PLURAL, body
            )
        created = time.monotonic() - min(sent.values())
        log(f"created {len(names)} Sandboxes in {created:.1f} s; waiting for Ready")
        wait_all_ready(watcher, names, run.args.stall)
        cpu_ready = common.cpu_seconds(controller.process)
        time.sleep(TRAILING_SECONDS)
        writes = agent_sandbox.writes(requests_before, controller.requests() or Counter())
        watcher.finish()
        if cpu_start is not None and cpu_ready is not None:
            run.usage["reference_cpu_ms_per_item"] = (cpu_ready - cpu_start) * 1000 / run.args.n
        run.usage["reference_peak"] = common.resident_mib(controller.process)
        result = PhaseResult(sent, dict(watcher.ready), dict(watcher.reasons), writes, created)
        run.remove(namespace)  # while its controller runs: it may hold finalizers
    finally:
        controller.stop(run.cluster)
    return result


def phase_two(run: Run) -> PhaseResult:
    namespace = common.create_namespace(run.core, "bench-base")
    run.namespaces.append(namespace)
    log(f"baseline phase in namespace {namespace}")
    result = baseline_phase(run, namespace)
    run.remove(namespace)
    return result


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-n", type=int, default=200, help="episodes (and baseline items); default 200")
    parser.add_argument("--hosts", type=int, default=1, help="GymHosts the episodes are spread over (1)")
    parser.add_argument(
        "--steady", type=float, default=12, help="seconds counted once all are Ready (12: past a resync)"
    )
    parser.add_argument("--keep", action="store_true", help="keep both namespaces and the operator log")
    parser.add_argument("--timeout", type=float, default=600, help="per-phase limit in seconds (600)")
    parser.add_argument("--stall", type=float, default=60, help="give up after this long with no new Ready")
    parser.add_argument(
        "--slots", type=int, help="the host's maxConcurrent (default n): fewer make a queue (needs --ttl)"
    )
    parser.add_argument("--ttl", type=int, help="each episode expires this many seconds after admission")
    parser.add_argument(
        "--verbose-operator",
        action="store_true",
        help="run the operator with --verbose (a line per handled key; costs CPU)",
    )
    parser.add_argument(
        "--refused", type=int, default=0, help="also this many episodes the policy refuses (untimed)"
    )
    parser.add_argument(
        "--agent-sandbox",
        action=argparse.BooleanOptionalAction,
        help="also time agent-sandbox's controller making the baseline's pods as cold Sandboxes (default: "
        "on the local control plane only; it installs a CRD for the phase)",
    )
    args = parser.parse_args(argv)
    if not 1 <= args.hosts <= 50:
        parser.error("--hosts must be between 1 and 50")
    if not args.hosts <= args.n <= 1000 * args.hosts:
        parser.error("-n must be between --hosts and 1000 per host (the CRD's maxConcurrent bound)")
    if args.slots is not None and not (1 <= args.slots <= args.n // args.hosts and args.ttl):
        parser.error("--slots must be between 1 and n per host, with --ttl so that the queue drains")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with common.prepared_cluster("gymsandbox-bench-", args.keep) as (cluster, api, directory):
        run = Run(args, cluster, api, directory)
        if args.agent_sandbox is None:
            args.agent_sandbox = cluster.local
        preflight(run)
        try:
            operator_result = phase_one(run)
            baseline_result = phase_two(run)
            reference_result = phase_three(run) if args.agent_sandbox else None
        finally:
            for namespace in list(run.namespaces):
                run.remove(namespace)
            run.stop_operator()
            if args.keep and run.namespaces:
                log(
                    f"kept namespaces {run.namespaces}; "
                    "the GymHost keeps its finalizer until an operator runs"
                )
        report(
            args.n,
            args.hosts,
            op=operator_result,
            base=baseline_result,
            reference=reference_result,
            usage=run.usage,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
