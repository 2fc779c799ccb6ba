"""The operator's default log, as `make run` shows it: a line per Ready transition, nothing while idle, and
no traceback for an object that went away while it was being handled."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from gymsandbox.api.names import FINALIZER
from gymsandbox.handlers.context import OperatorContext
from gymsandbox.handlers.gymhost import let_go
from gymsandbox.kube.client import GYMHOST, Kube
from gymsandbox.kube.informer import RetryError
from gymsandbox.leases import SigningKey
from gymsandbox.policy.cluster import ClusterPolicy
from tests.support.chart import Identities, release_finalizers
from tests.support.cluster import Cluster
from tests.support.gymhosts import Hosts, apply, sample
from tests.support.processes import OperatorProcess

pytestmark = pytest.mark.integration

HOSTS = 10
# Ten resyncs at the suite's GYMSANDBOX_RESYNC_SECONDS=3 and fifteen episode ticks per host: what a minute
# and a half of the default 10 s resync would log.
IDLE_SECONDS = 30


@pytest.fixture
def quiet_operator(
    identities: Identities,
    policy_file: Path,
    own_namespace: str,
    api_client: client.ApiClient,
    tmp_path: Path,
) -> Iterator[OperatorProcess]:
    """An operator as the chart runs it by default (no --verbose), serving only `own_namespace`."""
    handle = OperatorProcess.launch(
        identities.operator, policy_file, tmp_path / "operator.log", [own_namespace], verbose=False
    )
    yield handle
    handle.stop()
    release_finalizers(api_client, (own_namespace,))


def test_idle_operator_with_ten_ready_hosts_writes_nothing(
    cluster: Cluster, quiet_operator: OperatorProcess, own_namespace: str, api_client: client.ApiClient
) -> None:
    claim, host = sample()
    names = [f"quiet-{i}" for i in range(HOSTS)]
    apply(cluster, own_namespace, claim, *({**host, "metadata": {"name": name}} for name in names))
    hosts = Hosts(api_client, own_namespace)
    for name in names:
        hosts.wait_reason(name, "HostReady", timeout=60)
    time.sleep(3)  # the last Ready line, and the start-up lines, are written
    log = quiet_operator.output()
    for name in names:
        assert f"GymHost {own_namespace}/{name}: Ready=True HostReady" in log, log[-3000:]
    assert not re.search(r"(Timer|Handler) '\w+' succeeded", log), log[-3000:]
    before = len(log)
    time.sleep(IDLE_SECONDS)
    assert quiet_operator.output()[before:] == ""
    assert "Traceback" not in quiet_operator.output()


def test_json_log_format_writes_one_record_per_line(
    cluster: Cluster,
    identities: Identities,
    policy_file: Path,
    own_namespace: str,
    api_client: client.ApiClient,
    tmp_path: Path,
) -> None:
    handle = OperatorProcess.launch(
        identities.operator, policy_file, tmp_path / "operator.log", [own_namespace], verbose=False,
        extra=("--log-format", "json"),
    )  # fmt: skip
    try:
        claim, host = sample()
        apply(cluster, own_namespace, claim, {**host, "metadata": {"name": "json"}})
        Hosts(api_client, own_namespace).wait_reason("json", "HostReady", timeout=60)
        time.sleep(2)  # the transition line is written
    finally:
        handle.stop()
        release_finalizers(api_client, (own_namespace,))
    records = [json.loads(line) for line in handle.output().splitlines() if line.strip()]
    messages = [str(r["message"]) for r in records]
    assert f"GymHost {own_namespace}/json: Ready=True HostReady: the host serves on its endpoint" in messages
    assert any(m.startswith("gymsandbox operator starting") for m in messages), messages


@pytest.fixture
def context(api_client: client.ApiClient, own_namespace: str) -> OperatorContext:
    return OperatorContext(
        policy=ClusterPolicy(),
        kube=Kube(api_client),
        signing_key=SigningKey.generate(),
        namespaces=(own_namespace,),
    )


def unwatched_host(cluster: Cluster, namespace: str, name: str) -> None:
    """A host with our finalizer in a namespace no operator serves: only the test acts on it."""
    _, host = sample()
    host["metadata"] = {"name": name, "finalizers": [FINALIZER]}
    apply(cluster, namespace, host)


def test_releasing_a_host_deleted_since_the_list_is_no_error(
    cluster: Cluster, own_namespace: str, context: OperatorContext
) -> None:
    unwatched_host(cluster, own_namespace, "gone")
    listed = context.kube.list(GYMHOST, own_namespace)
    context.kube.patch(GYMHOST, own_namespace, "gone", {"metadata": {"finalizers": None}})
    assert context.kube.delete(GYMHOST, own_namespace, "gone")
    assert context.kube.get(GYMHOST, own_namespace, "gone") is None
    let_go(context, listed[0])  # a 404 here used to escape as a traceback


def test_releasing_a_host_changed_since_the_list_is_retried_not_forced(
    cluster: Cluster, own_namespace: str, context: OperatorContext
) -> None:
    unwatched_host(cluster, own_namespace, "changed")
    listed = context.kube.list(GYMHOST, own_namespace)
    context.kube.patch(GYMHOST, own_namespace, "changed", {"metadata": {"labels": {"touched": "yes"}}})
    with pytest.raises(RetryError, match="changed meanwhile"):  # one line, and a retry with the newer state
        let_go(context, listed[0])
    current = context.kube.get(GYMHOST, own_namespace, "changed") or {}
    assert FINALIZER in current["metadata"]["finalizers"]  # the newer state won
    context.kube.patch(GYMHOST, own_namespace, "changed", {"metadata": {"finalizers": None}})
