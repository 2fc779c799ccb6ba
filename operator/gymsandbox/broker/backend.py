"""The broker's only way to the cluster: read hosts and episodes, create and delete episodes, and run
commands in sandbox pods through the Kubernetes pods/exec API. Blocking; the app calls it in threads."""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.stream import ws_client
from kubernetes.stream.ws_client import ERROR_CHANNEL, STDIN_CHANNEL
from websocket import WebSocketException

from gymsandbox.broker.recent import Recent
from gymsandbox.desired.owner import Manifest
from gymsandbox.kube.client import EPISODE, GYMHOST, POD, Kind, Kube

TRUNCATED = b"\n[output truncated]\n"
EXIT_DEADLINE = -1  # killed at its deadline
EXIT_UNREACHABLE = -2  # the sandbox could not be reached
STDIN_FRAME_BYTES = 1024 * 1024
HANDSHAKE_ATTEMPTS, HANDSHAKE_RETRY_SECONDS = 3, 0.2

# Runs "$@" (stdin passed through) and, if it outlives $1 seconds, kills it and every process it started,
# deepest first, each stopped before its children are looked up so that none forks away meanwhile. A closed
# exec stream stops nothing in the sandbox, and `timeout` would kill only the direct child (busybox) or a
# process group that, inside a container, is not the command's own. It needs only `sh`, `sleep` and /proc;
# a missing `sleep` is reported, never silently leaves the command without a deadline. A process that exits
# during the /proc scan must not show in the command's stderr: stderr is silenced before the file is opened.
DEADLINE_WRAPPER = r"""
command -v sleep >/dev/null 2>&1 || { echo "gymsandbox-broker: the sandbox has no sleep" >&2; exit 127; }
children() {
  for status in /proc/[0-9]*/status; do
    while IFS=': 	' read -r key value; do
      [ "$key" = PPid ] || continue
      [ "$value" = "$1" ] && { pid=${status#/proc/}; echo "${pid%/status}"; }
      break
    done 2>/dev/null < "$status"
  done
}
kill_tree() {
  kill -STOP "$1" 2>/dev/null
  for child in $(children "$1"); do kill_tree "$child"; done
  kill -KILL "$1" 2>/dev/null
}
seconds=$1; shift
exec 3<&0
"$@" <&3 3<&- &
command=$!
exec 3<&-
( sleep "$seconds" && kill_tree "$command" ) </dev/null >/dev/null 2>&1 &
watchdog=$!
wait "$command"; code=$?
kill_tree "$watchdog"; wait "$watchdog" 2>/dev/null
exit "$code"
"""
# The message of an exec the runtime could not start: runc's `exec: "sh": executable file not found in $PATH`,
# crun's "executable file `sh` not found in $PATH", gVisor's `error finding executable "sh" in PATH`. The
# last match counts: gVisor's message quotes the whole command line first.
MISSING_EXECUTABLE = re.compile(
    r'exec: "([^"]+)": executable file not found|executable file `([^`]+)` not found'
    r'|error finding executable "([^"]+)" in PATH'
)
MISSING_TOOL = re.compile(r"gymsandbox-broker: the sandbox has no (\S+)")
NOT_SENT = re.compile(r"error (dialing backend|sending request)")


