"""`python -m hack.localcluster COMMAND`: the local cluster from the command line (the Makefile's targets and
hack/run.sh use these).

    python -m hack.localcluster up       start (or reuse a running one); writes .cluster/kubeconfig
    python -m hack.localcluster down     stop every process `up` started, by PID, and remove .cluster/
    python -m hack.localcluster status   exit 0 when the recorded cluster is up and answering
    python -m hack.localcluster enable-exec NAMESPACE POD
                                         let `kubectl exec` and `kubectl logs` reach that pod on a fake node
    python -m hack.localcluster node up|down|check|prepare|load IMAGE...
                                         the real node alone (see `node --help`)
    python -m hack.localcluster images build [...]
                                         the real node's image archives (see `images --help`)
    python -m hack.localcluster hoststate snapshot FILE | compare BEFORE AFTER
                                         the host state the real node must leave as it found it

Run from the repository root (where `hack` is importable). Standard library only, so it runs before the
project's virtualenv exists.
"""

from __future__ import annotations

import argparse
import os
import sys

from hack.localcluster import controlplane, hoststate, images, kwok, node
from hack.localcluster.console import logger
from hack.localcluster.paths import cluster_paths

NODE_USAGE = """\
python -m hack.localcluster node COMMAND

    up        start the node against the running local control plane
    down      stop it and put the host back as it was
    check     say whether this machine can run the node (exit 0 if it can)
    prepare   build (or find cached) all the node and its tests use: Debian packages, binaries and every
              image (images.py); nothing starts (`make test` runs it first, so that no test's time limit
              covers a cold build)
    load IMAGE...  build images.py's IMAGEs (e.g. gymsandbox) and load them into the running node's
              containerd; prints one `NAME=REFERENCE` line per image
"""


def main(argv: list[str]) -> int:
    """Dispatch on the first word: node, images, hoststate, or one of the cluster's own commands."""
    commands = {"node": node_main, "images": images.main, "hoststate": hoststate.main}
    if argv[:1] and argv[0] in commands:
        return commands[argv[0]](argv[1:])
    return cluster_main(argv)


def cluster_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m hack.localcluster",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("command", choices=["up", "down", "status", "enable-exec"])
    parser.add_argument("target", nargs="*", metavar="NAMESPACE POD", help="the pod, for enable-exec")
    args = parser.parse_args(argv)
    paths = cluster_paths()
    if args.command == "up":
        controlplane.up(paths)
    elif args.command == "down":
        controlplane.down(paths)
    elif args.command == "enable-exec":
        if len(args.target) != 2:
            parser.error("enable-exec takes NAMESPACE POD")
        print(kwok.enable_exec(paths, *args.target))
    else:
        ok = controlplane.status(paths)
        print("up" if ok else "down")
        return 0 if ok else 1
    return 0


def node_main(argv: list[str]) -> int:
    log = logger("node")
    command = argv[0] if len(argv) == 1 else ""
    paths = cluster_paths()
    if argv[:1] == ["load"] and len(argv) > 1:
        for name, ref in node.load_images(paths, *argv[1:]).items():
            print(f"{name}={ref}")
        return 0
    if command == "up":
        return 0 if node.up(paths) else 1
    if command == "down":
        node.down(paths)
        return 0
    if command == "prepare":
        why = (
            "GYMSANDBOX_REAL_NODE=0"
            if not node.enabled()
            else "KUBECONFIG names the cluster"
            if os.environ.get("KUBECONFIG")
            else node.missing_capability()
        )
        if why:
            log(f"nothing to prepare: no real node here ({why})")
        else:
            node.prepare()
        return 0
    if command == "check":
        why = node.missing_capability()
        print(why or "this machine can run the real node")
        return 1 if why else 0
    print(NODE_USAGE, file=sys.stderr)
    return 2
