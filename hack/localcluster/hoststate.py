"""The host state the real node must leave as it found it.

    python -m hack.localcluster hoststate [snapshot FILE | compare BEFORE AFTER]

Firewall rules and chain policies (nftables and the iptables views), links, addresses, routes and policy
rules,
network namespaces, mounts, cgroups, the kernel tunables a node touches, and the host directories its tools
create. tests/node/test_host_state.py takes a snapshot before the node comes up and compares it with one
taken after it went down. Standard library only.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

# Tunables a kubelet, a CNI plugin, kube-proxy or a runtime may set, besides whole families below.
SYSCTLS = (
    "net/ipv4/ip_forward",
    "net/ipv6/conf/all/forwarding",
    "kernel/panic",
    "kernel/panic_on_oops",
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
    "kernel/pid_max",
    "fs/inotify/max_user_instances",
    "fs/inotify/max_user_watches",
    "net/netfilter/nf_conntrack_max",
    "net/netfilter/nf_conntrack_tcp_timeout_established",
    "net/netfilter/nf_conntrack_tcp_timeout_close_wait",
    "net/ipv4/conf/all/route_localnet",
    "net/ipv4/conf/all/rp_filter",
)
SYSCTL_FAMILIES = ("net/ipv4/conf/all", "net/ipv4/conf/default", "net/ipv6/conf/default", "net/bridge")
TOOL_DIRS = ("/run/netns", "/run/mount", "/run/crun", "/run/containerd", "/var/lib/cni", "/var/lib/kubelet",
             "/etc/cni", "/opt/cni", "/var/log/pods", "/var/log/containers", "/run/runc")  # fmt: skip


def _lines(*argv: str) -> list[str]:
    if not shutil.which(argv[0]):
        return [f"({argv[0]} not installed)"]
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    return [line.rstrip() for line in (result.stdout + result.stderr).splitlines() if line.strip()]


def _iptables(save: str) -> list[str]:
    # The header and footer comments carry the time of the dump; rules and policies are what matter.
    return [line for line in _lines(save) if not line.startswith("#")]


def _sysctls() -> list[str]:
    values = []
    paths = [Path("/proc/sys") / name for name in SYSCTLS]
    for family in SYSCTL_FAMILIES:
        root = Path("/proc/sys") / family
        paths += sorted(p for p in root.iterdir() if p.is_file()) if root.is_dir() else []
    for path in paths:
        try:
            value = " ".join(path.read_text().split())
        except OSError:  # missing here, or write-only
            continue
        values.append(f"{path.relative_to('/proc/sys')} = {value}")
    return values


def _mounts() -> list[str]:
    mounts = []
    for line in Path("/proc/1/mountinfo").read_text().splitlines():
        fields = line.split()
        separator = fields.index("-")
        mounts.append(f"{fields[4]} {fields[separator + 1]} {fields[separator + 2]}")
    return sorted(mounts)


def _cgroups() -> list[str]:
    found = []
    for hierarchy in sorted(Path("/sys/fs/cgroup").iterdir()):
        if not hierarchy.is_dir():
            continue
        # One level: the node's cgroups all live under kubepods/ and k8s.io/ (deeper levels of other
        # trees, such as this machine's own process cgroups, come and go on their own).
        found += [str(directory) for directory in sorted(hierarchy.glob("*/"))]
    return found


def _links() -> list[str]:
    # Name, flags and kind; not counters or the qdisc's queue state.
    links = []
    for line in _lines("ip", "-o", "-d", "link"):
        fields = line.split()
        links.append(" ".join([fields[1], fields[2], *[f for f in fields[3:] if f in ("veth", "bridge")]]))
    return sorted(links)


def snapshot() -> dict[str, list[str]]:
    return {
        "nft ruleset": _lines("nft", "list", "ruleset"),
        "iptables": _iptables("iptables-save"),
        "ip6tables": _iptables("ip6tables-save"),
        "iptables-legacy": _iptables("iptables-legacy-save"),
        "links": _links(),
        "addresses": sorted(" ".join(line.split()[1:4]) for line in _lines("ip", "-o", "addr")),
        "routes": _lines("ip", "route", "show", "table", "all"),
        "routes6": _lines("ip", "-6", "route", "show", "table", "all"),
        "rules": _lines("ip", "rule"),
        "netns": _lines("ip", "netns", "list"),
        "mounts": _mounts(),
        "cgroups": _cgroups(),
        "sysctls": _sysctls(),
        "directories": [d for d in TOOL_DIRS if Path(d).exists()],
    }


def differences(before: dict[str, list[str]], after: dict[str, list[str]]) -> dict[str, dict[str, list[str]]]:
    """Per section, what appeared and what went away; empty when the host is as it was."""
    found = {}
    for section in before.keys() | after.keys():
        old, new = before.get(section, []), after.get(section, [])
        added = [line for line in new if line not in old]
        removed = [line for line in old if line not in new]
        if added or removed:
            found[section] = {"added": added, "removed": removed}
    return found


def main(argv: list[str]) -> int:
    """`python -m hack.localcluster hoststate ARGV...`."""
    if len(argv) == 2 and argv[0] == "snapshot":
        Path(argv[1]).write_text(json.dumps(snapshot(), indent=1))
        return 0
    if len(argv) == 3 and argv[0] == "compare":
        found = differences(*(json.loads(Path(p).read_text()) for p in argv[1:]))
        print(json.dumps(found, indent=1) if found else "the host is as it was")
        return 1 if found else 0
    print(__doc__, file=sys.stderr)
    return 2