@dataclass(frozen=True)
class ExecOutcome:
    exit_code: int
    stdout: bytes
    stderr: bytes
    truncated: bool
    timed_out: bool
    duration_seconds: float
    missing_tool: str | None = None  # a program the broker runs in the sandbox, absent from its image


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
    """Reads of hosts, episodes and pods may come from `recent` (broker/recent.py: at most a second old,
    one GET for concurrent calls); `fresh=True` reads the API server, as every refusal must."""

    def __init__(self, api_client: client.ApiClient, recent: Recent | None = None) -> None:
        self.kube = Kube(api_client)
        self.configuration = api_client.configuration
        self.recent = recent or Recent()

    def _read(self, kind: Kind, namespace: str, name: str, fresh: bool) -> Manifest | None:
        return self.recent.read(
            (kind.plural, namespace, name), lambda: self.kube.get(kind, namespace, name), fresh=fresh
        )

    def _wrote(self, kind: Kind, obj: Manifest) -> Manifest:
        self.recent.put((kind.plural, obj["metadata"]["namespace"], obj["metadata"]["name"]), obj)
        return obj

    def get_host(self, namespace: str, name: str, *, fresh: bool = False) -> Manifest | None:
        return self._read(GYMHOST, namespace, name, fresh)

    def get_episode(self, namespace: str, name: str, *, fresh: bool = False) -> Manifest | None:
        return self._read(EPISODE, namespace, name, fresh)

    def list_episodes(self, namespace: str, host: str) -> list[Manifest]:
        return self.kube.list(EPISODE, namespace, fields=f"spec.hostRef.name={host}")

    def create_episode(self, manifest: Mapping[str, Any]) -> tuple[Manifest, bool]:
        """Create it; (existing, False) when the name is taken (an idempotent retry)."""
        try:
            return self._wrote(EPISODE, self.kube.create(EPISODE, manifest)), True
        except ApiException as e:
            if e.status != 409:
                raise
        meta = manifest["metadata"]
        existing = self.get_episode(meta["namespace"], meta["name"], fresh=True)
        if existing is None:
            raise ApiException(status=409, reason="Conflict")
        return existing, False

    def patch_episode(self, namespace: str, name: str, body: Mapping[str, Any]) -> Manifest:
        return self._wrote(EPISODE, self.kube.patch(EPISODE, namespace, name, body))

    def record_operate_leases(self, episode: Mapping[str, Any], leases: Mapping[str, int]) -> Manifest | None:
        """Write status.operateLeases if the episode is still as read; None when it changed meanwhile."""
        meta = episode["metadata"]
        try:
            written = self.kube.patch_status(
                EPISODE,
                meta["namespace"],
                meta["name"],
                {"operateLeases": dict(leases)},
                resource_version=meta["resourceVersion"],
            )
        except ApiException as e:
            if e.status == 409:
                self.recent.forget((EPISODE.plural, meta["namespace"], meta["name"]))
                return None
            raise
        return self._wrote(EPISODE, written)

    def delete_episode(self, namespace: str, name: str) -> bool:
        try:
            return self.kube.delete(EPISODE, namespace, name)
        finally:
            self.recent.forget((EPISODE.plural, namespace, name))  # now being deleted, or gone

    def get_pod(self, namespace: str, name: str, *, fresh: bool = False) -> Manifest | None:
        return self._read(POD, namespace, name, fresh)

    def pod_went_away(self, namespace: str, name: str, since: float) -> bool:
        """Whether the pod is gone, being deleted, finished, or replaced by a namesake created after `since`
        (a Unix time): then a command killed in it met the sandbox's failure, not its own."""
        pod = self.kube.get(POD, namespace, name)
        if pod is None:
            return True
        meta, phase = pod["metadata"], (pod.get("status") or {}).get("phase")
        created = datetime.fromisoformat(
            str(meta.get("creationTimestamp")).replace("Z", "+00:00")
        ).timestamp()
        return bool(meta.get("deletionTimestamp")) or phase in ("Succeeded", "Failed") or created > int(since)

    def exec(
        self,
        namespace: str,
        pod: str,
        container: str,
        argv: list[str],
        *,
        timeout: float,
        max_output: int,
        max_error: int | None = None,
        stdin: bytes | None = None,
    ) -> ExecOutcome:
        """Run argv in the container; never raises for the command's own failure, deadline or reachability.
        At most `max_output` bytes of stdout and `max_error` (by default as many) of stderr are kept.

        The deadline holds on both sides: here the call returns when it passes (exit -1), and inside the
        sandbox DEADLINE_WRAPPER kills the command and its descendants a second later.
        """
        argv = ["sh", "-c", DEADLINE_WRAPPER, "sh", str(math.ceil(timeout) + 1), *argv]
        return _run_exec(
            ExecTarget(self.kube, self.configuration, namespace, pod, container),
            argv,
            stdin=stdin,
            deadline=time.monotonic() + timeout,
            max_output=max_output,
            max_error=max_output if max_error is None else max_error,
        )


