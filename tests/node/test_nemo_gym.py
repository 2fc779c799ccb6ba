"""NeMo Gym's own sandbox API (nemo-gym 0.4.0 from PyPI, in a Python 3.12 virtualenv) over the gymsandbox
provider, found by its entry point, against the broker and real gVisor sandboxes on the real node.

The scenarios run in that virtualenv (tests/node/nemo_gym_driver.py) with only what a Gym host has: the
broker's URL and a token file in the environment, and the light install (httpx, pydantic; no kopf, no
Kubernetes client). Each prints what it saw; the assertions are here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hack.localcluster.paths import ROOT
from kubernetes import client
from tests.node.conftest import SHELL_IMAGE, module_host, node_host
from tests.support.cluster import Cluster
from tests.support.gymhosts import read_token
from tests.support.processes import BrokerProcess, OperatorProcess

HOST = "nemo-gym"
DRIVER = Path(__file__).with_name("nemo_gym_driver.py")
OFF_LIST_IMAGE = "registry.example.com/episodes/not-on-the-hosts-list:1"


@dataclass(frozen=True)
class Driver:
    python: Path
    env: dict[str, str]

    def run(self, scenario: str, timeout: float = 240, **args: Any) -> dict[str, Any]:
        done = subprocess.run(
            [str(self.python), str(DRIVER), scenario, json.dumps({"image": SHELL_IMAGE, **args})],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=timeout,
            check=False,
        )
        assert done.returncode == 0, f"{scenario} failed:\n{done.stdout}\n{done.stderr}"
        seen: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        return seen


@pytest.fixture(scope="module")
def nemo_gym_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    made = subprocess.run(
        [sys.executable, "-m", "hack.nemo_gym", "venv", str(tmp_path_factory.mktemp("nemo-gym"))],
        cwd=ROOT,  # hack/ is a package of the repository root
        capture_output=True,
        text=True,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    return Path(made.stdout.strip())


@pytest.fixture(scope="module")
def driver(
    nemo_gym_python: Path,
    cluster: Cluster,
    core: client.CoreV1Api,
    api_client: client.ApiClient,
    operator: OperatorProcess,
    broker: BrokerProcess,
    real_node: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Driver]:
    """A Ready gVisor host, and the environment its pod would give the provider."""
    host = node_host(HOST, "gvisor")
    host["spec"]["episodes"]["maxConcurrent"] = 2
    for namespace in module_host(cluster, core, api_client, real_node, tmp_path_factory, host):
        token_file = tmp_path_factory.mktemp("lease") / "token"
        token_file.write_text(read_token(core, namespace, f"{HOST}-lease"))
        hidden = ("KUBECONFIG", "GYMSANDBOX_LEASE_TOKEN", "GYMSANDBOX_BROKER_CA", "PYTHONPATH")
        env = {k: v for k, v in os.environ.items() if k not in hidden}
        env |= {"GYMSANDBOX_BROKER_URL": broker.url, "GYMSANDBOX_LEASE_TOKEN_FILE": str(token_file)}
        yield Driver(nemo_gym_python, env)


def test_a_sandbox_starts_runs_moves_files_and_stops_through_nemo_gyms_async_api(driver: Driver) -> None:
    seen = driver.run("lifecycle")
    assert seen["provider"] == ["gymsandbox.integrations.nemo_gym", "GymsandboxProvider", "gymsandbox"]
    assert seen["first"] == {"stdout": "", "stderr": "", "return_code": 0, "error_type": None}
    assert seen["status"] == "running"
    # spec.files: an absolute path and one relative to the workdir; the workdir is the exec's default cwd
    assert seen["files"]["stdout"] == "fix the bug\nrelative to the workdir\n/tmp\n"
    assert seen["env_cwd"]["stdout"] == "swe-1 x /tmp/task\n", seen["env_cwd"]
    assert seen["exit_code"] == {"stdout": "out\n", "stderr": "err\n", "return_code": 3, "error_type": None}
    assert (seen["user_uid"]["stdout"], seen["user_uid"]["return_code"]) == ("65532\n", 0)
    assert seen["user_root"]["type"] == "SandboxSpecError"
    assert "user 'root' cannot be honoured: this sandbox runs as uid 65532" in seen["user_root"]["message"]
    # the deadline: a sentinel a command's own exit code cannot be mistaken for, and nothing left running
    assert (seen["deadline"]["return_code"], seen["deadline"]["error_type"]) == (124, "timeout")
    assert seen["deadline"]["stdout"] == "started\n"
    assert seen["deadline_seconds"] < 15
    assert seen["after_deadline"]["stdout"] == "gone\n"
    assert seen["uploaded"]["stdout"].strip() == str(256 * 64)
    assert seen["round_trip"] is True
    assert (seen["open_before_stop"], seen["open_after_stop"]) == (1, 0)
    assert seen["status_after_stop"] == "stopped"
    assert seen["heavy_modules"] == []  # the light install: none of the operator's dependencies


def test_the_blocking_sandbox_api_works_the_same(driver: Driver) -> None:
    seen = driver.run("blocking")
    assert seen["status"] == "running"
    assert seen["cat"] == {"stdout": "A\n", "stderr": "", "return_code": 0, "error_type": None}
    assert seen["downloaded"] == "A\n"
    assert (seen["status_after_stop"], seen["open_after_stop"]) == ("stopped", 0)


def test_a_reaped_sandbox_reads_as_stopped_and_stops_without_error(driver: Driver) -> None:
    seen = driver.run("reaped", ttl_s=5, wait_s=90)
    assert seen["status"] == "stopped"
    assert (seen["exec"]["return_code"], seen["exec"]["error_type"]) == (125, "sandbox")
    assert seen["stopped"] is True


def test_refused_creations_raise_nemo_gyms_create_error_with_reason_and_kind(driver: Driver) -> None:
    seen = driver.run("refused", off_list_image=OFF_LIST_IMAGE)
    for name in ("off_list", "gpu_type", "bad_label", "unknown_option", "no_image"):
        assert seen[name]["create_error"], (name, seen[name])
        assert seen[name]["kind"] == "Policy", (name, seen[name])
    assert seen["off_list"]["reason"] == "image_not_approved"
    assert seen["gpu_type"]["reason"] == "UnsupportedSpec"
    assert "gpu_type 'H100' cannot be honoured" in seen["gpu_type"]["message"]
    assert seen["bad_label"]["reason"] == "invalid_request"
    assert "labels" in seen["bad_label"]["message"]
    assert "unknown provider_options privileged" in seen["unknown_option"]["message"]
    # started, not ready in time: a verification error of kind Infrastructure (mask the sample)
    late = seen["not_ready_in_time"]
    assert (late["verification_error"], late["kind"]) == (True, "Infrastructure"), late
    assert "was not ready within 0.05 s" in late["message"]
    # a command that cannot start: the episode stalls, a Workload failure (score the sample)
    stalled = seen["stalled"]
    assert (stalled["verification_error"], stalled["kind"]) == (True, "Workload"), stalled["where"]
    # a workdir the sandbox user cannot make (under root's /etc): the create fails, naming it
    workdir = seen["root_owned_workdir"]
    assert (workdir["verification_error"], workdir["reason"], workdir["kind"]) == (
        True,
        "WorkdirUnavailable",
        "Workload",
    ), workdir
    assert "workdir /etc/task cannot be made as uid 65532" in workdir["message"]
    assert seen["open_after"] == []  # every refused or failed create closed its episode
