"""Runs inside hack/nemo_gym.py's Python 3.12 virtualenv, against nemo-gym itself: one scenario of NeMo Gym's
sandbox API over the gymsandbox provider, found by its entry point. Prints what it saw as one JSON object;
tests/node/test_nemo_gym.py asserts on it. The broker's URL and the host's token file come from the
environment, as in a GymHost pod.

    python nemo_gym_driver.py SCENARIO '{"image": ..., ...}'
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
import traceback
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from nemo_gym.sandbox import (
    AsyncSandbox,
    Sandbox,
    SandboxCreateError,
    SandboxCreateVerificationError,
    SandboxSpec,
    create_provider,
)

from gymsandbox.client import BrokerClient

CONFIG = {"gymsandbox": {}}  # the whole switch, as a NeMo Gym config gives it
HEAVY = ("kopf", "kubernetes", "fastapi", "starlette", "uvicorn", "prometheus_client", "yaml")

AFTER_DEADLINE = (
    "for i in 1 2 3 4 5 6 7 8 9 10; do ps -o args | grep -q '^sleep 30$' || { echo gone; exit 0; }; "
    "sleep 0.5; done; echo running"
)

Scenario = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


def result(outcome: Any) -> dict[str, Any]:
    return {
        "stdout": outcome.stdout,
        "stderr": outcome.stderr,
        "return_code": outcome.return_code,
        "error_type": outcome.error_type,
    }


def refusal(error: BaseException) -> dict[str, Any]:
    return {
        "type": type(error).__name__,
        "create_error": isinstance(error, SandboxCreateError),
        "verification_error": isinstance(error, SandboxCreateVerificationError),
        "reason": getattr(error, "reason", None),
        "kind": str(getattr(getattr(error, "kind", None), "value", "")),
        "episode_id": getattr(error, "episode_id", None),
        "message": str(error),
        "where": "".join(traceback.format_exception(error)[-3:]),
    }


def open_episodes() -> list[str]:
    with BrokerClient.from_environment() as broker:
        return [e.id for e in broker.list_episodes().episodes]


async def lifecycle(args: dict[str, Any]) -> dict[str, Any]:
    """Start with files, exec with cwd, env and a deadline, move files both ways, status, stop twice."""
    seen: dict[str, Any] = {}
    provider = create_provider(CONFIG)
    seen["provider"] = [type(provider).__module__, type(provider).__name__, provider.name]
    await provider.aclose()
    spec = SandboxSpec(
        image=args["image"],
        ttl_s=600,
        ready_timeout_s=120,
        workdir="/tmp",
        env={"TASK": "swe-1"},
        files={"/tmp/task/prompt.txt": "fix the bug\n", "notes.txt": "relative to the workdir\n"},
        metadata={"instance_id": "django__django-11099"},
        resources={"cpu": 0.2, "memory_mib": 256, "disk_gib": 1},
    )
    sandbox = AsyncSandbox(CONFIG, spec)
    started = time.monotonic()
    await sandbox.start()
    seen["start_seconds"] = time.monotonic() - started
    first = await sandbox.exec("true")
    seen["start_to_first_exec_seconds"] = time.monotonic() - started
    seen["first"] = result(first)
    seen["status"] = (await sandbox.status()).value
    seen["files"] = result(await sandbox.exec("cat /tmp/task/prompt.txt notes.txt; pwd"))
    seen["env_cwd"] = result(
        await sandbox.exec('echo "$TASK $EXTRA $(pwd)"', cwd="/tmp/task", env={"EXTRA": "x"})
    )
    seen["exit_code"] = result(await sandbox.exec("echo out; echo err >&2; exit 3"))
    seen["user_uid"] = result(await sandbox.exec("id -u", user=65532))
    try:
        await sandbox.exec("id -u", user="root")
        seen["user_root"] = None
    except Exception as error:
        seen["user_root"] = refusal(error)
    began = time.monotonic()
    seen["deadline"] = result(await sandbox.exec("echo started; sleep 30", timeout_s=2))
    seen["deadline_seconds"] = time.monotonic() - began
    # the broker's watchdog kills what the command started a second after the deadline
    seen["after_deadline"] = result(await sandbox.exec(AFTER_DEADLINE))
    with tempfile.TemporaryDirectory() as scratch:
        local = Path(scratch) / "in.bin"
        payload = bytes(range(256)) * 64
        local.write_bytes(payload)
        await sandbox.upload(local, "/tmp/data/in.bin")
        seen["uploaded"] = result(await sandbox.exec("wc -c < /tmp/data/in.bin"))
        await sandbox.download("/tmp/data/in.bin", Path(scratch) / "back" / "out.bin")
        seen["round_trip"] = (Path(scratch) / "back" / "out.bin").read_bytes() == payload
    seen["open_before_stop"] = len(open_episodes())
    await sandbox.stop()
    await sandbox.stop()
    seen["status_after_stop"] = (await sandbox.status()).value
    seen["open_after_stop"] = len(open_episodes())
    seen["heavy_modules"] = sorted({m.split(".")[0] for m in sys.modules} & set(HEAVY))
    return seen


async def blocking(args: dict[str, Any]) -> dict[str, Any]:
    """The same through NeMo Gym's blocking `Sandbox` (its own event-loop thread)."""
    seen: dict[str, Any] = {}

    def run() -> None:
        spec = SandboxSpec(image=args["image"], ready_timeout_s=120, workdir="/tmp", files={"a.txt": "A\n"})
        with Sandbox(CONFIG, spec) as sandbox:
            sandbox.start()
            seen["status"] = sandbox.status().value
            seen["cat"] = result(sandbox.exec("cat a.txt"))
            with tempfile.TemporaryDirectory() as scratch:
                sandbox.download("a.txt", Path(scratch) / "a.txt")
                seen["downloaded"] = (Path(scratch) / "a.txt").read_text()
            sandbox.stop()
            sandbox.stop()
            seen["status_after_stop"] = sandbox.status().value

    await asyncio.to_thread(run)
    seen["open_after_stop"] = len(open_episodes())
    return seen


