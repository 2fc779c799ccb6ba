"""`--metrics-listen` on the command line: a bad address or a taken port is refused by name, at once."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from gymsandbox.cli import main

POLICY = Path(__file__).parents[2] / "examples" / "policy.yaml"


@pytest.mark.parametrize("command", ["operator", "broker"])
def test_a_metrics_address_without_a_port_is_refused(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main([command, "--policy", str(POLICY), "--metrics-listen", "127.0.0.1"])
    assert exited.value.code == 2
    assert "--metrics-listen: must be address:port, not '127.0.0.1'" in capsys.readouterr().err


def test_a_taken_metrics_port_stops_the_operator_before_it_touches_the_cluster(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-such-kubeconfig"))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = main(["operator", "--policy", str(POLICY), "--metrics-listen", f"127.0.0.1:{port}"])
    assert code == 2
    assert f"refusing to start: cannot serve metrics on 127.0.0.1:{port}: Address already in use" in (
        capsys.readouterr().err
    )
