"""The `gymsandbox` command: `operator`, `crds` (and later `broker`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from gymsandbox import __version__, crdgen


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gymsandbox", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("version", help="print the version")
    crds = commands.add_parser("crds", help="write the CustomResourceDefinitions generated from the models")
    crds.add_argument(
        "--output-dir", type=Path, default=Path("crds"), help="directory of the YAML files (default: crds)"
    )
    crds.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if the files differ from the models"
    )
    args = parser.parse_args(argv)
    if args.command == "crds":
        return _crds(args.output_dir, check=args.check)
    print(__version__)
    return 0


def _crds(output_dir: Path, *, check: bool) -> int:
    expected = crdgen.render_crd_files()
    if not check:
        for path in crdgen.write_crd_files(output_dir, expected):
            print(f"wrote {path}")
        return 0
    problems = crdgen.drift(expected, crdgen.read_crd_files(output_dir))
    if not problems:
        return 0
    print(f"{output_dir} is out of date with the models:", file=sys.stderr)
    for problem in problems:
        print(f"  {problem}", file=sys.stderr)
    print(f"run `gymsandbox crds --output-dir {output_dir}` to regenerate", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
