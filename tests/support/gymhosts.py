"""Helpers for GymHost integration tests: the sample manifests, applying them, and waiting on status."""

from __future__ import annotations

import base64
import copy
import json
import os
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import yaml
from hack.localcluster.paths import ROOT
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gymsandbox.api.names import GROUP, VERSION
from tests.support.cluster import Cluster

T = TypeVar("T")


def host_wait_seconds(default: int) -> int:
    """How long a test waits for a host to reach a Ready reason. test_chart_rbac.py's child runs shorten it
    (GYMSANDBOX_TEST_HOST_WAIT_SECONDS): there the named test is meant to fail, and it would take the whole
    wait to; their control run (every rule in place, the same wait) shows the shorter wait is enough."""
    return int(os.environ.get("GYMSANDBOX_TEST_HOST_WAIT_SECONDS", default))


def eventually(check: Callable[[], T | None], timeout: float = 30, what: str = "condition") -> T:
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.2)


def sample() -> tuple[dict[str, Any], dict[str, Any]]:
    """(PVC, GymHost) from examples/gymhost.yaml, fresh copies."""
    claim, host = yaml.safe_load_all((ROOT / "examples" / "gymhost.yaml").read_text())
    return copy.deepcopy(claim), copy.deepcopy(host)


def set_path(obj: dict[str, Any], dotted: str, value: Any) -> None:
    """Set `a.b.c` in a nested dict; a value of DELETE removes the key."""
    *parents, last = dotted.split(".")
    for key in parents:
        obj = obj.setdefault(key, {})
    if value is DELETE:
        obj.pop(last, None)
    else:
        obj[last] = value


DELETE = object()


def apply(cluster: Cluster, namespace: str, *manifests: Mapping[str, Any], check: bool = True) -> Any:
    return cluster.kubectl_run(
        "apply",
        "-n",
        namespace,
        "-f",
        "-",
        stdin="\n---\n".join(json.dumps(m) for m in manifests),
        check=check,
    )


def ready_condition(obj: Mapping[str, Any]) -> dict[str, Any]:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "Ready"), {})


class Hosts:
    """Read GymHosts and their children in one namespace."""

    def __init__(self, api_client: client.ApiClient, namespace: str) -> None:
        self.namespace = namespace
        self.custom = client.CustomObjectsApi(api_client)
        self.core = client.CoreV1Api(api_client)
        self.networking = client.NetworkingV1Api(api_client)

    def get(self, name: str) -> dict[str, Any] | None:
        try:
            obj: dict[str, Any] = self.custom.get_namespaced_custom_object(
                GROUP, VERSION, self.namespace, "gymhosts", name
            )
        except ApiException as e:
            if e.status == 404:
                return None
            raise
        return obj

    def ready(self, name: str) -> dict[str, Any]:
        return ready_condition(self.get(name) or {})

    def wait_reason(self, name: str, reason: str, timeout: float | None = None) -> dict[str, Any]:
        """Wait until Ready's reason is `reason` (by default, host_wait_seconds(30)); returns the object."""
        timeout = host_wait_seconds(30) if timeout is None else timeout

        def reached() -> dict[str, Any] | None:
            obj = self.get(name)
            return obj if obj and ready_condition(obj).get("reason") == reason else None

        try:
            return eventually(reached, timeout, f"gymhost {name} Ready reason {reason}")
        except AssertionError:
            raise AssertionError(
                f"gymhost {name}: wanted reason {reason}, last Ready: {self.ready(name)}"
            ) from None

    def children_of_episodes(self) -> dict[str, list[str]]:
        return self.children("app.kubernetes.io/managed-by=gymsandbox,app.kubernetes.io/component=episode")

    def children(self, selector: str = "app.kubernetes.io/managed-by=gymsandbox") -> dict[str, list[str]]:
        """Names of the Pods, Secrets, NetworkPolicies and Services the operator made in the namespace."""
        return {
            "pods": [
                p.metadata.name
                for p in self.core.list_namespaced_pod(self.namespace, label_selector=selector).items
            ],
            "secrets": [
                s.metadata.name
                for s in self.core.list_namespaced_secret(self.namespace, label_selector=selector).items
            ],
            "networkpolicies": [
                n.metadata.name
                for n in self.networking.list_namespaced_network_policy(
                    self.namespace, label_selector=selector
                ).items
            ],
            "services": [
                s.metadata.name
                for s in self.core.list_namespaced_service(self.namespace, label_selector=selector).items
            ],
        }


def ready_host(cluster: Cluster, namespace: str, hosts: Hosts, **changes: Any) -> None:
    """The sample claim and GymHost, with `changes` (`spec__episodes__maxConcurrent=3` sets that path),
    applied and HostReady."""
    claim, host = sample()
    for path, value in changes.items():
        set_path(host, path.replace("__", "."), value)
    apply(cluster, namespace, claim, host)
    hosts.wait_reason(host["metadata"]["name"], "HostReady")


def read_token(core: client.CoreV1Api, namespace: str, secret: str) -> str:
    """The lease token a lease Secret holds."""
    return base64.b64decode(core.read_namespaced_secret(secret, namespace).data["token"]).decode()
