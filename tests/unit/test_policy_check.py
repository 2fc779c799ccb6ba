"""`gymsandbox policy check`: the operator's own validation of a cluster policy, offline. A policy file, or
the chart as `helm template` renders it from an admin's values (each policy ConfigMap): what
values.schema.json lets through and the operator would refuse at start (a crash loop after `helm upgrade`)
is caught first."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

from gymsandbox.cli import main
from tests.unit.test_chart import template

ROOT = Path(__file__).resolve().parents[2]


def check(capsys: pytest.CaptureFixture[str], *files: str) -> tuple[int, str]:
    code = main(["policy", "check", *files])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_the_example_policy_is_valid(capsys: pytest.CaptureFixture[str]) -> None:
    assert check(capsys, str(ROOT / "examples" / "policy.yaml")) == (0, f"{ROOT}/examples/policy.yaml: ok\n")


def test_each_problem_of_a_policy_file_is_named(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bad = tmp_path / "policy.yaml"
    bad.write_text("caps:\n  maxCpu: eight\n  maxMemory: 32GB\nbogus: 1\n")
    code, out = check(capsys, str(bad))
    assert code == 1
    assert out.splitlines() == [
        f"{bad}: invalid",
        '  caps.maxCpu: "eight" is not a Kubernetes quantity (examples: 500m, 2, 1.5Gi, 4G)',
        '  caps.maxMemory: "32GB" is not a Kubernetes quantity (examples: 500m, 2, 1.5Gi, 4G)',
        "  bogus: unknown field",
    ]


@pytest.mark.parametrize(
    ("policy", "problem"),
    [
        ({"caps": {"maxCpu": "eight"}}, "caps.maxCpu"),
        ({"egress": {"allowedPrivateCIDRs": ["10.0.0.0/33"]}}, "egress.allowedPrivateCIDRs"),
        ({"approvedImages": ["registry.example.com/with space/"]}, "approvedImages"),
    ],
    ids=["quantity", "cidr", "image-prefix"],
)
def test_a_chart_render_the_schema_lets_through_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, policy: dict[str, Any], problem: str
) -> None:
    """`helm template` renders these values (the chart's schema does not know the policy's meaning); the
    check finds the policy ConfigMap in the render and refuses it as the operator would."""
    rendered = tmp_path / "rendered.yaml"
    rendered.write_text(template({"policy": policy}, tmp_path))
    code, out = check(capsys, str(rendered))
    assert code == 1, out
    assert out.splitlines()[0] == f"{rendered}: ConfigMap gymsandbox-system/gymsandbox-policy: invalid", out
    assert f"  {problem}" in out


def test_the_chart_as_it_ships_renders_a_valid_policy_read_from_stdin(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(template()))
    assert check(capsys, "-") == (0, "standard input: ConfigMap gymsandbox-system/gymsandbox-policy: ok\n")


def test_a_file_that_cannot_be_read_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out = check(capsys, str(tmp_path / "missing.yaml"))
    assert (code, out) == (2, f"{tmp_path}/missing.yaml: cannot read it (No such file or directory)\n")
