"""What the benchmarks in bench/ share beyond the test harness (tests/support: the cluster, the CRDs,
namespaces, the sample policy and GymHost): their processes measured, clean-up, reporting.

The benchmarks run as modules from the repository root (`python -m bench.episodes`, as the Makefile does).
Every wait is bounded; subprocesses are stopped by their own PID only.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml
from hack.localcluster.processes import free_port
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from tests.support.cluster import Cluster, find_cluster, install_crds
from tests.support.gymhosts import sample
from tests.support.namespaces import create_restricted_namespace
from tests.support.processes import gymsandbox_cli
from tests.support.samples import sample_policy

GROUP, VERSION, PLURAL = "gymsandbox.dev", "v1alpha1", "episodesandboxes"
HOST = "swe-gym-run-1"
IMAGE = "registry.example.com/episodes/python-sandbox:3.12"
OPERATOR_NAMESPACE = "gymsandbox-system"
BENCH_LABEL = "gymsandbox.dev/bench"
# What a clean-up waits for the GymHost, then the namespace, to be gone.
DELETE_TIMEOUT = 180.0


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------- cluster


def install_crds_and_namespace(cluster: Cluster, core: client.CoreV1Api) -> None:
    """Apply crds/, wait until they are Established, and make sure the operator namespace exists."""
    install_crds(cluster)
    with contextlib.suppress(ApiException):  # 409: it exists (it holds the signing key)
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=OPERATOR_NAMESPACE)))


def new_client(kubeconfig: Path) -> client.ApiClient:
    api: client.ApiClient = config.new_client_from_config(  # type: ignore[no-untyped-call]
        config_file=str(kubeconfig)
    )
    return api


def plain(api: client.ApiClient, obj: object) -> dict[str, Any]:
    """A client model (or a dict) as the API's JSON: camelCase keys, no None values."""
    body: dict[str, Any] = api.sanitize_for_serialization(obj)  # type: ignore[no-untyped-call]
    return body


def ready_condition(obj: Mapping[str, Any]) -> tuple[bool, str]:
    """Whether an object's Ready condition is True, and its reason (`NoStatusYet` before it has one)."""
    conditions = (obj.get("status") or {}).get("conditions") or []
    ready: dict[str, Any] = next((c for c in conditions if c.get("type") == "Ready"), {})
    return ready.get("status") == "True", str(ready.get("reason") or "NoStatusYet")


# ---------------------------------------------------------------------------------------------- namespace


def create_namespace(core: client.CoreV1Api, prefix: str) -> str:
    """A new restricted namespace `PREFIX-XXXXXX`, labelled as the benchmark's; returns its name."""
    return create_restricted_namespace(core, f"{prefix}-{secrets.token_hex(3)}", {BENCH_LABEL: "true"})


def not_found(call: Callable[[], object]) -> bool:
    """call(); True if the API answered 404 Not Found, False if it succeeded (other errors raise)."""
    try:
        call()
    except ApiException as e:
        if e.status == 404:
            return True
        raise
    return False


def delete_and_wait_gone(delete: Callable[[], object], read: Callable[[], object], timeout: float) -> bool:
    """delete(), then read() every 0.5 s until it answers 404; False if it still answers at the deadline."""
    deadline = time.monotonic() + timeout
    if not_found(delete):
        return True
    while time.monotonic() < deadline:
        if not_found(read):
            return True
        time.sleep(0.5)
    return False


def delete_namespace(core: client.CoreV1Api, name: str, timeout: float) -> bool:
    """Delete and wait until it is gone; False if it is still there at the deadline."""
    return delete_and_wait_gone(
        lambda: core.delete_namespace(name), lambda: core.read_namespace(name), timeout
    )


def write_policy(directory: Path, episodes: int) -> Path:
    """The sample policy (examples/policy.yaml), with room for `episodes` episodes on one host."""
    policy = sample_policy()
    caps = policy.setdefault("caps", {})
    caps["maxEpisodesPerHost"] = max(episodes, int(caps.get("maxEpisodesPerHost") or 0))
    path = directory / "policy.yaml"
    path.write_text(yaml.safe_dump(policy))
    return path