@dataclass(frozen=True)
class ExecTarget:
    """A container to open exec streams into, through the API server's pods/exec."""

    kube: Kube  # its pooled requests' address and headers (the token among them) serve the streams too
    configuration: client.Configuration  # TLS settings of the websocket
    namespace: str
    pod: str
    container: str

    def open(self, argv: list[str], *, interactive: bool) -> Any:
        """The exec stream, opened straight from the shared configuration: the client's stream() would need an
        ApiClient of its own per call (it swaps a method on the one it is given), some 3 ms each."""
        host, headers = self.kube.address()
        query = [("command", arg) for arg in argv] + [
            ("container", self.container),
            ("stdin", "true" if interactive else "false"),
            ("stdout", "true"),
            ("stderr", "true"),
            ("tty", "false"),
        ]
        ws = ws_client.websocket_call(  # type: ignore[no-untyped-call]
            self.configuration,
            "GET",
            host + POD.path(self.namespace, self.pod) + "/exec",
            headers=headers,
            query_params=query,
            _preload_content=False,
            binary=True,
            capture_all=False,  # else it keeps a second copy of all the output, for read_all()
        )
        ws._channels = ChannelBuffers()  # before the first update(): nothing has been read yet
        return ws


class ChannelBuffers(dict[int, bytearray]):
    """The exec stream's per-channel buffers, each one growing bytearray. The client's update() reads every
    frame already waiting before it returns, appending each to its channel's buffer (`buffers[c] += data`):
    with bytes, each append copies all that came before, so a 50 MiB read that outpaces the broker took
    some 27 s of copying under the GIL; a bytearray grows in place."""

    def __setitem__(self, channel: int, data: bytes | bytearray) -> None:
        super().__setitem__(channel, data if isinstance(data, bytearray) else bytearray(data))


def _run_exec(
    target: ExecTarget,
    argv: list[str],
    *,
    stdin: bytes | None,
    deadline: float,
    max_output: int,
    max_error: int,
) -> ExecOutcome:
    started = time.monotonic()
    for attempt in range(1, HANDSHAKE_ATTEMPTS + 1):
        outcome, status = _exec_once(
            target,
            argv,
            stdin=stdin,
            deadline=deadline,
            sizes=(max_output, max_error),
        )
        if not (never_sent(status, outcome) and attempt < HANDSHAKE_ATTEMPTS):
            break
        if time.monotonic() + HANDSHAKE_RETRY_SECONDS >= deadline:
            break
        time.sleep(HANDSHAKE_RETRY_SECONDS)  # nothing ran: the API server never reached the kubelet
    return replace(outcome, duration_seconds=time.monotonic() - started)


def never_sent(status: Mapping[str, Any], outcome: ExecOutcome) -> bool:
    """Whether the API server answered that it could not reach the pod's kubelet: it failed to dial it or
    to write the request (apimachinery's upgrade proxy), so the command never started and may be tried
    again. Seen with 1,000 execs at once on the local control plane."""
    return (
        outcome.exit_code == EXIT_UNREACHABLE
        and status.get("status") == "Failure"
        and NOT_SENT.search(str(status.get("message", ""))) is not None
        and not outcome.stdout
    )


