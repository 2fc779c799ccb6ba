"""One real Kubernetes node beside the local control plane: kubelet, containerd 2 with runc, crun and gVisor
(runsc), the CNI bridge, kube-proxy (nftables), kube-network-policies (enforcing) and CoreDNS.

`python -m hack.localcluster node up|down|check|prepare|load` (cli.py) drives it by hand; `python -m
hack.localcluster up` starts it unless GYMSANDBOX_REAL_NODE=0 or the machine cannot run it (then one line says
why and the cluster carries on with kwok nodes only). Host safety, the rules this file keeps:
- Every process is started here and stopped by its PID; nothing else is signalled.
- containerd and the kubelet run in a private mount namespace: their mounts go away with it, and the kernel
  tunables the kubelet would set on the host (panic_on_oops, panic, overcommit_memory) land on masked copies.
- The kubelet finds no iptables on its PATH, so it adds no KUBE-FIREWALL rules to the host's INPUT/OUTPUT.
- The host's own firewall rules are never read-modified: the node adds its own nft tables and deletes them.
- ip_forward is put back to the value it had; links, netns, cgroups and directories made here are removed.
- Pods reach only the node's networks (interfaces named gs*): a guard table drops anything forwarded to or
  from another interface, and anything pods send to the host itself except replies.

Standard library only, like the rest of hack/localcluster/.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from hack.localcluster import tools
from hack.localcluster.console import logger
from hack.localcluster.kubeconfig import write_certificate_kubeconfig
from hack.localcluster.kwok import RUNTIME_LABEL
from hack.localcluster.nodeconfig import (
    API_HOST_IFACE,
    API_HOST_IP,
    API_NETNS,
    API_NS_IFACE,
    API_PROXY_IP,
    API_PROXY_PORT,
    APT_PACKAGES,
    BRIDGE,
    CLUSTER_DNS_IP,
    GUARD_RULES,
    GUARD_TABLE,
    GVISOR_LABEL,
    KNP_TABLE,
    KUBE_PROXY_TABLES,
    MASKED_SYSCTLS,
    NODE_IMAGES,
    NODE_IP,
    NODE_NAME,
    POD_CIDR,
    PRIVATE_DIRS,
    REAL_NODE_LABEL,
    TOOL_DIRS,
    cluster_objects,
    cni_config,
    containerd_config,
    kube_proxy_config,
    kubelet_config,
    runsc_config,
)
from hack.localcluster.paths import HACK, ROOT, NodePaths, Paths
from hack.localcluster.pki import issue_cert
from hack.localcluster.processes import Processes, alive, free_port, stop_pid

log = logger("node")


def enabled() -> bool:
    return os.environ.get("GYMSANDBOX_REAL_NODE", "1") != "0"


def missing_capability() -> str | None:
    """Why this machine cannot run the node, or None when it can."""
    if sys.platform != "linux":
        return "not Linux"
    if os.geteuid() != 0:
        return "not root (the node needs network namespaces, mounts and cgroups)"
    if not Path("/sys/fs/cgroup").is_dir():
        return "no cgroup file system at /sys/fs/cgroup"
    if not os.access("/proc/sys/net/ipv4/ip_forward", os.W_OK):
        return "/proc/sys/net/ipv4/ip_forward is not writable (no network namespace privileges)"
    if not shutil.which("apt-get") and any(_missing(cmd) for cmd in APT_PACKAGES):
        return "missing node packages and no apt-get to install them"
    return None


def _missing(command: str) -> bool:
    return not (Path(command).exists() if command.startswith("/") else shutil.which(command))


def ensure_packages() -> None:
    packages = sorted({pkg for cmd, pkg in APT_PACKAGES.items() if _missing(cmd)})
    if not packages:
        return
    log(f"installing Debian packages: {' '.join(packages)}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages], check=True, env=env
    )


def run(*argv: str, check: bool = True, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(argv, input=stdin, capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({result.returncode}): {result.stderr.strip()}")
    return result


def prepare() -> None:
    """The Debian packages, the node's binaries and every image (the node's, the chart's, the sample's),
    built or found cached; nothing is started."""
    ensure_packages()
    bins = tools.node_binaries()
    node_images(bins["coredns"] / "coredns")


def node_images(coredns: Path | None, *names: str) -> dict[str, tuple[str, Path]]:
    """Build (or find cached) image archives with images.py: short name -> (image reference, archive);
    no names: every image."""
    coredns_binary = ["--coredns-binary", str(coredns)] if coredns else []
    out = subprocess.run(
        [sys.executable, "-m", "hack.localcluster", "images", "build", *names, *coredns_binary],
        check=True,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,  # where `hack` is importable from
    ).stdout
    images = {}
    for line in out.split():
        ref, archive = line.split("=", 1)
        images[ref.rsplit("/", 1)[-1].split(":")[0]] = (ref, Path(archive))
    return images


# ---- configuration files ------------------------------------------------------------------------------


def issue_node_credentials(cluster_paths: Paths, paths: NodePaths, server: str) -> None:
    """Certificates signed by the cluster CA and kubeconfigs for the kubelet and kube-proxy."""
    pki = cluster_paths.pki
    issue_cert(pki, "kubelet-serving", "/CN=" + NODE_NAME, "serverAuth", f"IP:{NODE_IP},DNS:{NODE_NAME}")
    issue_cert(pki, "kubelet-client", f"/O=system:nodes/CN=system:node:{NODE_NAME}", "clientAuth")
    issue_cert(pki, "kube-proxy", "/CN=system:kube-proxy", "clientAuth")
    for user in ("kubelet-client", "kube-proxy"):
        write_certificate_kubeconfig(paths.root / f"{user}.kubeconfig", server, pki, user)


# ---- processes ----------------------------------------------------------------------------------------


def processes(paths: NodePaths) -> Processes:
    """The node's processes, recorded in its own state file."""
    return Processes(paths.state, paths.logs)


