"""The `gymsandbox` command: `operator`, `crds` (and later `broker`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gymsandbox", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("version", help="print the version")
    args = parser.parse_args(argv)
    if args.command == "version":
        from gymsandbox import __version__

        print(__version__)
    return 0


if __name__ == "__main__":
    sys.exit(main())
