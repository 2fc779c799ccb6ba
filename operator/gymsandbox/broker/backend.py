"""The broker's only way to the cluster: read hosts and episodes, create and delete episodes, and run
commands in sandbox pods through the Kubernetes pods/exec API. Blocking; the app calls it in threads."""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.stream import stream
from kubernetes.stream.ws_client import ERROR_CHANNEL, STDIN_CHANNEL

from gymsandbox.desired.owner import Manifest
from gymsandbox.handlers.kube import EPISODE, GYMHOST, Kube

TRUNCATED = b"\n[output truncated]\n"
EXIT_DEADLINE = -1  # killed at its deadline
EXIT_UNREACHABLE = -2  # the sandbox could not be reached


@dataclass(frozen=True)
class ExecOutcome:
    exit_code: int
    stdout: bytes
    stderr: bytes
    truncated: bool
    timed_out: bool
    duration_seconds: float


class _Capped:
    """Collects output up to a byte limit, then keeps a marker instead of the rest."""

    def __init__(self, limit: int) -> None:
        self.limit, self.data, self.truncated = limit, bytearray(), False

    def add(self, chunk: bytes | str) -> None:
        raw = chunk.encode() if isinstance(chunk, str) else chunk
        room = self.limit - len(self.data)
        if len(raw) > room:
            self.data += raw[: max(room, 0)]
            self.truncated = True
        else:
            self.data += raw

    def value(self) -> bytes:
        return bytes(self.data) + (TRUNCATED if self.truncated else b"")


class KubeBackend:
    def __init__(self, api_client: client.ApiClient) -> None:
        self.kube = Kube(api_client)
        self.configuration = api_client.configuration

    def get_host(self, namespace: str, name: str) -> Manifest | None:
        return self.kube.get(GYMHOST, namespace, name)

    def get_episode(self, namespace: str, name: str) -> Manifest | None:
        return self.kube.get(EPISODE, namespace, name)

    def list_episodes(self, namespace: str, host: str) -> list[Manifest]:
        return self.kube.list(EPISODE, namespace, fields=f"spec.hostRef.name={host}")

    def create_episode(self, manifest: Mapping[str, Any]) -> tuple[Manifest, bool]:
        """Create it; (existing, False) when the name is taken (an idempotent retry)."""
        try:
            return self.kube.create(EPISODE, manifest), True
        except ApiException as e:
            if e.status != 409:
                raise
        existing = self.kube.get(EPISODE, manifest["metadata"]["namespace"], manifest["metadata"]["name"])
        if existing is None:
            raise ApiException(status=409, reason="Conflict")
        return existing, False

    def patch_episode(self, namespace: str, name: str, body: Mapping[str, Any]) -> Manifest:
        return self.kube.patch(EPISODE, namespace, name, body)

    def delete_episode(self, namespace: str, name: str) -> bool:
        return self.kube.delete(EPISODE, namespace, name)

    def exec(
        self,
        namespace: str,
        pod: str,
        container: str,
        argv: list[str],
        *,
        timeout: float,
        max_output: int,
        stdin: bytes | None = None,
    ) -> ExecOutcome:
        """Run argv in the container; never raises for the command's own failure, deadline or reachability.

        The deadline holds on both sides: here the call returns when it passes (exit -1), and inside the
        sandbox `timeout` kills the command a second later, since a closed exec stream does not stop it.
        """
        argv = ["timeout", "-s", "KILL", str(math.ceil(timeout) + 1), *argv]
        # kubernetes.stream swaps call_api on the client it is given while it connects: not thread-safe.
        # Each exec gets a private client, so concurrent execs and plain reads never see each other's swap.
        with client.ApiClient(self.configuration) as private:
            return _run_exec(
                client.CoreV1Api(private),
                namespace,
                pod,
                container,
                argv,
                stdin=stdin,
                deadline=time.monotonic() + timeout,
                max_output=max_output,
            )


def _run_exec(
    core: client.CoreV1Api,
    namespace: str,
    pod: str,
    container: str,
    argv: list[str],
    *,
    stdin: bytes | None,
    deadline: float,
    max_output: int,
) -> ExecOutcome:
    started = time.monotonic()
    stdout, stderr = _Capped(max_output), _Capped(max_output)
    try:
        ws = stream(
            core.connect_get_namespaced_pod_exec,
            pod,
            namespace,
            command=argv,
            container=container,
            stdin=stdin is not None,
            stdout=True,
            stderr=True,
            tty=False,
            _preload_content=False,
            binary=True,
        )
    except (ApiException, OSError, ValueError) as e:
        return ExecOutcome(
            EXIT_UNREACHABLE,
            b"",
            str(getattr(e, "reason", e)).encode(),
            False,
            False,
            time.monotonic() - started,
        )
    timed_out = False
    try:
        if stdin is not None:
            ws.write_channel(STDIN_CHANNEL, stdin)
            ws.close_channel(STDIN_CHANNEL)  # end of input (channel protocol v5)
        while ws.is_open():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            ws.update(timeout=min(remaining, 0.5))
            if ws.peek_stdout():
                stdout.add(ws.read_stdout())
            if ws.peek_stderr():
                stderr.add(ws.read_stderr())
        code = EXIT_DEADLINE if timed_out else _returncode(ws)
    except (OSError, ValueError) as e:
        stderr.add(f"connection to the sandbox failed: {e}")
        code = EXIT_UNREACHABLE
    finally:
        ws.close()
    return ExecOutcome(
        code,
        stdout.value(),
        stderr.value(),
        stdout.truncated or stderr.truncated,
        timed_out,
        time.monotonic() - started,
    )


def _returncode(ws: Any) -> int:
    """The exit code from the exec status: a Success, an ExitCode cause (a kubelet), or "exit status N" in
    the message (kwok, which wraps the process error)."""
    raw = ws.read_channel(ERROR_CHANNEL)
    try:
        status = json.loads(raw) if raw else {}
    except ValueError:
        return EXIT_UNREACHABLE
    if status.get("status") == "Success":
        return 0
    for cause in (status.get("details") or {}).get("causes") or []:
        if cause.get("reason") == "ExitCode" and str(cause.get("message", "")).isdigit():
            return int(cause["message"])
    found = re.search(r"exit status (\d+)", str(status.get("message", "")))
    return int(found.group(1)) if found else EXIT_UNREACHABLE