def node_env(path: str) -> dict[str, str]:
    return {"PATH": path, "LANG": "C.UTF-8", "HOME": "/root"}


def start_mount_namespace(procs: Processes, paths: NodePaths) -> int:
    """A process that holds the node's private mount namespace: masked sysctls, private /run/containerd and
    /var/lib/cni. containerd and the kubelet join it (nsenter), so their mounts vanish when it exits."""
    masks = paths.root / "sysctl-masks"
    masks.mkdir(exist_ok=True)
    lines = ["set -e"]
    for tunable in MASKED_SYSCTLS:
        copy = masks / tunable.replace("/", ".")
        copy.write_text(Path(f"/proc/sys/{tunable}").read_text())
        lines.append(f"mount --bind {copy} /proc/sys/{tunable}")
    for directory in PRIVATE_DIRS:
        Path(directory).mkdir(parents=True, exist_ok=True)
        lines.append(f"mount -t tmpfs -o mode=0711 tmpfs {directory}")
    lines += [f"touch {paths.root / 'mount-namespace.ready'}", "exec sleep infinity"]
    pid = procs.start(
        "node-ns", ["unshare", "--mount", "--propagation", "private", "sh", "-c", "\n".join(lines)]
    )
    procs.wait("the node's mount namespace", (paths.root / "mount-namespace.ready").exists, 10)
    return pid


# Which state directory's node holds this machine's bridge: one node per machine, whichever checkout made it.
# Under /run, so a reboot (which removes the bridge too) forgets it.
OWNER_RECORD = Path("/run/gymsandbox-node.owner")


