"""The real node's settings and configuration files (node.py starts the processes that read them).

Pure: names, addresses and the text of each file, from the paths and binaries they refer to. Standard library
only, like the rest of hack/localcluster/.
"""

from __future__ import annotations

import json
import shutil
import string
import textwrap
from pathlib import Path

from hack.localcluster.paths import HACK, NodePaths, Paths
from hack.localcluster.processes import free_port

NODE_NAME = "gs-node-0"
# Every interface of the node's networks starts with this, so one guard rule covers those the tests add.
IFACE_PREFIX = "gs"
BRIDGE = "gsnode0"
NODE_IP = "10.89.0.1"
POD_CIDR = "10.89.0.0/24"
# In-cluster clients (CoreDNS, the chart's pods) reach the API server through a proxy in its own network
# namespace, so that their traffic is forwarded like traffic to a remote API server and NetworkPolicy applies.
API_NETNS = "gs-api"
API_HOST_IFACE, API_NS_IFACE = "gsapi-h", "gsapi-n"
API_HOST_IP, API_PROXY_IP, API_PROXY_PORT = "10.89.2.1", "10.89.2.2", 6443
CLUSTER_DNS_IP = "10.0.0.10"
# Images images.py builds and `up` loads into the node's containerd (no registry, no pulls).
PAUSE_IMAGE = "localhost/gymsandbox/pause:3.10"
SHELL_IMAGE = "localhost/gymsandbox/shell:1"
NODE_IMAGES = ("pause", "shell", "coredns")
GUARD_TABLE = "gymsandbox_node_guard"
KNP_TABLE = ("inet", "kube-network-policies")
KUBE_PROXY_TABLES = (("ip", "kube-proxy"), ("ip6", "kube-proxy"))
# Node labels and taint: ordinary pods stay on the kwok nodes; RuntimeClasses `crun` and `gvisor` tolerate it.
REAL_NODE_LABEL = "gymsandbox.dev/real-node"
GVISOR_LABEL = "gymsandbox.dev/gvisor"
TAINT = {"key": REAL_NODE_LABEL, "value": "true", "effect": "NoSchedule"}
# Kernel tunables the kubelet sets at start; masked inside the node's mount namespace.
MASKED_SYSCTLS = ("vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops")
# Host paths only the node's tools create; removed on the way down when they were not there before.
TOOL_DIRS = ("/run/netns", "/run/mount", "/run/crun", "/run/containerd", "/var/lib/cni", "/var/lib/kubelet",
             "/var/log/containers", "/var/log/pods")  # fmt: skip
# Of those, what the node's mount namespace covers with a tmpfs of its own: nothing lands on the host's disk.
PRIVATE_DIRS = ("/run/containerd", "/var/lib/cni", "/var/lib/kubelet", "/var/log/containers", "/var/log/pods")
APT_PACKAGES = {  # command -> Debian package that provides it
    "runc": "runc",
    "crun": "crun",
    "/usr/lib/cni/bridge": "containernetworking-plugins",
    "nft": "nftables",
    "ip": "iproute2",
    "busybox": "busybox-static",
    "openssl": "openssl",
    "conntrack": "conntrack",
}


def containerd_config(paths: NodePaths) -> str:
    c = paths.containerd
    runtime = 'plugins."io.containerd.cri.v1.runtime"'
    runtimes = f"{runtime}.containerd.runtimes"
    return textwrap.dedent(f"""\
        version = 3
        root = "{c / "root"}"
        state = "{c / "state"}"
        [grpc]
          address = "{c / "containerd.sock"}"
        [ttrpc]
          address = "{c / "containerd.sock.ttrpc"}"
        [plugins."io.containerd.internal.v1.opt"]
          path = "{c / "opt"}"
        [plugins."io.containerd.nri.v1.nri"]
          disable = true
        [plugins."io.containerd.grpc.v1.cri"]
          stream_server_address = "127.0.0.1"
          stream_server_port = "0"
        [plugins."io.containerd.cri.v1.images"]
          snapshotter = "overlayfs"
          [plugins."io.containerd.cri.v1.images".pinned_images]
            sandbox = "{PAUSE_IMAGE}"
        [{runtime}]
          enable_selinux = false
          disable_apparmor = true
          # Root here may lack CAP_SYS_RESOURCE: negative oom_score_adj values would fail every sandbox.
          restrict_oom_score_adj = true
          netns_mounts_under_state_dir = true
          [{runtime}.containerd]
            default_runtime_name = "runc"
            [{runtimes}.runc]
              runtime_type = "io.containerd.runc.v2"
              [{runtimes}.runc.options]
                BinaryName = "{shutil.which("runc") or "/usr/sbin/runc"}"
                Root = "{c / "runc-root"}"
            [{runtimes}.crun]
              runtime_type = "io.containerd.runc.v2"
              [{runtimes}.crun.options]
                BinaryName = "{HACK / "node" / "crun-legacy"}"
                Root = "{c / "crun-root"}"
            [{runtimes}.runsc]
              runtime_type = "io.containerd.runsc.v1"
              [{runtimes}.runsc.options]
                TypeUrl = "io.containerd.runsc.v1.options"
                ConfigPath = "{c / "runsc.toml"}"
          [{runtime}.cni]
            bin_dirs = ["/usr/lib/cni"]
            conf_dir = "{paths.cni / "net.d"}"
            max_conf_num = 1
        """)


