"""The broker SIGKILLed mid-exec, mid-upload and mid-create, and started again at the same address (a replica
restarting behind its Service), against a real sandbox on the real node:

- the exec's caller gets the client's retryable `transport_error` (exec is never retried: it may have run),
  and the command still ends at its deadline, in the sandbox, without a broker;
- the upload is retried by the client and lands whole; no half-written file, no `.gs-part` left behind;
- a create retried with its Idempotency-Key makes exactly one episode.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kubernetes import client

from gymsandbox.client import BrokerClient, BrokerClientError
from gymsandbox.client.calls import TRANSPORT_ERROR
from tests.node.conftest import SHELL_IMAGE, module_host, node_host
from tests.support.chart import Identities
from tests.support.cluster import Cluster
from tests.support.episodes import Episodes
from tests.support.gymhosts import read_token
from tests.support.processes import BrokerProcess, OperatorProcess

HOST = "broker-kills"
PAYLOAD_BYTES = 32 * 1024 * 1024
T = TypeVar("T")


@dataclass
class Restartable:
    """A broker of our own (the session's one is never killed) that restarts on its port."""

    identities: Identities
    policy_file: Path
    log: Path
    process: BrokerProcess

    def kill_and_restart(self) -> None:
        port = self.process.port
        self.process.kill()
        self.process = BrokerProcess.launch(self.identities.broker, self.policy_file, self.log, port=port)


@pytest.fixture(scope="module")
def host_namespace(
    cluster: Cluster,
    core: client.CoreV1Api,
    api_client: client.ApiClient,
    operator: OperatorProcess,
    real_node: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[str]:
    yield from module_host(cluster, core, api_client, real_node, tmp_path_factory, node_host(HOST, "crun"))


@pytest.fixture
def broker_k(
    identities: Identities, policy_file: Path, operator: OperatorProcess, tmp_path: Path
) -> Iterator[Restartable]:
    log = tmp_path / "broker-k.log"
    handle = Restartable(
        identities, policy_file, log, BrokerProcess.launch(identities.broker, policy_file, log)
    )
    yield handle
    handle.process.stop()


@pytest.fixture
def sdk(broker_k: Restartable, host_namespace: str, core: client.CoreV1Api) -> Iterator[BrokerClient]:
    token = read_token(core, host_namespace, f"{HOST}-lease")
    with BrokerClient(broker_k.process.url, token, retries=8, timeout=60) as broker_client:
        yield broker_client


@pytest.fixture
def sandbox(sdk: BrokerClient, api_client: client.ApiClient, host_namespace: str) -> Iterator[str]:
    created = sdk.create_episode("r-1", SHELL_IMAGE, command=["sleep", "3600"], workdir="/tmp")
    Episodes(api_client, host_namespace).wait_ready(created.id, timeout=120)
    yield created.id
    sdk.close_episode(created.id)


def in_background(call: Callable[[], T]) -> tuple[threading.Thread, list[T | BaseException]]:
    outcome: list[T | BaseException] = []

    def run() -> None:
        try:
            outcome.append(call())
        except BaseException as e:  # handed to the test thread
            outcome.append(e)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


def test_broker_killed_mid_exec_the_caller_gets_a_transport_error_and_the_command_ends_at_its_deadline(
    broker_k: Restartable, sdk: BrokerClient, sandbox: str
) -> None:
    thread, outcome = in_background(lambda: sdk.exec(sandbox, shell="sleep 43; echo late", timeout_seconds=4))
    time.sleep(1.5)
    broker_k.kill_and_restart()
    thread.join(timeout=60)
    [error] = outcome
    assert isinstance(error, BrokerClientError), error
    assert error.code == TRANSPORT_ERROR
    time.sleep(4)  # past the deadline: the watchdog in the sandbox ends it, with no broker watching

    def still_running() -> bool:
        ps = sdk.exec(sandbox, shell="ps -o args").stdout
        return any("sleep 43" in line for line in ps.splitlines() if "ps -o" not in line)

    deadline = time.monotonic() + 10
    while still_running():
        assert time.monotonic() < deadline, "the command outlived its deadline after the broker died"
        time.sleep(0.5)


def test_broker_killed_mid_upload_the_retried_upload_lands_whole_and_nothing_partial_stays(
    broker_k: Restartable, sdk: BrokerClient, sandbox: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gymsandbox.client.broker")
    data = os.urandom(PAYLOAD_BYTES)
    thread, outcome = in_background(lambda: sdk.put_file(sandbox, "upload/model.bin", data))
    time.sleep(0.5)  # the body is on its way
    broker_k.kill_and_restart()
    thread.join(timeout=180)
    assert outcome == [None], outcome
    assert "retrying PUT" in caplog.text, "the upload finished before the kill: the fault did not happen"
    stored = sdk.get_file(sandbox, "upload/model.bin")
    assert hashlib.sha256(stored).hexdigest() == hashlib.sha256(data).hexdigest()
    listing = sdk.exec(sandbox, shell="ls -a upload").stdout.split()
    assert sorted(listing) == [".", "..", "model.bin"], listing


def test_broker_killed_mid_create_the_retried_create_makes_exactly_one_episode(
    broker_k: Restartable,
    sdk: BrokerClient,
    api_client: client.ApiClient,
    host_namespace: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="gymsandbox.client.broker")
    before = {e["metadata"]["name"] for e in Episodes(api_client, host_namespace).all()}
    thread, outcome = in_background(
        lambda: sdk.create_episode("r-2", SHELL_IMAGE, idempotency_key="step-42", command=["sleep", "60"])
    )
    time.sleep(0.05)  # the create is in flight, or just done
    broker_k.kill_and_restart()
    thread.join(timeout=120)
    [created] = outcome
    assert not isinstance(created, BaseException), created
    after = {e["metadata"]["name"] for e in Episodes(api_client, host_namespace).all()} - before
    assert after == {created.id}  # type: ignore[union-attr]
    again: Any = sdk.create_episode("r-2", SHELL_IMAGE, idempotency_key="step-42", command=["sleep", "60"])
    assert again.id == created.id  # type: ignore[union-attr]
    sdk.close_episode(again.id)
    print(f"\nthe create was {'retried' if 'retrying POST' in caplog.text else 'done before the kill'}")
