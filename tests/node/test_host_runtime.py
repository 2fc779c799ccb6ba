"""A GymHost under `crun` and under `gvisor` on the real node: Ready through its real readiness probe, and
inside
the container each promise of the pod spec holds (mounts, root filesystem, identity, no token)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kubernetes import client
from tests.node.conftest import HEALTH_BODY, Volume, exec_in, make_volume, module_namespace, node_host
from tests.support.cluster import Cluster
from tests.support.gymhosts import Hosts, apply, eventually, read_token
from tests.support.processes import OperatorProcess

from gymsandbox.api.names import GROUP, VERSION

RUNTIMES = ["crun", "gvisor"]
UID = 65532


@dataclass(frozen=True)
class RunningHost:
    runtime: str
    namespace: str
    name: str
    pod: str
    volume: Volume
    status: dict[str, object]


@pytest.fixture(scope="module", params=RUNTIMES)
def running_host(
    request: pytest.FixtureRequest,
    cluster: Cluster,
    core: client.CoreV1Api,
    api_client: client.ApiClient,
    operator: OperatorProcess,
    real_node: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[RunningHost]:
    """One Ready host per runtime, shared by this module's tests (each only reads or writes its own file)."""
    runtime = request.param
    for namespace in module_namespace(core, tmp_path_factory, runtime):
        for volume in make_volume(cluster, namespace, real_node, tmp_path_factory.mktemp(runtime)):
            name = f"{runtime}-host"
            apply(cluster, namespace, node_host(name, runtime))
            host = Hosts(api_client, namespace).wait_reason(name, "HostReady", timeout=180)
            yield RunningHost(runtime, namespace, name, f"{name}-host", volume, host["status"])


def sh(cluster: Cluster, host: RunningHost, script: str) -> tuple[int, str]:
    result = exec_in(cluster, host.namespace, host.pod, script)
    return result.returncode, (result.stdout + result.stderr).strip()


def test_host_pod_runs_on_the_real_node_in_its_runtime_class(
    running_host: RunningHost, core: client.CoreV1Api, real_node: str
) -> None:
    pod = core.read_namespaced_pod(running_host.pod, running_host.namespace)
    assert pod.spec.node_name == real_node
    assert pod.spec.runtime_class_name == running_host.runtime
    container = pod.status.container_statuses[0]
    assert container.ready is True
    assert container.started is True
    assert container.restart_count == 0


def test_readiness_probe_is_answered_by_the_container(running_host: RunningHost, cluster: Cluster) -> None:
    # The kubelet probed /health (Ready above); the same server answers from inside the pod with the file.
    code, out = sh(cluster, running_host, "nc 127.0.0.1 8080 <<'EOF'\nGET /health HTTP/1.0\n\nEOF")
    assert code == 0, out
    assert out.startswith("HTTP/1.1 200 OK"), out
    assert out.endswith(HEALTH_BODY.strip()), out


def test_environment_sub_path_is_read_only(running_host: RunningHost, cluster: Cluster) -> None:
    code, out = sh(cluster, running_host, "echo tampered > /env/health")
    assert code != 0
    # runc and crun answer EROFS; gVisor checks permissions first, so a non-owner sees EACCES.
    assert "Read-only file system" in out or "Permission denied" in out, out
    assert (running_host.volume.path / "environments/env-1/health").read_text() == HEALTH_BODY


def test_workspace_is_writable_and_the_file_lands_on_the_volume(
    running_host: RunningHost, cluster: Cluster
) -> None:
    code, out = sh(
        cluster, running_host, "echo result-42 > /workspace/result.txt && cat /workspace/result.txt"
    )
    assert (code, out) == (0, "result-42")
    sub_path = str(running_host.status["workspaceSubPath"])
    assert (running_host.volume.path / sub_path / "result.txt").read_text() == "result-42\n"


def test_episodes_workspaces_are_read_only_to_the_host(running_host: RunningHost, cluster: Cluster) -> None:
    """The host cannot create anything where its episodes' workspaces appear: no symlink planted there can
    redirect an episode's mount."""
    code, out = sh(cluster, running_host, "ln -s ../workspace /episodes/planted")
    assert code != 0
    assert "Read-only file system" in out or "Permission denied" in out, out
    episodes_dir = running_host.volume.path / str(running_host.status["episodesSubPath"])
    assert episodes_dir.is_dir()
    assert not (episodes_dir / "planted").is_symlink()


def test_root_filesystem_is_read_only(running_host: RunningHost, cluster: Cluster) -> None:
    code, out = sh(cluster, running_host, "touch /probe-root-write")
    assert code != 0
    assert "Read-only file system" in out or "Permission denied" in out, out


def test_container_has_no_service_account_token(running_host: RunningHost, cluster: Cluster) -> None:
    code, out = sh(cluster, running_host, "ls /var/run/secrets/kubernetes.io/serviceaccount /run/secrets")
    assert code != 0, f"token directory present: {out}"
    assert out.count("No such file or directory") == 2, out


def test_process_runs_as_the_non_root_uid(running_host: RunningHost, cluster: Cluster) -> None:
    code, out = sh(cluster, running_host, "id -u; id -g")
    assert (code, out.split()) == (0, [str(UID), str(UID)])


def test_home_and_tmp_are_usable(running_host: RunningHost, cluster: Cluster) -> None:
    # The shell image, like most, sets no HOME and has no account for the pod's uid: HOME comes from the pod.
    script = "cd && echo x > .probe && echo y > /tmp/probe && pwd"
    assert sh(cluster, running_host, script) == (0, "/tmp")


def test_kernel_seen_inside_is_the_runtimes(running_host: RunningHost, cluster: Cluster) -> None:
    code, out = sh(cluster, running_host, "dmesg 2>&1 | head -3; uname -r")
    if running_host.runtime == "gvisor":
        assert code == 0
        assert "gVisor" in out, out
    else:
        host_release = Path("/proc/sys/kernel/osrelease").read_text().strip()
        assert out.splitlines()[-1] == host_release, out
        assert "gVisor" not in out


def test_the_lease_token_is_a_file_that_follows_its_renewal(
    running_host: RunningHost, cluster: Cluster, core: client.CoreV1Api, api_client: client.ApiClient
) -> None:
    """The token is also the mounted lease Secret: when the operator renews it (here: for a new lifetime),
    the file in the running pod changes, with no restart; the variable keeps the token it started with."""
    path = "$GYMSANDBOX_LEASE_TOKEN_FILE"
    code, started_with = sh(
        cluster, running_host, f'test "$(cat {path})" = "$GYMSANDBOX_LEASE_TOKEN" && cat {path}'
    )
    assert code == 0, started_with
    client.CustomObjectsApi(api_client).patch_namespaced_custom_object(
        GROUP, VERSION, running_host.namespace, "gymhosts", running_host.name,
        {"spec": {"lifetime": {"ttlSeconds": 7000 + RUNTIMES.index(running_host.runtime)}}},
    )  # fmt: skip
    renewed = eventually(
        lambda: (
            (t := read_token(core, running_host.namespace, f"{running_host.name}-lease")) != started_with
            and t
        ),
        60,
        "the operator renewing the lease token",
    )
    eventually(
        lambda: sh(cluster, running_host, f"cat {path}") == (0, renewed),
        180,
        "the mounted token file following the renewed Secret",
    )
    assert sh(cluster, running_host, 'echo "$GYMSANDBOX_LEASE_TOKEN"') == (0, started_with)
    pod = core.read_namespaced_pod(running_host.pod, running_host.namespace)
    assert pod.status.container_statuses[0].restart_count == 0