def runsc_config(paths: NodePaths, bins: dict[str, Path]) -> str:
    # systrap: the KVM platform needs a KVM that can map guest memory (not the PVM variant of these VMs).
    return textwrap.dedent(f"""\
        binary_name = "{bins["gvisor"] / "runsc"}"
        root = "{paths.containerd / "runsc-root"}"
        [runsc_config]
          platform = "systrap"
        """)


def cni_config(paths: NodePaths) -> str:
    ipam = {
        "type": "host-local",
        "dataDir": str(paths.cni / "ipam"),
        "ranges": [
            [{"subnet": POD_CIDR, "rangeStart": "10.89.0.10", "rangeEnd": "10.89.0.250", "gateway": NODE_IP}]
        ],
        "routes": [{"dst": "0.0.0.0/0"}],
    }
    bridge = {
        "type": "bridge",
        "bridge": BRIDGE,
        "isGateway": True,
        "ipMasq": False,
        "hairpinMode": True,
        "ipam": ipam,
    }
    return json.dumps({"cniVersion": "1.0.0", "name": "gymsandbox-pods", "plugins": [bridge]}, indent=2)


def kubelet_config(paths: NodePaths, cluster_paths: Paths) -> str:
    pki = cluster_paths.pki
    sock = paths.socket
    return textwrap.dedent(f"""\
        apiVersion: kubelet.config.k8s.io/v1beta1
        kind: KubeletConfiguration
        failCgroupV1: false
        cgroupDriver: cgroupfs
        failSwapOn: false
        containerRuntimeEndpoint: unix://{sock}
        imageServiceEndpoint: unix://{sock}
        address: {NODE_IP}
        port: 10250
        readOnlyPort: 0
        healthzBindAddress: 127.0.0.1
        healthzPort: 0
        tlsCertFile: {pki / "kubelet-serving.crt"}
        tlsPrivateKeyFile: {pki / "kubelet-serving.key"}
        # Only clients with a certificate from the cluster CA (the API server's kubelet client) get in.
        authentication:
          anonymous: {{enabled: false}}
          webhook: {{enabled: false}}
          x509: {{clientCAFile: {pki / "ca.crt"}}}
        authorization: {{mode: AlwaysAllow}}
        clusterDomain: cluster.local
        clusterDNS: [{CLUSTER_DNS_IP}]
        resolvConf: {paths.root / "resolv.conf"}
        podLogsDir: {paths.kubelet / "pod-logs"}
        registerNode: true
        registerWithTaints:
        - {{key: {TAINT["key"]}, value: "{TAINT["value"]}", effect: {TAINT["effect"]}}}
        maxPods: 60
        serializeImagePulls: false
        imageGCHighThresholdPercent: 95
        imageGCLowThresholdPercent: 90
        evictionHard: {{memory.available: "200Mi", nodefs.available: "2%", imagefs.available: "2%"}}
        nodeStatusReportFrequency: 10s
        nodeStatusUpdateFrequency: 10s
        syncFrequency: 10s
        shutdownGracePeriod: 0s
        """)


def kube_proxy_config(paths: NodePaths) -> str:
    return textwrap.dedent(f"""\
        apiVersion: kubeproxy.config.k8s.io/v1alpha1
        kind: KubeProxyConfiguration
        mode: nftables
        clientConnection: {{kubeconfig: {paths.root / "kube-proxy.kubeconfig"}}}
        hostnameOverride: {NODE_NAME}
        healthzBindAddress: 127.0.0.1:{free_port()}
        metricsBindAddress: 127.0.0.1:{free_port()}
        nodePortAddresses: ["{NODE_IP}/32"]
        clusterCIDR: {POD_CIDR}
        # 0: leave the host's conntrack tunables alone.
        conntrack: {{maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}}
        """)


GUARD_RULES = f"""\
table inet {GUARD_TABLE} {{
  chain forward {{
    type filter hook forward priority filter - 10; policy accept;
    iifname "{IFACE_PREFIX}*" oifname != "{IFACE_PREFIX}*" counter drop
    oifname "{IFACE_PREFIX}*" iifname != "{IFACE_PREFIX}*" counter drop
  }}
  chain input {{
    type filter hook input priority filter - 10; policy accept;
    iifname "{IFACE_PREFIX}*" ct state established,related accept
    iifname "{IFACE_PREFIX}*" counter drop
  }}
}}
"""


def cluster_objects(coredns_image: str) -> str:
    """The cluster's side of the node (hack/node/cluster-objects.yaml, filled in)."""
    template = string.Template((HACK / "node" / "cluster-objects.yaml").read_text())
    return template.substitute(
        taint=REAL_NODE_LABEL,
        api_proxy_ip=API_PROXY_IP,
        api_proxy_port=API_PROXY_PORT,
        coredns_image=coredns_image,
        cluster_dns_ip=CLUSTER_DNS_IP,
    )
