"""`python -m hack.localcluster ...`: see hack/localcluster/cli.py."""

import sys

from hack.localcluster.cli import main

sys.exit(main(sys.argv[1:]))