def create_host(
    api: client.ApiClient, namespace: str, slots: int, timeout: float, *, name: str = HOST
) -> dict[str, Any]:
    """The sample GymHost named `name` with episodes.maxConcurrent = slots (and the sample PVC, with the
    first host); returns it once it is Ready."""
    claim, host = sample()
    host["metadata"]["name"] = name
    host["spec"]["episodes"]["maxConcurrent"] = slots
    core = client.CoreV1Api(api)
    try:
        core.create_namespaced_persistent_volume_claim(namespace, claim)  # type: ignore[arg-type]  # a manifest dict
    except ApiException as e:
        if e.status != 409:  # made with an earlier host
            raise
    custom = client.CustomObjectsApi(api)
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "gymhosts", host)
    deadline, reason = time.monotonic() + timeout, "NoStatusYet"
    while time.monotonic() < deadline:
        obj = plain(api, custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "gymhosts", name))
        ready, reason = ready_condition(obj)
        if ready:
            return obj
        time.sleep(0.5)
    raise TimeoutError(f"GymHost {name} not Ready after {timeout:.0f} s (last reason {reason})")


def delete_host(api: client.ApiClient, namespace: str, timeout: float, *, name: str = HOST) -> bool:
    """Delete the GymHost and wait until it is gone (its finalizer released); False at the deadline."""
    custom = client.CustomObjectsApi(api)
    host = (GROUP, VERSION, namespace, "gymhosts", name)
    return delete_and_wait_gone(
        lambda: custom.delete_namespaced_custom_object(*host),
        lambda: custom.get_namespaced_custom_object(*host),
        timeout,
    )


# ---------------------------------------------------------------------------------------------- processes


# A directory for Prometheus file_sd_configs (hack/dashboard.py sets it): each Child writes its target there.
METRICS_TARGETS = os.environ.get("GYMSANDBOX_METRICS_TARGETS")


@dataclass
class Child:
    """A `gymsandbox` subprocess started here, logging to a file, serving its metrics on a loopback port;
    stopped by its own PID only. Its last scrape is kept as NAME-PID.metrics.txt beside its log (or, under
    hack/dashboard.py, in that script's work directory, which outlives the bench's)."""

    name: str
    process: subprocess.Popen[bytes]
    log_path: Path
    metrics_url: str

    @classmethod
    def launch(cls, name: str, argv: list[str], kubeconfig: Path, log_path: Path) -> Child:
        env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
        target = f"127.0.0.1:{free_port()}"
        with log_path.open("ab") as out:
            process = subprocess.Popen(
                [*argv, "--metrics-listen", target], stdout=out, stderr=subprocess.STDOUT, env=env
            )
        log(f"{name} pid {process.pid}, log {log_path}, metrics http://{target}/metrics")
        if METRICS_TARGETS:
            entry = [{"targets": [target], "labels": {"job": name}}]
            (Path(METRICS_TARGETS) / f"{name}-{process.pid}.json").write_text(json.dumps(entry))
        return cls(name, process, log_path, f"http://{target}/metrics")

    def scrape(self) -> str | None:
        """Its /metrics now; None (logged) when it does not answer."""
        try:
            return httpx.get(self.metrics_url, timeout=5).text
        except httpx.HTTPError as e:
            log(f"could not scrape the {self.name}: {e}")
            return None

    def save_metrics(self) -> None:
        """Its /metrics as they are now, into NAME-PID.metrics.txt."""
        text = self.scrape()
        if text is None:
            return
        directory = Path(METRICS_TARGETS).parent if METRICS_TARGETS else self.log_path.parent
        (directory / f"{self.name}-{self.process.pid}.metrics.txt").write_text(text)

    @property
    def running(self) -> bool:
        return self.process.poll() is None

    def text(self, start: int = 0, end: int | None = None) -> str:
        """Its log from byte `start` to byte `end` (the end of the file if None)."""
        with self.log_path.open("rb") as f:
            f.seek(start)
            data = f.read() if end is None else f.read(max(0, end - start))
        return data.decode(errors="replace")

    def log_offset(self) -> int:
        """Where its log ends now, for text(start, end)."""
        return self.log_path.stat().st_size

    def wait_for(self, ready: Callable[[], bool], timeout: float) -> None:
        """Until ready(); stops it and raises RuntimeError (with its log's tail) if it exits or times out."""
        deadline = time.monotonic() + timeout
        while not ready():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the {self.name} did not start:\n{self.text()[-3000:]}")
            time.sleep(0.2)

    def stop(self, grace: float = 40) -> None:
        """SIGTERM, then SIGKILL after `grace` seconds; nothing if it has already exited."""
        if self.process.poll() is None:
            self.save_metrics()
            log(f"stopping the {self.name} (pid {self.process.pid})")
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=20)


def resident_mib(process: subprocess.Popen[bytes], field: str = "VmHWM") -> float | None:
    """The process's peak resident set size (VmHWM; field="VmRSS": its current one) in MiB; None once
    it is gone."""
    try:
        status = Path(f"/proc/{process.pid}/status").read_text()
    except OSError:
        return None
    match = re.search(rf"^{field}:\s+(\d+) kB", status, re.MULTILINE)
    return int(match.group(1)) / 1024 if match else None


