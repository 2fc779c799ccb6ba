"""The generated pages (docs/api.md, docs/troubleshooting.md) say what the code says."""

from __future__ import annotations

from pathlib import Path

import pytest

from gymsandbox.cli import main
from gymsandbox.crdgen import drift
from gymsandbox.docgen import read_docs, render_docs

ROOT = Path(__file__).resolve().parents[2]


def test_the_generated_pages_are_what_the_code_renders() -> None:
    problems = drift(render_docs(), read_docs(ROOT / "docs"))

    assert problems == [], "docs/ drifted from the code; run `make crds`:\n" + "\n".join(problems)


def test_docs_check_fails_on_an_edited_page(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["docs", "--output-dir", str(tmp_path)]) == 0
    assert main(["docs", "--check", "--output-dir", str(tmp_path)]) == 0
    page = tmp_path / "troubleshooting.md"
    page.write_text(page.read_text().replace("| Workload |", "| Policy |", 1))
    capsys.readouterr()

    assert main(["docs", "--check", "--output-dir", str(tmp_path)]) == 1
    assert "troubleshooting.md: differs from the models" in capsys.readouterr().err