def _exec_once(
    target: ExecTarget,
    argv: list[str],
    *,
    stdin: bytes | None,
    deadline: float,
    sizes: tuple[int, int],
) -> tuple[ExecOutcome, dict[str, Any]]:
    """One exec stream: its outcome and the exec status the API server sent (empty if none)."""
    started = time.monotonic()
    stdout, stderr = _Capped(sizes[0]), _Capped(sizes[1])
    try:
        ws = _connect(target, argv, interactive=stdin is not None, deadline=deadline)
    except (ApiException, OSError, ValueError, WebSocketException) as e:
        reason = str(getattr(e, "reason", e)).encode()
        return ExecOutcome(EXIT_UNREACHABLE, b"", reason, False, False, time.monotonic() - started), {}
    timed_out, status = False, {}
    try:
        if stdin is not None:
            # In frames well under the 32 MiB a websocket message may carry on the kubelet's side (a larger
            # one closes the stream), so a transfer of any allowed size goes through.
            for start in range(0, len(stdin), STDIN_FRAME_BYTES):
                ws.write_channel(STDIN_CHANNEL, stdin[start : start + STDIN_FRAME_BYTES])
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
        if not timed_out:
            _drain(ws, stdout, stderr)
            status = _exec_status(ws)
        code = EXIT_DEADLINE if timed_out else _returncode(status)
    except (OSError, ValueError, WebSocketException) as e:
        stderr.add(f"connection to the sandbox failed: {type(e).__name__}: {e}")
        code = EXIT_UNREACHABLE
    finally:
        ws.close()
    missing = missing_tool(status, bytes(stderr.data)) if code in (127, EXIT_UNREACHABLE) else None
    if code == EXIT_UNREACHABLE and status.get("status") == "Failure":
        # The runtime's reason, shortened: gVisor's repeats the whole command line before it.
        stderr.add(f"the sandbox refused the command: ...{str(status.get('message', ''))[-300:]}")
    outcome = ExecOutcome(
        code,
        stdout.value(),
        stderr.value(),
        stdout.truncated or stderr.truncated,
        timed_out,
        time.monotonic() - started,
        missing,
    )
    return outcome, status


def _connect(target: ExecTarget, argv: list[str], *, interactive: bool, deadline: float) -> Any:
    """The exec stream. A refused upgrade ran nothing in the sandbox, so it is tried again: the API server's
    connection to a kubelet can be a stale one (answered "use of closed network connection")."""
    for attempt in range(1, HANDSHAKE_ATTEMPTS + 1):
        try:
            return target.open(argv, interactive=interactive)
        except (ApiException, OSError, ValueError, WebSocketException):
            if attempt == HANDSHAKE_ATTEMPTS or time.monotonic() + HANDSHAKE_RETRY_SECONDS >= deadline:
                raise
            time.sleep(HANDSHAKE_RETRY_SECONDS)
    raise AssertionError("unreachable")  # the loop returns or raises


def _drain(ws: Any, stdout: _Capped, stderr: _Capped) -> None:
    """What arrived with the stream's last frames, after the loop saw it close."""
    while ws.peek_stdout():
        stdout.add(ws.read_stdout())
    while ws.peek_stderr():
        stderr.add(ws.read_stderr())


def _exec_status(ws: Any) -> dict[str, Any]:
    raw = ws.read_channel(ERROR_CHANNEL)
    try:
        status = json.loads(raw) if raw else {}
    except ValueError:
        return {"message": "unreadable exec status"}
    return status if isinstance(status, dict) else {}


def missing_tool(status: Mapping[str, Any], stderr: bytes) -> str | None:
    """The program the broker needed and the sandbox image lacks, from the runtime's refusal to start it
    (sh) or from DEADLINE_WRAPPER's own check (sleep); None for anything else."""
    refusals = list(MISSING_EXECUTABLE.finditer(str(status.get("message", ""))))
    found = refusals[-1] if refusals else MISSING_TOOL.search(stderr.decode(errors="replace"))
    return next((group for group in found.groups() if group), None) if found else None


def _returncode(status: Mapping[str, Any]) -> int:
    """The exit code from the exec status: a Success, an ExitCode cause (a kubelet), or "exit status N" in
    the message (kwok, which wraps the process error)."""
    if not status:
        return EXIT_UNREACHABLE
    if status.get("status") == "Success":
        return 0
    for cause in (status.get("details") or {}).get("causes") or []:
        if cause.get("reason") == "ExitCode" and str(cause.get("message", "")).isdigit():
            return int(cause["message"])
    found = re.search(r"exit status (\d+)", str(status.get("message", "")))
    return int(found.group(1)) if found else EXIT_UNREACHABLE