def cpu_seconds(process: subprocess.Popen[bytes]) -> float | None:
    """The CPU time (user and system) the process has used so far; None once it is gone."""
    try:
        fields = Path(f"/proc/{process.pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime: fields 14, 15


def start_operator(
    kubeconfig: Path, policy: Path, namespace: str, workdir: Path, *, verbose: bool = False
) -> Child:
    """`gymsandbox operator` for one namespace as deployed (quiet log), logging to WORKDIR/operator.log;
    returns once it has loaded its policy and signing key and is about to watch (a GymHost turning Ready then
    shows its watches run). `verbose`: the debug lines too (a line per handled key), at a cost in CPU."""
    argv = [gymsandbox_cli(), "operator", "--policy", str(policy), "--namespace", namespace]
    argv += ["--operator-namespace", OPERATOR_NAMESPACE] + (["--verbose"] if verbose else [])
    operator = Child.launch("operator", argv, kubeconfig, workdir / "operator.log")
    operator.wait_for(lambda: "gymsandbox operator leading" in operator.text(), timeout=60)
    return operator


# ---------------------------------------------------------------------------------------------- run


@dataclass
class BenchRun:
    """What every benchmark run holds; each script's Run adds its own state."""

    args: argparse.Namespace
    cluster: Cluster
    api: client.ApiClient
    workdir: Path
    operator: Child | None = None

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    @property
    def host_names(self) -> list[str]:
        """The run's GymHosts: HOST, or with --hosts H > 1, HOST-00 ... in order."""
        count = getattr(self.args, "hosts", 1)
        return [HOST] if count == 1 else [f"{HOST}-{i:02d}" for i in range(count)]

    def delete_host_then_namespace(self, namespace: str) -> None:
        """Delete the GymHost (only while this run's operator runs to release its finalizer), then the
        namespace.

        The GymHost goes first, while the operator runs: it holds the host's finalizer, which only a running
        operator removes.
        Each wait is bounded by DELETE_TIMEOUT; what is still there then is logged and left.
        """
        if self.operator is not None and self.operator.running:
            for host in self.host_names:
                log(f"deleting GymHost {host} (and through it any episode left) in {namespace}")
                if not delete_host(self.api, namespace, timeout=DELETE_TIMEOUT, name=host):
                    log(f"GymHost {host} in {namespace} is still there after {DELETE_TIMEOUT:.0f} s")
        log(f"deleting namespace {namespace}")
        if not delete_namespace(self.core, namespace, timeout=DELETE_TIMEOUT):
            log(
                f"namespace {namespace} is still terminating after {DELETE_TIMEOUT:.0f} s; "
                "left to the API server"
            )


@contextlib.contextmanager
def prepared_cluster(workdir_prefix: str, keep: bool) -> Iterator[tuple[Cluster, client.ApiClient, Path]]:
    """The cluster (tests/support/cluster.py find_cluster), an API client for it once the CRDs are installed,
    and a scratch directory (see workdir)."""
    cluster, _ = find_cluster()  # left running
    api = new_client(cluster.kubeconfig)
    with workdir(workdir_prefix, keep) as directory:
        install_crds_and_namespace(cluster, client.CoreV1Api(api))
        yield cluster, api, directory


@contextlib.contextmanager
def workdir(prefix: str, keep: bool) -> Iterator[Path]:
    """A fresh temporary directory, removed at the end unless `keep` (then its path is logged)."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield path
    finally:
        if keep:
            log(f"kept {path}")
        else:
            shutil.rmtree(path, ignore_errors=True)


# ---------------------------------------------------------------------------------------------- report


def nearest_rank(values: Iterable[float], p: float) -> float | None:
    """The p-th percentile by nearest rank; None for no values."""
    ordered = sorted(values)
    if not ordered:
        return None
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def print_ratio_table(
    columns: tuple[str, str], rows: Iterable[tuple[str, float | None, float | None, int]]
) -> None:
    """A header, then one line per (label, a, b, digits): a and b under `columns`, and a / b."""
    left, right = columns
    print(f"{'metric':<40} {left:>10} {right:>10} {'ratio':>8}")
    for label, a, b, digits in rows:
        print(f"{label:<40} {fmt(a, digits):>10} {fmt(b, digits):>10} {fmt(ratio(a, b), 2):>8}")


def compared(columns: tuple[str, str], a: float | None, b: float | None) -> dict[str, float | None]:
    """One metric of the JSON summary: both values under `columns`, and their ratio."""
    left, right = columns
    return {left: a, right: b, "ratio": ratio(a, b)}
