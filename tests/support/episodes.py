"""Helpers for EpisodeSandbox integration tests."""

from __future__ import annotations

from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gymsandbox.api.names import GROUP, VERSION
from tests.support.gymhosts import eventually

EPISODE_IMAGE = "registry.example.com/episodes/python-sandbox:3.12"


def episode(name: str, host: str = "swe-gym-run-1", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "EpisodeSandbox",
        "metadata": {"name": name},
        "spec": {"hostRef": {"name": host}, "rolloutId": "rollout-1", "image": EPISODE_IMAGE, **spec},
    }


class Episodes:
    def __init__(self, api_client: client.ApiClient, namespace: str) -> None:
        self.namespace = namespace
        self.custom = client.CustomObjectsApi(api_client)

    def create(self, manifest: dict[str, Any]) -> dict[str, Any]:
        created: dict[str, Any] = self.custom.create_namespaced_custom_object(
            GROUP, VERSION, self.namespace, "episodesandboxes", manifest
        )
        return created

    def get(self, name: str) -> dict[str, Any] | None:
        try:
            obj: dict[str, Any] = self.custom.get_namespaced_custom_object(
                GROUP, VERSION, self.namespace, "episodesandboxes", name
            )
        except ApiException as e:
            if e.status == 404:
                return None
            raise
        return obj

    def all(self) -> list[dict[str, Any]]:
        listed: dict[str, Any] = self.custom.list_namespaced_custom_object(
            GROUP, VERSION, self.namespace, "episodesandboxes"
        )
        return list(listed["items"])

    def patch(self, name: str, body: dict[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object(
            GROUP, VERSION, self.namespace, "episodesandboxes", name, body
        )

    def delete(self, name: str) -> None:
        try:
            self.custom.delete_namespaced_custom_object(
                GROUP, VERSION, self.namespace, "episodesandboxes", name
            )
        except ApiException as e:
            if e.status != 404:
                raise

    @staticmethod
    def condition(obj: dict[str, Any] | None, condition_type: str) -> dict[str, Any]:
        conditions = ((obj or {}).get("status") or {}).get("conditions") or []
        return next((c for c in conditions if c["type"] == condition_type), {})

    def ready_reason(self, name: str) -> str | None:
        return self.condition(self.get(name), "Ready").get("reason")

    def wait_ready(self, name: str, timeout: float = 20) -> None:
        eventually(
            lambda: self.ready_reason(name) == "SandboxReady", timeout=timeout, what=f"episode {name} Ready"
        )
