"""The broker client is importable inside a Gym host without the operator's dependencies."""

from __future__ import annotations

import subprocess
import sys

BLOCKED = ("kopf", "fastapi", "starlette", "uvicorn", "kubernetes", "prometheus_client", "yaml")

# A finder that refuses the heavy packages, then the imports a Gym host makes.
PROGRAM = f"""
import sys
class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {BLOCKED!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)  # as when not installed
sys.meta_path.insert(0, Refuse())
from gymsandbox.client import AsyncBrokerClient, BrokerClient, BrokerClientError
from gymsandbox.client.calls import broker_ssl_context
print("ok")
"""


def test_the_broker_client_imports_with_only_httpx_and_pydantic() -> None:
    result = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, check=False)
    assert (result.returncode, result.stdout.strip()) == (0, "ok"), result.stderr


def test_wait_ready_is_still_importable_from_the_package() -> None:
    from gymsandbox.client import GymHostFailedError, wait_ready  # noqa: PLC0415 - the lazy path itself

    assert callable(wait_ready)
    assert issubclass(GymHostFailedError, Exception)


def light_install(*argv: str) -> subprocess.CompletedProcess[str]:
    """`gymsandbox ARGV` where the operator extra is not installed (the heavy packages refused)."""
    program = PROGRAM.split("from gymsandbox.client", maxsplit=1)[0] + (
        f"import sys\nfrom gymsandbox.cli import main\nsys.exit(main({list(argv)!r}))\n"
    )
    return subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=False)


def test_help_and_version_answer_without_the_operator_extra() -> None:
    helped = light_install("--help")
    assert helped.returncode == 0, helped.stderr
    assert "operator" in helped.stdout
    assert "broker" in helped.stdout
    version = light_install("--version")
    assert (version.returncode, version.stdout.split()[0]) == (0, "gymsandbox"), version.stderr
    broker_help = light_install("broker", "--help")
    assert broker_help.returncode == 0, broker_help.stderr


def test_a_command_that_needs_the_operator_extra_says_so_in_one_line() -> None:
    result = light_install("operator", "--policy", "policy.yaml")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.strip() == (
        "gymsandbox operator: yaml is missing; this command needs: pip install 'gymsandbox[operator]'"
    )
