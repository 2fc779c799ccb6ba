"""The sample specs the unit tests share, as module-level constants (import them from here):

- SAMPLE_HOST: the GymHost spec of examples/gymhost.yaml (without the workspace's episodesMountPath);
- SMALL_HOST: the same host with only what a spec needs (image, runtime, storage);
- PLAIN_HOST: a minimal host of another image and claim (`chess`), for the admission and model tables;
- OWNER: the GymHost its children hang from.

Each is a shared constant: take a changed copy with changed() rather than editing one in place.
"""

from __future__ import annotations

import copy
from typing import Any

from gymsandbox.desired.owner import Owner
from tests.support.gymhosts import set_path

HOST_NAME = "swe-gym-run-1"
HOST_IMAGE = "registry.example.com/gym/swe-env:1.4.2"
EPISODE_IMAGE = "registry.example.com/episodes/python-sandbox:3.12"
OWNER = Owner(kind="GymHost", name=HOST_NAME, namespace="evals", uid="uid-1")

SAMPLE_STORAGE: dict[str, Any] = {
    "claimName": "gym-storage",
    "environment": {"subPath": "environments/swe-env-1.4.2", "mountPath": "/env"},
    "workspace": {"mountPath": "/workspace"},
}
SMALL_HOST: dict[str, Any] = {"image": HOST_IMAGE, "runtime": "kata", "storage": SAMPLE_STORAGE}
SAMPLE_HOST: dict[str, Any] = {
    **SMALL_HOST,
    "port": 8080,
    "readinessPath": "/health",
    "egress": {"allow": ["203.0.113.0/24:443"], "modelEndpoints": ["https://models.example.com/v1"]},
    "env": [{"name": "GYM_TASK_SET", "value": "verified-50"}],
    "resources": {"cpu": "2", "memory": "4Gi", "ephemeralStorage": "10Gi"},
    "lifetime": {"ttlSeconds": 7200, "expiryPolicy": "Delete"},
    "episodes": {
        "maxConcurrent": 8,
        "images": [EPISODE_IMAGE],
        "defaultTTLSeconds": 600,
        "maxTTLSeconds": 1800,
    },
}
PLAIN_HOST: dict[str, Any] = {
    "image": "registry.example.com/gym/chess:1.0",
    "runtime": "kata",
    "storage": {
        "claimName": "gym-data",
        "environment": {"subPath": "envs/chess", "mountPath": "/env"},
        "workspace": {"mountPath": "/workspace"},
    },
}


def changed(spec: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """A deep copy of `spec` with dotted-path changes such as `**{"lifetime.ttlSeconds": 60}` (objects on
    the way are created; tests.support.gymhosts.DELETE removes a key)."""
    result = copy.deepcopy(spec)
    for path, value in changes.items():
        set_path(result, path, value)
    return result
