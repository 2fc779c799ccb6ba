"""`kubectl exec` and `kubectl logs` on the fake nodes: kwok runs exec commands as local processes, each pod
in its own directory, and serves a pod's log from a file (hack/localcluster/kwok.py `enable_exec`).

These pin what kwok v0.8.0 does, quirks included, since the broker's tests run on it: a non-zero exit
code reaches the client only inside an error message, stdin never reaches end-of-file, and a command
outlives a client that gave up on it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hack.localcluster.kwok import enable_exec
from hack.localcluster.paths import cluster_paths
from kubernetes import client

from tests.integration.test_control_plane import restricted_pod
from tests.support.archives import tar_of, untar
from tests.support.cluster import Cluster
from tests.support.gymhosts import eventually

pytestmark = pytest.mark.integration

MakePod = Callable[..., Path]


@pytest.fixture
def kwok(cluster: Cluster) -> object:
    """The local control plane's state (hack/localcluster/paths.py Paths); its kwok is the one these tests
    configure."""
    paths = cluster_paths()
    ours = paths.kubeconfig.exists() and paths.kubeconfig.resolve() == cluster.kubeconfig.resolve()
    if not (cluster.local or ours):
        pytest.skip("needs the local control plane's kwok (hack/localcluster)")
    return paths


@pytest.fixture
def make_pod(kwok: object, core: client.CoreV1Api, namespace: str) -> MakePod:
    """Creates a pod whose exec and logs kwok serves, waits until it is Ready, returns its directory."""

    def make(name: str, log_lines: tuple[str, ...] = ()) -> Path:
        # The Exec and Logs objects first, so kwok serves the pod as soon as it is Ready.
        workdir = enable_exec(kwok, namespace, name, log_lines)
        create_ready_pod(core, namespace, name)
        return workdir

    return make


def create_ready_pod(core: client.CoreV1Api, namespace: str, name: str) -> None:
    core.create_namespaced_pod(namespace, restricted_pod(name))

    def ready() -> bool:
        conditions = core.read_namespaced_pod(name, namespace).status.conditions or []
        return any(c.type == "Ready" and c.status == "True" for c in conditions)

    eventually(ready, what=f"pod {name} Ready")


def kubectl(
    cluster: Cluster, namespace: str, *args: str, stdin: bytes | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [str(cluster.kubectl), f"--kubeconfig={cluster.kubeconfig}", "-n", namespace, *args],
        input=stdin,
        capture_output=True,
        check=False,
        timeout=timeout,
    )


def test_exec_runs_the_command_in_the_pods_own_directory(
    cluster: Cluster, namespace: str, make_pod: MakePod
) -> None:
    workdir = make_pod("sandbox")
    result = kubectl(cluster, namespace, "exec", "sandbox", "--", "sh", "-c", 'echo hi; pwd; echo "$HOME"')
    assert result.returncode == 0, result.stderr
    assert result.stdout.decode().splitlines() == ["hi", str(workdir), str(workdir)]


def test_a_pod_without_its_exec_object_gets_no_exec_and_no_logs(
    cluster: Cluster, core: client.CoreV1Api, namespace: str, kwok: object
) -> None:
    create_ready_pod(core, namespace, "bare")
    result = kubectl(cluster, namespace, "exec", "bare", "--", "true")
    assert result.returncode != 0
    assert b"no exec found" in result.stderr
    logs = kubectl(cluster, namespace, "logs", "bare")
    assert logs.returncode != 0
    assert b"no logs found" in logs.stderr


def test_a_nonzero_exit_fails_the_exec_and_its_code_is_in_the_message(
    cluster: Cluster, namespace: str, make_pod: MakePod
) -> None:
    make_pod("sandbox")
    result = kubectl(
        cluster, namespace, "exec", "sandbox", "--", "sh", "-c", "echo out; echo err >&2; exit 3"
    )
    assert result.returncode != 0
    assert result.stdout == b"out\n"
    assert result.stderr.startswith(b"err\n")
    # kwok wraps the process's exit error, so the API server reports an InternalError, not exit code 3.
    assert b"exit status 3" in result.stderr


def test_tar_upload_through_stdin_then_download_round_trips_the_bytes(
    cluster: Cluster, namespace: str, make_pod: MakePod
) -> None:
    workdir = make_pod("sandbox")
    files = {"payload/blob.bin": os.urandom(300_000), "payload/nested/notes.txt": b"line\r\n\x00end"}
    archive = tar_of(files)
    # GNU tar stops at the end-of-archive blocks, so it needs no end-of-file on stdin (kwok never sends one).
    upload = kubectl(cluster, namespace, "exec", "-i", "sandbox", "--", "tar", "-x", "-f", "-", stdin=archive)
    assert upload.returncode == 0, upload.stderr
    assert (workdir / "payload" / "blob.bin").read_bytes() == files["payload/blob.bin"]
    download = kubectl(cluster, namespace, "exec", "sandbox", "--", "tar", "-c", "-f", "-", "payload")
    assert download.returncode == 0, download.stderr
    assert untar(download.stdout) == files


def test_stdin_reads_must_be_bounded_by_length(cluster: Cluster, namespace: str, make_pod: MakePod) -> None:
    workdir = make_pod("sandbox")
    # A tar stream not padded to tar's 10 KiB record: GNU tar would wait for the rest of the record.
    archive = tar_of({"short.txt": b"x" * 700})[: 512 + 1024 + 1024]
    command = f"head -c {len(archive)} | tar -x -f -"
    result = kubectl(cluster, namespace, "exec", "-i", "sandbox", "--", "sh", "-c", command, stdin=archive)
    assert result.returncode == 0, result.stderr
    assert (workdir / "short.txt").read_bytes() == b"x" * 700


def test_files_of_one_pod_are_not_in_another_pods_directory(
    cluster: Cluster, namespace: str, make_pod: MakePod
) -> None:
    first, second = make_pod("first"), make_pod("second")
    upload = kubectl(
        cluster,
        namespace,
        "exec",
        "-i",
        "first",
        "--",
        "tar",
        "-x",
        "-f",
        "-",
        stdin=tar_of({"secret.txt": b"mine"}),
    )
    assert upload.returncode == 0, upload.stderr
    listing = kubectl(cluster, namespace, "exec", "second", "--", "ls", "-A")
    assert listing.returncode == 0, listing.stderr
    assert listing.stdout == b""
    assert (first / "secret.txt").read_bytes() == b"mine"
    assert not (second / "secret.txt").exists()


def test_a_long_command_is_bounded_by_timeout_inside_the_pod(
    cluster: Cluster, namespace: str, make_pod: MakePod
) -> None:
    make_pod("sandbox")
    started = time.monotonic()
    result = kubectl(cluster, namespace, "exec", "sandbox", "--", "timeout", "1", "sleep", "30", timeout=20)
    assert time.monotonic() - started < 10
    assert result.returncode != 0
    assert b"exit status 124" in result.stderr


def test_a_client_that_gives_up_leaves_the_command_running(
    cluster: Cluster, namespace: str, make_pod: MakePod
) -> None:
    workdir = make_pod("sandbox")
    with pytest.raises(subprocess.TimeoutExpired):
        kubectl(
            cluster, namespace, "exec", "sandbox", "--", "sh", "-c", "echo $$ > pid; exec sleep 60", timeout=3
        )
    pid = int((workdir / "pid").read_text())
    try:
        os.kill(pid, 0)  # still running on the host: kwok does not stop it when the stream goes away
    finally:
        os.kill(pid, signal.SIGKILL)


def test_logs_are_the_lines_given_for_the_pod(cluster: Cluster, namespace: str, make_pod: MakePod) -> None:
    make_pod("sandbox", log_lines=("starting gym", "ValueError: gym config missing"))
    logs = kubectl(cluster, namespace, "logs", "sandbox")
    assert logs.returncode == 0, logs.stderr
    assert logs.stdout == b"starting gym\nValueError: gym config missing\n"
    tail = kubectl(cluster, namespace, "logs", "sandbox", "--tail=1")
    assert tail.stdout == b"ValueError: gym config missing\n"
