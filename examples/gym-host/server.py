"""A sample Gym host: one HTTP server that scores a model's answer to a small coding task in a sandbox.

    python3 server.py                      serve on $PORT (8080): GET /health, POST /rollout
    python3 server.py post [SOLUTION.py]   post one rollout to this pod's own server; print the answer (with
                                           its HTTP status) and exit 1 unless it is 200

POST /rollout takes `{"task": "add", "solution": "<python source>"}` (both optional: the first task, and its
reference solution). Per request it opens an episode through NeMo Gym's own `AsyncSandbox` with the
gymsandbox provider (`{"gymsandbox": {}}`: the broker's URL and this host's lease come from the pod's
environment), uploads the solution and the task's tests, runs them, downloads their report, closes the
episode and answers `{"task", "reward", "return_code", "report", "seconds"}`: reward 1.0 when every test
passes, else 0.0. A rollout the sandbox could not run answers 503 with the failure's kind, so that a trainer
can mask it instead of scoring it.

Only the standard library, nemo-gym and gymsandbox's light client (no web framework).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from nemo_gym.sandbox import AsyncSandbox, SandboxCreateError, SandboxSpec

PROVIDER = {"gymsandbox": {}}
EPISODE_IMAGE = os.environ.get("GYM_EPISODE_IMAGE", "localhost/gymsandbox/swe-episode:1")
PORT = int(os.environ.get("PORT", "8080"))
MAX_BODY = 256 * 1024
WORKDIR = "/tmp/task"  # noqa: S108 - a directory of the episode sandbox, not of this host

# Each task: its tests (run as `python3 test_task.py` beside `solution.py`) and a reference solution.
TASKS: dict[str, dict[str, str]] = {
    "add": {
        "tests": (
            "import solution\n"
            "cases = [((1, 2), 3), ((-4, 4), 0), ((10**12, 1), 10**12 + 1)]\n"
            "failed = [c for c in cases if solution.add(*c[0]) != c[1]]\n"
            "open('report.txt', 'w').write(f'{len(cases) - len(failed)}/{len(cases)} passed\\n')\n"
            "raise SystemExit(1 if failed else 0)\n"
        ),
        "reference": "def add(a, b):\n    return a + b\n",
    },
    "reverse-words": {
        "tests": (
            "import solution\n"
            "cases = [('hello world', 'world hello'), ('a', 'a'), ('', '')]\n"
            "failed = [c for c in cases if solution.reverse_words(c[0]) != c[1]]\n"
            "open('report.txt', 'w').write(f'{len(cases) - len(failed)}/{len(cases)} passed\\n')\n"
            "raise SystemExit(1 if failed else 0)\n"
        ),
        "reference": "def reverse_words(text):\n    return ' '.join(reversed(text.split()))\n",
    },
}


async def rollout(task_name: str, solution: str | None) -> dict[str, Any]:
    task = TASKS[task_name]
    spec = SandboxSpec(
        image=EPISODE_IMAGE,
        ttl_s=300,
        ready_timeout_s=120,
        workdir=WORKDIR,
        files={f"{WORKDIR}/test_task.py": task["tests"]},
        metadata={"task": task_name},
        resources={"cpu": 0.5, "memory_mib": 256, "disk_gib": 1},
    )
    began = time.monotonic()
    async with AsyncSandbox(PROVIDER, spec) as sandbox:
        await sandbox.start()
        with tempfile.TemporaryDirectory() as scratch:
            answer = Path(scratch) / "solution.py"
            answer.write_text(solution if solution is not None else task["reference"])
            await sandbox.upload(answer, "solution.py")  # a file in (relative: to the workdir)
            run = await sandbox.exec("python3 test_task.py", timeout_s=60)
            report = None
            if run.error_type is None:
                await sandbox.download("report.txt", Path(scratch) / "report.txt")  # and a file out
                report = (Path(scratch) / "report.txt").read_text().strip()
    return {
        "task": task_name,
        "reward": 1.0 if run.return_code == 0 and run.error_type is None else 0.0,
        "return_code": run.return_code,
        "error_type": run.error_type,
        "report": report,
        "stderr": (run.stderr or "")[-2000:],
        "seconds": round(time.monotonic() - began, 3),
    }


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path == "/health":
            self._answer(200, {"status": "ok", "tasks": sorted(TASKS)})
        else:
            self._answer(404, {"error": f"no route {self.path}"})

    def do_POST(self) -> None:
        if self.path != "/rollout":
            self._answer(404, {"error": f"no route {self.path}"})
            return
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            self._answer(413, {"error": f"the body is over {MAX_BODY} bytes"})
            return
        try:
            request = json.loads(self.rfile.read(length) or b"{}")
            task = str(request.get("task") or next(iter(TASKS)))
            solution = request.get("solution")
        except (ValueError, AttributeError):
            self._answer(400, {"error": 'the body must be JSON: {"task": ..., "solution": ...}'})
            return
        if task not in TASKS:
            self._answer(400, {"error": f"no task {task!r}; tasks: {', '.join(sorted(TASKS))}"})
            return
        try:
            self._answer(200, asyncio.run(rollout(task, solution)))
        except SandboxCreateError as error:  # no sandbox: not the model's fault when the kind says so
            kind = str(getattr(error, "kind", "Infrastructure"))
            self._answer(503, {"error": str(error), "kind": kind, "reason": getattr(error, "reason", None)})

    def _answer(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        sys.stderr.write(f"{self.address_string()} {format % args}\n")


def post(solution_file: str | None) -> int:
    body: dict[str, Any] = {"task": "add"}
    if solution_file:
        body["solution"] = Path(solution_file).read_text()
    request = urllib.request.Request(
        f"http://127.0.0.1:{PORT}/rollout",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=300) as answer:  # noqa: S310 - this pod's own server
            status, body = answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        status, body = error.code, json.loads(error.read())
    print(json.dumps({"status": status, **body}))
    return 0 if status == 200 else 1


def main() -> int:
    if sys.argv[1:2] == ["post"]:
        return post(sys.argv[2] if len(sys.argv) > 2 else None)
    server = ThreadingHTTPServer(("0.0.0.0", PORT), Handler)  # noqa: S104 - the pod's own port
    print(f"gym host on :{PORT}, episodes of {EPISODE_IMAGE}", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
