"""An exec's environment and script reach the sandbox through stdin, never the exec URL (broker/command.py).
Run here by real
shells (dash, bash and busybox sh, as sandbox images have them) behind the broker's own deadline wrapper,
exactly as the exec stream starts them: whatever the argv, env and script hold arrives unchanged, and
with an environment or a script nothing of them is in the argv that the API server's URL (and audit
log) carries."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gymsandbox.broker.backend import DEADLINE_WRAPPER
from gymsandbox.broker.command import delivery
from gymsandbox.broker.models import ExecRequest

SHELLS = [s for s in ("dash", "bash", "busybox") if shutil.which(s)]
TRICKY = [
    "plain",
    "with 'single' and \"double\" quotes",
    "$(touch /tmp/should-not-exist) `id` ${HOME}",
    "back\\slash\\",
    "two\nlines\n",
    "\n",
    "  leading and trailing spaces  ",
    "tab\there",
    "gymsandbox-end-0123456789abcdef",  # looks like an end marker
    "ünïcödé ✓",
    "-n",
    "",
]
SHOW = "import json, os, sys; print(json.dumps([sys.argv[1:], os.environ.get('SECRET_VALUE'), os.getcwd()]))"


def run(shell: str, request: ExecRequest, cwd: Path) -> subprocess.CompletedProcess[bytes]:
    """As the exec stream runs it: `sh -c DEADLINE_WRAPPER sh <seconds> <delivery argv>`, stdin fed, with
    `shell` as the image's `sh` (a symlink first on PATH: bash and busybox then act as sh)."""
    bin_dir = cwd / f"bin-{shell}"
    bin_dir.mkdir(exist_ok=True)
    sh = bin_dir / "sh"
    if not sh.exists():
        sh.symlink_to(str(shutil.which(shell)))
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(cwd)}
    sent = delivery(request)
    argv = [str(sh), "-c", DEADLINE_WRAPPER, "sh", "10", *sent.argv]
    return subprocess.run(
        argv, input=sent.stdin, capture_output=True, cwd=cwd, env=env, timeout=30, check=False
    )


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("value", TRICKY, ids=range(len(TRICKY)))
def test_argv_env_and_workdir_arrive_unchanged(shell: str, value: str, tmp_path: Path) -> None:
    workdir = tmp_path / "work dir 'x'"
    workdir.mkdir()
    request = ExecRequest(
        argv=[sys.executable, "-c", SHOW, value, "second"],
        env={"SECRET_VALUE": value},
        workdir=str(workdir),
    )
    done = run(shell, request, tmp_path)
    assert done.returncode == 0, done.stderr
    argv, env, cwd = json.loads(done.stdout)
    assert (argv, env, cwd) == ([value, "second"], value, str(workdir))
    assert not Path("/tmp/should-not-exist").exists()


@pytest.mark.parametrize("shell", SHELLS)
def test_a_shell_script_runs_as_sh_c_with_stdin_empty(shell: str, tmp_path: Path) -> None:
    script = 'printf "%s|" "$GREETING" "$(pwd)"; cat; echo "read:$?"; exit 7'
    request = ExecRequest(shell=script, env={"GREETING": "hi there"}, workdir=str(tmp_path))
    done = run(shell, request, tmp_path)
    assert (done.returncode, done.stdout.decode()) == (7, f"hi there|{tmp_path}|read:0\n")


@pytest.mark.parametrize(
    ("fields", "code", "stderr"),
    [
        ({"argv": ["no-such-program-here"]}, 127, "not found"),
        ({"argv": ["true"], "workdir": "/no/such/dir"}, 2, "can't cd"),
        ({"shell": "exit 3"}, 3, ""),
    ],
)
def test_failures_keep_their_exit_codes(
    fields: dict[str, Any], code: int, stderr: str, tmp_path: Path
) -> None:
    done = run("dash", ExecRequest(**fields), tmp_path)
    assert done.returncode == code
    assert stderr in done.stderr.decode()


@pytest.mark.parametrize(
    "fields",
    [
        {"argv": ["curl", "-H", "Authorization: tok-9f8e7d6c5b4a"], "env": {"KEY": "tok-9f8e7d6c5b4a"}},
        {"shell": "curl -H 'Authorization: tok-9f8e7d6c5b4a'"},
        {"shell": "echo", "env": {"KEY": "tok-9f8e7d6c5b4a"}, "workdir": "/tmp/tok-9f8e7d6c5b4a"},
    ],
    ids=["argv-with-env", "script", "env-and-workdir"],
)
def test_with_an_environment_or_a_script_nothing_of_the_command_is_in_the_exec_argv(
    fields: dict[str, Any],
) -> None:
    sent = delivery(ExecRequest(**fields))
    assert not any("tok-9f8e7d6c5b4a" in arg for arg in sent.argv)
    assert sent.stdin is not None
    assert b"tok-9f8e7d6c5b4a" in sent.stdin


def test_a_stream_cut_before_its_end_marker_runs_nothing(tmp_path: Path) -> None:
    sent = delivery(ExecRequest(shell=f"touch {tmp_path / 'ran'}"))
    assert sent.stdin is not None
    cut = sent.stdin[: sent.stdin.rindex(b"gymsandbox-end-")]
    done = subprocess.run(
        ["dash", "-c", DEADLINE_WRAPPER, "sh", "10", *sent.argv], input=cut, capture_output=True, check=False
    )  # the inner `sh` is the machine's: dash
    assert done.returncode == 125
    assert b"did not arrive whole" in done.stderr
    assert not (tmp_path / "ran").exists()


def test_each_delivery_has_its_own_end_marker() -> None:
    request = ExecRequest(argv=["true"], env={"A": "b"})
    assert delivery(request).argv[-1] != delivery(request).argv[-1]


@pytest.mark.parametrize("shell", SHELLS)
def test_argv_alone_is_the_execs_own_argv_with_no_stdin(shell: str, tmp_path: Path) -> None:
    """No environment and no script: nothing to keep out of the URL, and an exec without stdin costs the API
    server less. The working directory still applies."""
    request = ExecRequest(argv=[sys.executable, "-c", SHOW, "shown"], workdir=str(tmp_path))
    sent = delivery(request)
    assert sent.stdin is None
    assert "shown" in sent.argv
    done = run(shell, request, tmp_path)
    assert json.loads(done.stdout) == [["shown"], None, str(tmp_path)]
