"""The Service that gives the host a stable endpoint."""

from __future__ import annotations

from gymsandbox.api.gymhost import GymHostSpec
from gymsandbox.desired.labels import child_labels, selector
from gymsandbox.desired.names import owned_child_name
from gymsandbox.desired.owner import Manifest, Owner


def host_service_name(owner: Owner) -> str:
    return owned_child_name(owner.kind, owner.name, "Service")


def host_endpoint(owner: Owner, spec: GymHostSpec) -> str:
    return f"http://{host_service_name(owner)}.{owner.namespace}.svc:{spec.port}"


def host_service(owner: Owner, spec: GymHostSpec) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": owner.metadata(host_service_name(owner), child_labels(owner)),
        "spec": {
            "type": "ClusterIP",
            "selector": selector(owner),
            "ports": [{"name": "http", "protocol": "TCP", "port": spec.port, "targetPort": "http"}],
        },
    }
