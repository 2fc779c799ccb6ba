"""Attack on what an exec leaves behind: the API server records each `pods/exec` request's URL in its audit
log (at Metadata level, the level most clusters keep, often shipped where many can read it), and the URL
used to hold the whole command: argv, `env NAME=value` and the shell script, a trainer's API key among
them. Now the URL holds only the broker's fixed loader and a random end marker; the command goes through
the stream's stdin (broker/command.py). The local control plane keeps an audit log of exec requests for
this test."""

from __future__ import annotations

import json
import secrets

import httpx
import pytest
from kubernetes import client

from tests.security.broker_calls import bearer, ready_episode
from tests.support.cluster import Cluster
from tests.support.episodes import Episodes
from tests.support.gymhosts import eventually

pytestmark = pytest.mark.integration


def test_exec_argv_env_and_script_stay_out_of_the_api_servers_audit_log(
    http: httpx.Client, host_token: str, cluster: Cluster, api_client: client.ApiClient, namespace: str
) -> None:
    if not cluster.local:
        pytest.skip("the local control plane's audit log is what shows what an exec URL carried")
    audit_log = cluster.paths.audit_log
    assert audit_log.exists(), f"the local API server keeps no audit log at {audit_log}"
    episode = ready_episode(http, host_token, Episodes(api_client, namespace), kwok_exec=True)
    secret = {part: f"{part}-{secrets.token_hex(8)}" for part in ("argv", "env", "script")}
    calls = [
        {"argv": ["echo", secret["argv"]], "env": {"TRAINER_API_KEY": secret["env"]}},
        {"shell": f'echo "{secret["script"]}" "$TRAINER_API_KEY"', "env": {"TRAINER_API_KEY": secret["env"]}},
    ]
    expected = [f"{secret['argv']}\n", f"{secret['script']} {secret['env']}\n"]
    for body, stdout in zip(calls, expected, strict=True):
        answer = http.post(f"/v1/episodes/{episode}/exec", json=body, headers=bearer(host_token))
        assert answer.status_code == 200, answer.text
        assert (answer.json()["exitCode"], answer.json()["stdout"]) == (0, stdout), answer.text

    pod_exec = f"/api/v1/namespaces/{namespace}/pods/{episode}-sandbox/exec"

    def recorded() -> list[dict[str, object]]:
        lines = audit_log.read_text(errors="replace").splitlines()
        events = [json.loads(line) for line in lines if pod_exec in line]
        return [e for e in events if e.get("stage") == "ResponseComplete"]

    # The two execs (and the one that checked kwok serves the pod) are in the log: the test reads the
    # right file, and it records exec URLs.
    eventually(lambda: len(recorded()) >= len(calls), timeout=10, what="the execs in the audit log")
    text = audit_log.read_text(errors="replace")
    for part, value in secret.items():
        assert value not in text, f"the exec's {part} is in the API server's audit log"