def network_up(paths: NodePaths, procs: Processes, api_port: int) -> None:
    OWNER_RECORD.write_text(f"{paths.root.parent}\n")
    (paths.root / "ip_forward.before").write_text(Path("/proc/sys/net/ipv4/ip_forward").read_text())
    procs.state["network"] = True
    procs.save()
    run("ip", "link", "add", BRIDGE, "type", "bridge")
    run("ip", "addr", "add", f"{NODE_IP}/24", "dev", BRIDGE)
    run("ip", "link", "set", BRIDGE, "up")
    run("nft", "-f", "-", stdin=GUARD_RULES)
    add_netns_link(API_NETNS, (API_HOST_IFACE, API_NS_IFACE), API_HOST_IP, [API_PROXY_IP])
    Path("/proc/sys/net/ipv4/ip_forward").write_text("1\n")
    procs.start(
        "api-proxy",
        [sys.executable, str(HACK / "node" / "apiproxy.py"), API_NETNS, f"{API_PROXY_IP}:{API_PROXY_PORT}",
         f"127.0.0.1:{api_port}"],
    )  # fmt: skip


def add_netns_link(
    netns: str, ifaces: tuple[str, str], host_ip: str, ns_ips: list[str], prefix: int = 30
) -> None:
    """A network namespace joined to the host by a veth pair (host side `host_ip`, namespace side `ns_ips`,
    all in one /`prefix`) that routes the pod network back through the host. `ifaces`: (host side, inside)."""
    host_iface, ns_iface = ifaces
    run("ip", "netns", "add", netns)
    run("ip", "link", "add", host_iface, "type", "veth", "peer", "name", ns_iface)
    run("ip", "link", "set", ns_iface, "netns", netns)
    run("ip", "addr", "add", f"{host_ip}/{prefix}", "dev", host_iface)
    run("ip", "link", "set", host_iface, "up")
    inside = ["ip", "netns", "exec", netns]
    run(*inside, "ip", "link", "set", "lo", "up")
    for address in ns_ips:
        run(*inside, "ip", "addr", "add", f"{address}/{prefix}", "dev", ns_iface)
    run(*inside, "ip", "link", "set", ns_iface, "up")
    run(*inside, "ip", "route", "add", POD_CIDR, "via", host_ip)


def delete_netns_link(netns: str, host_iface: str) -> None:
    run("ip", "netns", "del", netns, check=False)
    run("ip", "link", "del", host_iface, check=False)


def kubectl(cluster_paths: Paths, *args: str, stdin: str | None = None) -> str:
    return tools.kubectl(tools.binaries(), cluster_paths.kubeconfig, *args, stdin=stdin)


def up(cluster_paths: Paths) -> bool:
    """Start the node; returns False (after one line saying why) when this machine cannot run it."""
    why = missing_capability()
    if why:
        log(f"no real node on this machine ({why}); carrying on with kwok nodes only")
        return False
    paths = cluster_paths.node
    if paths.state.exists():
        down(cluster_paths)
    if Path(f"/sys/class/net/{BRIDGE}").exists():
        reclaim_abandoned_node()
    if Path(f"/sys/class/net/{BRIDGE}").exists():
        raise RuntimeError(
            f"this machine already runs a real node (its bridge {BRIDGE} exists), most likely another "
            "checkout's local cluster; bring that one down (make cluster-down in its directory), or set "
            "GYMSANDBOX_REAL_NODE=0 to carry on with kwok nodes only"
        )
    ensure_packages()
    bins = tools.node_binaries()
    images = node_images(bins["coredns"] / "coredns", *NODE_IMAGES)
    for directory in (paths.logs, paths.containerd, paths.kubelet, paths.cni / "net.d", paths.cni / "ipam"):
        directory.mkdir(parents=True, exist_ok=True)
    procs = processes(paths)
    procs.state["created"] = [d for d in TOOL_DIRS if not Path(d).exists()]
    procs.save()
    try:
        _start(cluster_paths, paths, procs, bins, images)
    except BaseException:
        log(f"the node did not come up; logs are in {paths.logs}")
        down(cluster_paths)
        raise
    log(f"node {NODE_NAME} is up: pods on {POD_CIDR}, cluster DNS {CLUSTER_DNS_IP}")
    return True


