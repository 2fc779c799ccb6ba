"""A real local Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok)
on 127.0.0.1, and where this machine can run it, one real node beside it.

Standard library only, so that it runs before the project's virtualenv exists. Modules by what they handle,
each importing only those listed before it:

    paths        where everything lives: the repository, the cache, the state directory
    console      the one-line progress messages on stderr
    pins         the pinned versions in hack/versions.env
    processes    processes started, recorded, waited on and stopped by PID
    tools        the pinned binaries (hack/build-binaries.sh) and kubectl
    pki          the cluster CA and the certificates it signs (openssl)
    kubeconfig   kubeconfig files for the components and the admin
    kwok         the fake nodes: kwok's stages, CRDs, nodes, RuntimeClasses, exec into their pods
    hoststate    the host state the real node must leave as it found it
    images       OCI image archives for the real node, built without a container engine
    nodeconfig   the real node's names, addresses and configuration files
    node         the real node: kubelet, containerd, CNI, kube-proxy, kube-network-policies, CoreDNS
    controlplane `up`, `down` and `status` of the whole cluster
    cli          `python -m hack.localcluster ...`
"""
