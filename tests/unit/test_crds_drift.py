"""crds/ is generated from the models; this fails when someone changes one without the other."""

from __future__ import annotations

from pathlib import Path

from gymsandbox.crdgen import drift, read_crd_files, render_crd_files

CRDS = Path(__file__).resolve().parents[2] / "crds"


def test_crds_directory_matches_what_the_models_generate() -> None:
    problems = drift(render_crd_files(), read_crd_files(CRDS))

    assert problems == [], "crds/ drifted from the models; run `make crds`:\n" + "\n".join(problems)
