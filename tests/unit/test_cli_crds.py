"""`gymsandbox crds` writes the generated CRDs; `--check` fails with a summary when they drifted."""

from __future__ import annotations

from pathlib import Path

import pytest

from gymsandbox.cli import main

GYMHOSTS = "gymhosts.gymsandbox.dev.yaml"


def test_crds_writes_one_file_per_resource(tmp_path: Path) -> None:
    assert main(["crds", "--output-dir", str(tmp_path / "crds")]) == 0

    assert sorted(path.name for path in (tmp_path / "crds").iterdir()) == [
        "episodesandboxes.gymsandbox.dev.yaml",
        GYMHOSTS,
    ]


def test_crds_writes_into_crds_of_the_working_directory_by_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)

    assert main(["crds"]) == 0
    assert (tmp_path / "crds" / GYMHOSTS).is_file()


def test_crds_check_passes_on_freshly_written_files(tmp_path: Path) -> None:
    main(["crds", "--output-dir", str(tmp_path)])

    assert main(["crds", "--check", "--output-dir", str(tmp_path)]) == 0


def test_crds_check_fails_with_a_summary_when_a_file_was_edited(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    main(["crds", "--output-dir", str(tmp_path)])
    path = tmp_path / GYMHOSTS
    path.write_text(path.read_text().replace("default: 8080", "default: 8081"))
    capsys.readouterr()

    assert main(["crds", "--check", "--output-dir", str(tmp_path)]) == 1
    assert (
        f"{GYMHOSTS}: differs from the models (regenerating adds 1 and removes 1 lines)"
        in capsys.readouterr().err
    )


def test_crds_check_writes_nothing(tmp_path: Path) -> None:
    assert main(["crds", "--check", "--output-dir", str(tmp_path / "crds")]) == 1

    assert not (tmp_path / "crds").exists()
