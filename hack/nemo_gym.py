"""A Python 3.12 virtualenv with NeMo Gym's sandbox seam and this project as a Gym host installs it.

    python -m hack.nemo_gym venv DIR      make DIR (replacing it) and print DIR/bin/python

nemo-gym (NEMO_GYM_VERSION in hack/versions.env; it needs Python >= 3.12) goes in with --no-deps: its
`nemo_gym.sandbox` imports only the standard library, and that seam with its entry-point registry is all the
provider plugs into. The project goes in without its `operator` extra, so the provider runs as it does in a
Gym host: with httpx and pydantic only. Python 3.12 is GYMSANDBOX_PYTHON312, else `python3.12` on PATH (not
pyenv's shim), else pyenv's. Standard library only.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

from hack.localcluster.paths import ROOT
from hack.localcluster.pins import pin


def python312() -> str:
    """An interpreter, not pyenv's shim (which needs PYENV_VERSION to pick one)."""
    on_path = shutil.which("python3.12")
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    candidates = [os.environ.get("GYMSANDBOX_PYTHON312"), on_path if "/shims/" not in str(on_path) else None]
    candidates += [str(p) for p in sorted(pyenv.glob("3.12*/bin/python3.12"), reverse=True)]
    for candidate in candidates:
        if candidate and Path(candidate).is_file():
            return candidate
    raise SystemExit(
        "nemo_gym.py: no Python 3.12 (nemo-gym needs it): set GYMSANDBOX_PYTHON312, put python3.12 on PATH "
        "or install it with pyenv"
    )


def make_venv(directory: Path) -> Path:
    shutil.rmtree(directory, ignore_errors=True)
    subprocess.run([python312(), "-m", "venv", str(directory)], check=True)
    python = directory / "bin" / "python"
    pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, "--no-deps", f"nemo-gym=={pin('NEMO_GYM_VERSION')}"], check=True)
    subprocess.run([*pip, str(ROOT)], check=True)
    return python


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="python -m hack.nemo_gym",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("venv", help="make the virtualenv").add_argument("directory", type=Path)
    args = parser.parse_args()
    print(make_venv(args.directory.resolve()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
