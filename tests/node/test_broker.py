"""The episode broker against real containers, through the API server and the kubelet's streaming path."""

from __future__ import annotations

import base64
import hashlib
import os
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from hack.localcluster.nodeconfig import PAUSE_IMAGE
from kubernetes import client
from tests.node.conftest import SHELL_IMAGE, module_host, node_host
from tests.support.archives import tar_of, untar
from tests.support.cluster import Cluster
from tests.support.episodes import Episodes
from tests.support.processes import BrokerProcess, OperatorProcess

PAYLOAD_BYTES = 50 * 1024 * 1024


@dataclass(frozen=True)
class Session:
    runtime: str
    namespace: str
    host: str
    http: httpx.Client
    headers: dict[str, str]
    broker_log: Path

    def create(self, **fields: Any) -> str:
        body = {"rolloutId": "r-1", "image": SHELL_IMAGE, "command": ["sleep", "3600"], **fields}
        created = self.http.post("/v1/episodes", json=body, headers=self.headers)
        assert created.status_code == 201, created.text
        return str(created.json()["id"])

    def exec(self, episode: str, **request: Any) -> httpx.Response:
        return self.http.post(f"/v1/episodes/{episode}/exec", json=request, headers=self.headers)

    def cut_short(self) -> str:
        """The broker's log lines about reads that arrived incomplete (what a failed transfer test shows)."""
        lines = self.broker_log.read_text(errors="replace").splitlines()
        return "\n".join(line for line in lines if "arrived cut short" in line)


@pytest.fixture(scope="module", params=["crun", "gvisor"])
def session(
    request: pytest.FixtureRequest,
    cluster: Cluster,
    core: client.CoreV1Api,
    api_client: client.ApiClient,
    operator: OperatorProcess,
    broker: BrokerProcess,
    real_node: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Session]:
    """A Ready host under each runtime and a broker session authenticated by its lease token."""
    runtime = request.param
    name = f"{runtime}-broker"
    host = node_host(name, runtime)
    host["spec"]["episodes"]["images"].append(PAUSE_IMAGE)  # an image without sh
    host["spec"]["resources"] = {"cpu": "100m", "memory": "128Mi", "ephemeralStorage": "1Gi"}
    for namespace in module_host(cluster, core, api_client, real_node, tmp_path_factory, host):
        secret = core.read_namespaced_secret(f"{name}-lease", namespace)
        token = base64.b64decode(secret.data["token"]).decode()
        with httpx.Client(base_url=broker.url, timeout=120) as http:
            yield Session(runtime, namespace, name, http, {"Authorization": f"Bearer {token}"}, broker.log)


@pytest.fixture(scope="module")
def episode(session: Session, api_client: client.ApiClient) -> str:
    """One Ready episode shared by the read-mostly tests of this module."""
    # Transfer paths are relative to the working directory: the image's (here "/", not writable) unless given.
    resources = {"cpu": "200m", "memory": "256Mi", "ephemeralStorage": "1Gi"}
    episode_id = session.create(resources=resources, workdir="/tmp")
    Episodes(api_client, session.namespace).wait_ready(episode_id, timeout=120)
    return episode_id


def test_argv_runs_without_a_shell(session: Session, episode: str) -> None:
    result = session.exec(episode, argv=["echo", "two words", "$HOME"]).json()
    assert result["exitCode"] == 0, result
    assert (result["exitCode"], result["stdout"], result["timedOut"]) == (0, "two words $HOME\n", False)


def test_shell_exit_code_and_stderr_come_back(session: Session, episode: str) -> None:
    result = session.exec(episode, shell="echo out; echo err >&2; exit 7").json()
    assert (result["exitCode"], result["stdout"], result["stderr"]) == (7, "out\n", "err\n")


def test_env_and_workdir_apply(session: Session, episode: str) -> None:
    result = session.exec(
        episode, shell='echo "$GREETING" "$(pwd)"', env={"GREETING": "hi"}, workdir="/tmp"
    ).json()
    assert (result["exitCode"], result["stdout"]) == (0, "hi /tmp\n")