async def reaped(args: dict[str, Any]) -> dict[str, Any]:
    """An episode whose TTL ran out while the sandbox was open: status says stopped, exec says the sandbox
    is gone, and stop() (twice) raises nothing."""
    seen: dict[str, Any] = {}
    sandbox = AsyncSandbox(CONFIG, SandboxSpec(image=args["image"], ttl_s=args["ttl_s"], ready_timeout_s=120))
    await sandbox.start()
    deadline = time.monotonic() + args["wait_s"]
    while (await sandbox.status()).value != "stopped" and time.monotonic() < deadline:
        await asyncio.sleep(1)
    seen["status"] = (await sandbox.status()).value
    seen["exec"] = result(await sandbox.exec("true"))
    await sandbox.stop()
    await sandbox.stop()
    seen["stopped"] = True
    return seen


async def refused(args: dict[str, Any]) -> dict[str, Any]:
    """Creations that policy or the provider refuse: each a SandboxCreateError naming why; nothing is left."""
    seen: dict[str, Any] = {}
    specs = {
        "off_list": SandboxSpec(image=args["off_list_image"]),
        "gpu_type": SandboxSpec(image=args["image"], resources={"gpu": 1, "gpu_type": "H100"}),
        "bad_label": SandboxSpec(image=args["image"], metadata={"instance": "not a label value!"}),
        "unknown_option": SandboxSpec(image=args["image"], provider_options={"privileged": True}),
        "no_image": SandboxSpec(),
        "not_ready_in_time": SandboxSpec(image=args["image"], ready_timeout_s=0.05),
        "stalled": SandboxSpec(image=args["image"], entrypoint=["/no/such/program"], ready_timeout_s=120),
        "root_owned_workdir": SandboxSpec(image=args["image"], workdir="/etc/task", ready_timeout_s=120),
    }
    for name, spec in specs.items():
        sandbox = AsyncSandbox(CONFIG, spec)
        try:
            await sandbox.start()
            seen[name] = None
            await sandbox.stop()
        except Exception as error:
            seen[name] = refusal(error)
    seen["open_after"] = open_episodes()
    return seen


SCENARIOS: dict[str, Scenario] = {
    "lifecycle": lifecycle,
    "blocking": blocking,
    "reaped": reaped,
    "refused": refused,
}


def main() -> None:
    scenario, args = SCENARIOS[sys.argv[1]], json.loads(sys.argv[2])
    print(json.dumps(asyncio.run(scenario(args))))


if __name__ == "__main__":
    main()
