"""The sample Gym host end to end, as `make run` deploys it (hack/sample.py), in a release of its own: the
chart's operator and broker as pods on the real node, the host (examples/gym-host/) under gVisor opening
each rollout's episode through NeMo Gym's AsyncSandbox and the gymsandbox provider, from inside its pod,
with its lease as a mounted file. Then the lease-signing key is rotated while the host runs: the host keeps
working without a restart, because the provider's client rereads the token file on a 401.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from hack import sample as hack_sample
from hack.localcluster.paths import cluster_paths
from kubernetes import client
from tests.support.cluster import Cluster
from tests.support.gymhosts import read_token

from gymsandbox.leases.keys import SIGNING_KEY_SECRET

WRONG = "def add(a, b):\n    return a - b\n"
ROTATION_SECONDS = (
    240  # the operator re-signs at its next resync; the kubelet then refreshes the mounted file
)


@pytest.fixture(scope="module")
def sample(cluster: Cluster, real_node: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    if not cluster.local:
        pytest.skip("hack/sample.py deploys to the local cluster (its images are loaded into the real node)")
    suffix = tmp_path_factory.getbasetemp().name[-6:].lower().replace("_", "-")
    deployed = hack_sample.Sample(
        cluster_paths(),
        release=f"gs-sample-{suffix}",
        release_namespace=f"gymsandbox-sample-{suffix}",
        namespace=f"sample-{suffix}",  # outside the session operator's `t-*`: only this release's watches it
    )
    try:
        yield deployed
    finally:
        hack_sample.down(deployed)


@pytest.fixture(scope="module")
def host_pod(sample: Any) -> str:
    return str(hack_sample.up(sample))


def test_a_rollout_is_scored_in_a_sandbox_the_host_opened_through_nemo_gym(
    sample: Any, host_pod: str
) -> None:
    passed = hack_sample.rollout(sample, host_pod)
    assert (passed["status"], passed["reward"], passed["return_code"]) == (200, 1.0, 0), passed
    assert passed["error_type"] is None
    assert passed["report"] == "3/3 passed"  # the file the tests wrote, downloaded from the sandbox
    failed = hack_sample.rollout(sample, host_pod, WRONG)
    assert (failed["reward"], failed["return_code"], failed["report"]) == (0.0, 1, "0/3 passed"), failed


def test_a_rotated_signing_key_is_followed_without_restarting_the_host(
    sample: Any, host_pod: str, core: client.CoreV1Api
) -> None:
    before = core.read_namespaced_pod(host_pod, sample.namespace)
    lease = f"{hack_sample.gym_host({})['metadata']['name']}-lease"
    old_token = read_token(core, sample.namespace, lease)
    core.delete_namespaced_secret(SIGNING_KEY_SECRET, sample.release_namespace)
    sample.kubectl(
        "rollout", "restart", "-n", sample.release_namespace,
        f"deploy/{sample.release}-operator", f"deploy/{sample.release}-broker",
    )  # fmt: skip
    sample.kubectl("rollout", "status", "-n", sample.release_namespace, f"deploy/{sample.release}-broker")
    deadline, answers = time.monotonic() + ROTATION_SECONDS, []
    while True:
        answer = hack_sample.rollout(sample, host_pod)  # a 503 names why no sandbox ran it
        answers.append(answer)
        if answer.get("reward") == 1.0:
            break
        assert time.monotonic() < deadline, f"no rollout succeeded after the rotation: {answers[-3:]}"
        time.sleep(5)
    after = core.read_namespaced_pod(host_pod, sample.namespace)
    assert after.metadata.uid == before.metadata.uid  # the same pod: no restart, no replacement
    assert after.status.container_statuses[0].restart_count == 0
    assert read_token(core, sample.namespace, lease) != old_token  # re-signed with the new key