def _start(
    cluster_paths: Paths,
    paths: NodePaths,
    procs: Processes,
    bins: dict[str, Path],
    images: dict[str, tuple[str, Path]],
) -> None:
    cluster_state = json.loads(cluster_paths.state.read_text())
    api_port = int(cluster_state["ports"]["apiserver"])
    procs.state["ctr"] = str(bins["containerd"] / "ctr")
    procs.save()
    issue_node_credentials(cluster_paths, paths, str(cluster_state["server"]))
    (paths.containerd / "config.toml").write_text(containerd_config(paths))
    (paths.containerd / "runsc.toml").write_text(runsc_config(paths, bins))
    (paths.cni / "net.d" / "10-gymsandbox.conflist").write_text(cni_config(paths))
    # Pods resolve through cluster DNS only; the node itself has no upstream to hand them.
    (paths.root / "resolv.conf").write_text("nameserver 127.0.0.1\n")
    (paths.root / "kubelet-config.yaml").write_text(kubelet_config(paths, cluster_paths))
    (paths.root / "kube-proxy-config.yaml").write_text(kube_proxy_config(paths))
    # The runtimes' shims, found by containerd on its PATH; no iptables on any node PATH.
    paths.bin.mkdir(exist_ok=True)
    for shim in (bins["containerd"] / "containerd-shim-runc-v2", bins["gvisor"] / "containerd-shim-runsc-v1"):
        (paths.bin / shim.name).symlink_to(shim)
    path = f"{paths.bin}:/usr/bin:/bin"
    network_up(paths, procs, api_port)
    ns_pid = start_mount_namespace(procs, paths)
    enter = ["nsenter", "-t", str(ns_pid), "-m", "--"]
    ctr = [str(bins["containerd"] / "ctr"), "-a", str(paths.socket), "-n", "k8s.io"]
    procs.start(
        "containerd",
        [*enter, str(bins["containerd"] / "containerd"), "--config", str(paths.containerd / "config.toml")],
        env=node_env(path),
    )
    procs.wait("containerd", lambda: run(*ctr, "version", check=False).returncode == 0, 30)
    for _, archive in images.values():
        run(*ctr, "images", "import", str(archive))
    procs.start(
        "kubelet",
        [
            *enter, str(bins["kubelet"] / "kubelet"),
            f"--config={paths.root / 'kubelet-config.yaml'}",
            f"--kubeconfig={paths.root / 'kubelet-client.kubeconfig'}",
            f"--root-dir={paths.kubelet}",
            f"--hostname-override={NODE_NAME}",
            f"--node-ip={NODE_IP}",
            f"--node-labels={REAL_NODE_LABEL}=true,{GVISOR_LABEL}=true,{RUNTIME_LABEL}=crun",
            "--v=1",
        ],
        env=node_env(path),
    )  # fmt: skip
    procs.wait("node Ready", lambda: _node_ready(cluster_paths), 120)
    kubectl(cluster_paths, "apply", "-f", "-", stdin=cluster_objects(images["coredns"][0]))
    token = kubectl(cluster_paths, "-n", "kube-system", "create", "token", "kube-network-policies",
                    "--duration=24h").strip()  # fmt: skip
    secret_dir = paths.root / "knp-serviceaccount"
    secret_dir.mkdir(mode=0o700, exist_ok=True)
    (secret_dir / "token").write_text(token)
    shutil.copy(cluster_paths.pki / "ca.crt", secret_dir / "ca.crt")
    (secret_dir / "namespace").write_text("kube-system")
    procs.start(
        "knp",
        [
            str(HACK / "node" / "knp-run"), str(secret_dir), str(bins["knp"] / "kube-network-policies"),
            f"--hostname-override={NODE_NAME}", "--nfqueue-id=98", "--disable-nri=true",
            f"--metrics-bind-address=127.0.0.1:{free_port()}", "--v=1",
        ],
        env={**node_env("/usr/bin:/bin"), "KUBERNETES_SERVICE_HOST": "127.0.0.1",
             "KUBERNETES_SERVICE_PORT": str(api_port)},
    )  # fmt: skip
    nft_only = paths.root / "nft-only"
    nft_only.mkdir(exist_ok=True)
    (nft_only / "nft").symlink_to(shutil.which("nft") or "/usr/sbin/nft")
    procs.start(
        "kube-proxy",
        [str(bins["kubelet"] / "kube-proxy"), f"--config={paths.root / 'kube-proxy-config.yaml'}", "--v=1"],
        env=node_env(f"{nft_only}:/usr/bin:/bin"),
    )
    procs.wait("kube-network-policies' table", lambda: _nft_table(*KNP_TABLE), 30)
    procs.wait("kube-proxy's table", lambda: _nft_table(*KUBE_PROXY_TABLES[0]), 30)
    procs.wait("cluster DNS Ready", lambda: _dns_ready(cluster_paths), 120)


