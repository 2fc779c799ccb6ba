"""The host Service: a stable ClusterIP endpoint that selects exactly the host's pod."""

from __future__ import annotations

from typing import Any

import pytest

from gymsandbox.api.gymhost import GymHostSpec
from gymsandbox.desired.labels import child_labels, selector
from gymsandbox.desired.names import child_name
from gymsandbox.desired.service import host_endpoint, host_service, host_service_name
from tests.unit.conftest import OWNER, SMALL_HOST


def make_spec(**changes: Any) -> GymHostSpec:
    return GymHostSpec.model_validate({**SMALL_HOST, **changes})


def test_service_name_is_the_owner_child_name() -> None:
    assert host_service_name(OWNER) == child_name("swe-gym-run-1", "host")


def test_service_is_cluster_ip() -> None:
    assert host_service(OWNER, make_spec())["spec"]["type"] == "ClusterIP"


def test_service_selects_the_host_pod_by_the_host_selector() -> None:
    assert host_service(OWNER, make_spec())["spec"]["selector"] == selector(OWNER)


def test_service_selector_is_a_subset_of_the_host_pod_labels() -> None:
    wanted = selector(OWNER)
    labels = child_labels(OWNER)
    assert {k: labels.get(k) for k in wanted} == wanted


@pytest.mark.parametrize("port", [8080, 80, 65535])
def test_service_exposes_the_spec_port_onto_the_named_container_port(port: int) -> None:
    ports = host_service(OWNER, make_spec(port=port))["spec"]["ports"]
    assert ports == [{"name": "http", "protocol": "TCP", "port": port, "targetPort": "http"}]


def test_service_is_owned_by_the_host() -> None:
    assert host_service(OWNER, make_spec())["metadata"]["ownerReferences"] == [OWNER.reference()]


@pytest.mark.parametrize(
    ("port", "expected"),
    [
        (8080, "http://swe-gym-run-1-host.evals.svc:8080"),
        (9000, "http://swe-gym-run-1-host.evals.svc:9000"),
    ],
)
def test_endpoint_is_the_service_dns_name_and_port(port: int, expected: str) -> None:
    assert host_endpoint(OWNER, make_spec(port=port)) == expected
