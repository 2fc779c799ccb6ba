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
            raise ImportError(f"{{name}} is not installed here")
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