def _node_ready(cluster_paths: Paths) -> bool:
    try:
        out = kubectl(cluster_paths, "get", "node", NODE_NAME, "-o",
                      'jsonpath={.status.conditions[?(@.type=="Ready")].status}')  # fmt: skip
    except RuntimeError:
        return False
    return out.strip() == "True"


def _dns_ready(cluster_paths: Paths) -> bool:
    out = kubectl(cluster_paths, "-n", "kube-system", "get", "pods", "-l", "k8s-app=kube-dns", "-o",
                  'jsonpath={.items[*].status.conditions[?(@.type=="Ready")].status}')  # fmt: skip
    return out.split() == ["True"]


def _nft_table(family: str, name: str) -> bool:
    return run("nft", "list", "table", family, name, check=False).returncode == 0


def running(cluster_paths: Paths) -> bool:
    paths = cluster_paths.node
    if not paths.state.exists():
        return False
    return all(alive(pid) for pid in processes(paths).pids.values())


def load_images(cluster_paths: Paths, *names: str) -> dict[str, str]:
    """Build the named images and import them into the running node's containerd: name -> reference."""
    paths = cluster_paths.node
    if not running(cluster_paths):
        raise SystemExit("the real node is not running: start the cluster first (make cluster-up)")
    ctr = [str(processes(paths).state["ctr"]), "-a", str(paths.socket), "-n", "k8s.io"]
    loaded = {}
    for name, (ref, archive) in node_images(None, *names).items():
        log(f"loading {ref} into the node")
        run(*ctr, "images", "import", str(archive))
        loaded[name] = ref
    return loaded


def down(cluster_paths: Paths) -> None:
    """Stop the node and undo what `up` did to the host; safe to run at any point of a failed `up`."""
    paths = cluster_paths.node
    if not paths.state.exists():
        return
    procs = processes(paths)
    _stop_processes(cluster_paths, paths, procs)
    if procs.state.get("network"):
        _network_down(paths)
    _remove_cgroups()
    for directory in procs.state.get("created", []):
        if run("mountpoint", "-q", directory, check=False).returncode == 0:
            run("umount", directory, check=False)
        shutil.rmtree(directory, ignore_errors=True)
    with contextlib.suppress(RuntimeError):  # the control plane may already be gone
        kubectl(cluster_paths, "delete", "node", NODE_NAME, "--ignore-not-found", "--wait=false")
    shutil.rmtree(paths.root, ignore_errors=True)
    log(f"node {NODE_NAME} is down")


