"""A start-up failure is one line saying what is wrong and what to do, never a traceback: no kubeconfig, an
unreadable or malformed one, an API server that does not answer; and the broker reads its policy before it
touches the cluster. Run as a user runs the command (a subprocess), with no cluster at all."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import pytest

from tests.support.processes import gymsandbox_cli

POLICY = Path(__file__).resolve().parents[2] / "examples" / "policy.yaml"


def run(*args: str, kubeconfig: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
    env.update(KUBECONFIG=kubeconfig, HOME=str(tmp_path))
    return subprocess.run(
        [gymsandbox_cli(), *args], capture_output=True, text=True, env=env, timeout=60, check=False
    )


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def kubeconfig_for(server: str) -> str:
    return f"""apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "{server}", insecure-skip-tls-verify: true}}}}]
users: [{{name: u, user: {{token: not-a-real-token}}}}]
contexts: [{{name: x, context: {{cluster: c, user: u}}}}]
current-context: x
"""


@pytest.mark.parametrize(
    ("kubeconfig", "says"),
    [
        (None, "no kubeconfig: {path} does not exist; set KUBECONFIG"),
        ("garbage: [", "is not valid YAML (line 1)"),
        ("apiVersion: v1\nkind: Config\n", "cannot be used: Invalid kube-config file"),
        (kubeconfig_for(f"https://127.0.0.1:{closed_port()}"), "does not answer (MaxRetryError)"),
    ],
    ids=["missing", "malformed", "empty", "unreachable"],
)
@pytest.mark.parametrize("command", ["operator", "broker"])
def test_a_connection_that_cannot_be_made_is_one_line_naming_it(
    command: str, kubeconfig: str | None, says: str, tmp_path: Path
) -> None:
    path = tmp_path / "kubeconfig"
    if kubeconfig is not None:
        path.write_text(kubeconfig)
    result = run(command, "--policy", str(POLICY), kubeconfig=str(path), tmp_path=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"gymsandbox {command}: refusing to start: ")
    assert says.format(path=path) in lines[0]


def test_the_broker_refuses_a_bad_policy_before_it_looks_for_a_cluster(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("caps:\n  maxCpu: eight\n")
    result = run("broker", "--policy", str(policy), kubeconfig=str(tmp_path / "none"), tmp_path=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "maxCpu" in result.stderr
    assert "kubeconfig" not in result.stderr  # the policy is read first


def test_version_is_a_flag_too() -> None:
    result = subprocess.run([gymsandbox_cli(), "--version"], capture_output=True, text=True, check=False)
    assert result.returncode == 0
    assert result.stdout.startswith("gymsandbox ")
