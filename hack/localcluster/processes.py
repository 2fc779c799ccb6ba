"""Processes the local cluster starts: each in its own session (they outlive the command that started them),
recorded with its PID and command line in a state file, waited on with a bounded check, and stopped by its
own PID only (never by name)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hack.localcluster.console import logger

log = logger("cluster")


def free_port() -> int:
    """A loopback TCP port free now, for a process about to listen on it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# Started processes outlive this script; holding their Popen objects keeps a long-lived caller (the test
# session) from warning about them being garbage-collected while they run.
_STARTED: list[subprocess.Popen[bytes]] = []


def start(name: str, argv: list[str], logs: Path, env: dict[str, str] | None = None) -> int:
    """Start a process in its own session (it outlives this script); returns its PID."""
    with (logs / f"{name}.log").open("ab") as log_file:
        proc = subprocess.Popen(
            argv,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=env,
        )
    _STARTED.append(proc)
    log(f"started {name} (pid {proc.pid})")
    return proc.pid


class Processes:
    """Processes started by name and recorded in a state file as they start: each one's PID and how it was
    started, so that `restart` can start any of them again as it was (the chaos tier kills and restarts
    them)."""

    def __init__(self, state_file: Path, logs: Path, initial: dict[str, object] | None = None) -> None:
        self.state_file, self.logs = state_file, logs
        if initial is None:
            initial = json.loads(state_file.read_text()) if state_file.exists() else {}
        self.state: dict[str, Any] = {"pids": {}, "commands": {}, **initial}

    @property
    def pids(self) -> dict[str, int]:
        return self.state["pids"]  # type: ignore[no-any-return]

    def save(self) -> None:
        self.state_file.write_text(json.dumps(self.state, indent=2))

    def start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> int:
        pid = start(name, argv, self.logs, env=env)
        self.pids[name] = pid
        self.state["commands"][name] = {"argv": argv, "env": env}
        self.save()
        return pid

    def restart(self, name: str) -> int:
        """Stop `name` if it still runs (or reap it if it was killed), and start it again as it was."""
        stop_pid(name, self.pids[name])
        command = self.state["commands"][name]
        return self.start(name, command["argv"], command["env"])

    def wait(self, what: str, check: Callable[[], object], timeout: float) -> None:
        wait_until(what, check, timeout, self.pids)


def wait_until(what: str, check: Callable[[], object], timeout: float, pids: dict[str, int]) -> None:
    """Until check() is true; raises when one of `pids` exits first (its log says why) or at the timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for name, pid in pids.items():
            if not alive(pid):
                raise RuntimeError(f"{name} (pid {pid}) exited while waiting for {what}; see its log")
        if check():
            return
        time.sleep(0.25)
    raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is not alive; it only waits for its parent to reap it.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def stop_pid(name: str, pid: int, grace: float = 10) -> None:
    if not alive(pid):
        reap(pid, grace)
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if alive(pid):
        os.kill(pid, signal.SIGKILL)
    # What it left running in its process group too: kwok's exec commands outlive a client that gave up.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    reap(pid, grace)
    log(f"stopped {name} (pid {pid})")


def reap(pid: int, timeout: float) -> None:
    """Wait for our own child, so it leaves no zombie (a child another process killed is one until then)."""
    for proc in _STARTED:
        if proc.pid == pid:
            proc.wait(timeout=timeout)