def _stop_processes(cluster_paths: Paths, paths: NodePaths, procs: Processes) -> None:
    """Pods first (while the kubelet can still tear them down), then each process in reverse start order."""
    pids = procs.pids

    def stop(*names: str) -> None:
        for name in names:
            if name in pids:
                stop_pid(name, pids[name])

    if "kubelet" in pids and alive(pids["kubelet"]):
        _drain(cluster_paths)
    stop("kube-proxy", "knp")
    for family, table in (*KUBE_PROXY_TABLES, KNP_TABLE):
        run("nft", "delete", "table", family, table, check=False)
    stop("kubelet")
    if "containerd" in pids and alive(pids["containerd"]):
        _kill_tasks(paths, str(procs.state["ctr"]))
    stop("containerd", "api-proxy")
    _kill_leftover_shims(paths)
    stop("node-ns")


def reclaim_abandoned_node() -> None:
    """Bring down the node of another state directory (another checkout: a CI clone, a worktree) when every
    process it started is gone, killed with the run that started it: its bridge, nftables table and network
    namespace stay behind and would refuse every later node. A node with any process alive is left alone."""
    owner = Path(OWNER_RECORD.read_text().strip()) if OWNER_RECORD.exists() else None
    if owner is None or not (owner / "node" / "state.json").exists():
        return
    other = Paths(owner)
    if any(alive(pid) for pid in processes(other.node).pids.values()):
        return
    log(f"the node of {owner} was abandoned (none of its processes is alive): bringing it down first")
    down(other)


def _network_down(paths: NodePaths) -> None:
    if OWNER_RECORD.exists() and OWNER_RECORD.read_text().strip() == str(paths.root.parent):
        OWNER_RECORD.unlink()
    delete_netns_link(API_NETNS, API_HOST_IFACE)
    run("ip", "link", "del", BRIDGE, check=False)  # and the pod veths still attached to it
    run("nft", "delete", "table", "inet", GUARD_TABLE, check=False)
    before = paths.root / "ip_forward.before"
    if before.exists():
        Path("/proc/sys/net/ipv4/ip_forward").write_text(before.read_text())


def _drain(cluster_paths: Paths) -> None:
    """Delete the node's pods while the kubelet runs, so CNI DEL releases their addresses and shims exit."""
    with contextlib.suppress(RuntimeError):
        kubectl(cluster_paths, "cordon", NODE_NAME)  # so that no controller puts a new pod here meanwhile
        kubectl(cluster_paths, "delete", "pods", "-A", f"--field-selector=spec.nodeName={NODE_NAME}",
                "--grace-period=1", "--wait=false")  # fmt: skip
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            left = kubectl(cluster_paths, "get", "pods", "-A", f"--field-selector=spec.nodeName={NODE_NAME}",
                           "-o", "name")  # fmt: skip
            if not left.strip():
                return
            time.sleep(0.5)
        log("some pods of the node were still there after 60 s; stopping anyway")


def _kill_tasks(paths: NodePaths, ctr_path: str) -> None:
    ctr = [ctr_path, "-a", str(paths.socket), "-n", "k8s.io"]
    for task in run(*ctr, "tasks", "ls", "-q", check=False).stdout.split():
        run("timeout", "10", *ctr, "tasks", "kill", "-s", "KILL", task, check=False)
        run("timeout", "10", *ctr, "tasks", "delete", "-f", task, check=False)


def _kill_leftover_shims(paths: NodePaths) -> None:
    """Shims outlive containerd by design (reparented to PID 1); ours are the ones that name our state dir."""
    marker = str(paths.containerd).encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if marker in cmdline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(proc.name), 9)
                program = cmdline.split(b"\0")[0].decode(errors="replace")
                log(f"killed leftover {program} ({proc.name})")


def _remove_cgroups() -> None:
    """The cgroups the kubelet and the runtimes made, deepest first (each hierarchy, and the unified one)."""
    for hierarchy in Path("/sys/fs/cgroup").iterdir():
        for top in ("kubepods", "k8s.io"):
            root = hierarchy / top
            if not root.is_dir():
                continue
            for directory in sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
                with contextlib.suppress(OSError):
                    directory.rmdir()
            with contextlib.suppress(OSError):
                root.rmdir()