def test_output_beyond_the_cap_is_truncated(session: Session, episode: str) -> None:
    result = session.exec(episode, shell="yes | head -c 200000", maxOutputBytes=1000).json()
    assert result["truncated"] is True
    kept, marker, rest = result["stdout"].partition("\n[output truncated]\n")
    assert (len(kept), marker, rest) == (1000, "\n[output truncated]\n", "")


def test_deadline_answers_minus_one_and_the_process_is_gone(session: Session, episode: str) -> None:
    started = time.monotonic()
    result = session.exec(episode, shell="sleep 41; echo never", timeoutSeconds=2).json()
    elapsed = time.monotonic() - started
    assert (result["exitCode"], result["timedOut"]) == (-1, True)
    assert "never" not in result["stdout"]
    assert elapsed < 10

    def still_running() -> str:
        ps = session.exec(episode, shell="ps -o pid,stat,args").json()["stdout"]
        return "\n".join(line for line in ps.splitlines() if "sleep 41" in line and "ps -o" not in line)

    deadline = time.monotonic() + 10
    while still_running() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert still_running() == ""


def test_execs_leave_no_zombies(session: Session, episode: str) -> None:
    for _ in range(3):
        assert session.exec(episode, argv=["true"]).json()["exitCode"] == 0
    ps = session.exec(episode, shell="ps -o stat,args").json()["stdout"]
    zombies = [line for line in ps.splitlines()[1:] if line.split()[0].startswith("Z")]
    assert zombies == [], ps


def test_file_round_trip_of_50_mib_is_byte_identical(session: Session, episode: str) -> None:
    payload = os.urandom(PAYLOAD_BYTES)
    put = session.http.put(
        f"/v1/episodes/{episode}/files/data/blob.bin", content=payload, headers=session.headers
    )
    assert put.status_code == 204, put.text
    got = session.http.get(f"/v1/episodes/{episode}/files/data/blob.bin", headers=session.headers)
    assert got.status_code == 200, f"{got.text[:300]}\n{session.cut_short()}"
    assert len(got.content) == len(payload)
    assert hashlib.sha256(got.content).digest() == hashlib.sha256(payload).digest()
    counted = session.exec(episode, shell="wc -c < data/blob.bin").json()
    size = counted["stdout"].strip()
    assert counted["exitCode"] == 0, counted
    assert int(size) == PAYLOAD_BYTES


def test_directory_round_trip_of_50_mib_is_byte_identical(session: Session, episode: str) -> None:
    files = {"a.bin": os.urandom(PAYLOAD_BYTES - 1024), "nested/b.txt": b"small\n", "nested/deeper/c": b""}
    put = session.http.put(
        f"/v1/episodes/{episode}/directories/tree", content=tar_of(files), headers=session.headers
    )
    assert put.status_code == 204, put.text
    got = session.http.get(f"/v1/episodes/{episode}/directories/tree", headers=session.headers)
    assert got.status_code == 200, f"{got.text[:300]}\n{session.cut_short()}"
    assert untar(got.content) == files


def test_pod_killed_mid_exec_answers_minus_two(
    session: Session, api_client: client.ApiClient, core: client.CoreV1Api
) -> None:
    episodes = Episodes(api_client, session.namespace)
    victim = session.create()
    episodes.wait_ready(victim, timeout=120)
    pod = (episodes.get(victim) or {})["status"]["podName"]
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(session.exec, victim, shell="echo started; sleep 60", timeoutSeconds=50)
        time.sleep(2)
        core.delete_namespaced_pod(pod, session.namespace, grace_period_seconds=0)
        response = running.result(timeout=60)
    assert response.status_code == 200, response.text
    assert response.json()["exitCode"] == -2


def test_image_without_the_brokers_tools_answers_a_clear_error(
    session: Session, api_client: client.ApiClient
) -> None:
    bare = session.create(image=PAUSE_IMAGE, command=["/pause"])
    Episodes(api_client, session.namespace).wait_ready(bare, timeout=120)
    response = session.exec(bare, argv=["true"])
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["code"] == "sandbox_tool_missing", body
    assert "`sh`" in body["message"], body
