"""The host NetworkPolicy: egress only to DNS, the broker and the resolved allowlist; nothing else."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gymsandbox.api.gymhost import GymHostSpec
from gymsandbox.desired.labels import child_labels
from gymsandbox.desired.names import child_name
from gymsandbox.desired.networkpolicy import egress_policy, egress_policy_name, egress_rules
from gymsandbox.desired.service import host_service
from gymsandbox.policy.cluster import ClusterPolicy, load_policy
from gymsandbox.policy.egress import ResolvedTarget
from tests.unit.conftest import OWNER, SMALL_HOST

EXAMPLE_POLICY = Path(__file__).resolve().parents[2] / "examples" / "policy.yaml"
CUSTOM_POLICY = ClusterPolicy.model_validate(
    {
        "dns": {"namespace": "dns-system", "podSelector": {"app": "coredns", "tier": "dns"}},
        "broker": {"namespace": "brokers", "podSelector": {"app": "broker"}, "port": 9443},
    }
)
TARGETS = [
    ResolvedTarget("203.0.113.0/24:443", 443, ("203.0.113.0/24",)),
    ResolvedTarget("models.example.com:443", 443, ("198.51.100.7/32", "198.51.100.8/32")),
    ResolvedTarget("[2001:db8::1]:8443", 8443, ("2001:db8::1/128",)),
]


@pytest.fixture(scope="module")
def example_policy() -> ClusterPolicy:
    return load_policy(EXAMPLE_POLICY)


def spec_of(policy: dict[str, object]) -> dict[str, Any]:
    spec = policy["spec"]
    assert isinstance(spec, dict)
    return spec


def test_policy_name_is_the_owner_child_name() -> None:
    assert egress_policy_name(OWNER) == child_name("swe-gym-run-1", "egress")


def test_policy_governs_egress_only(example_policy: ClusterPolicy) -> None:
    assert spec_of(egress_policy(OWNER, egress_rules(example_policy, TARGETS)))["policyTypes"] == ["Egress"]


def test_policy_has_no_ingress_rules(example_policy: ClusterPolicy) -> None:
    assert "ingress" not in spec_of(egress_policy(OWNER, egress_rules(example_policy, TARGETS)))


def test_policy_spec_has_nothing_but_selector_types_and_egress(example_policy: ClusterPolicy) -> None:
    assert set(spec_of(egress_policy(OWNER, egress_rules(example_policy, TARGETS)))) == {
        "podSelector",
        "policyTypes",
        "egress",
    }


@pytest.mark.parametrize(
    ("policy", "namespace", "selector"),
    [
        pytest.param(load_policy(EXAMPLE_POLICY), "kube-system", {"k8s-app": "kube-dns"}, id="example"),
        pytest.param(CUSTOM_POLICY, "dns-system", {"app": "coredns", "tier": "dns"}, id="custom"),
    ],
)
def test_first_rule_allows_dns_to_the_configured_resolver_on_udp_and_tcp_53(
    policy: ClusterPolicy, namespace: str, selector: dict[str, str]
) -> None:
    first = spec_of(egress_policy(OWNER, egress_rules(policy, TARGETS)))["egress"][0]
    assert first == {
        "to": [
            {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                "podSelector": {"matchLabels": selector},
            }
        ],
        "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
    }


@pytest.mark.parametrize(
    ("policy", "namespace", "selector", "port"),
    [
        pytest.param(
            load_policy(EXAMPLE_POLICY),
            "gymsandbox-system",
            {"app.kubernetes.io/name": "gymsandbox-broker"},
            8443,
            id="example",
        ),
        pytest.param(CUSTOM_POLICY, "brokers", {"app": "broker"}, 9443, id="custom"),
    ],
)
def test_second_rule_allows_the_broker_on_its_port(
    policy: ClusterPolicy, namespace: str, selector: dict[str, str], port: int
) -> None:
    second = spec_of(egress_policy(OWNER, egress_rules(policy, TARGETS)))["egress"][1]
    assert second == {
        "to": [
            {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                "podSelector": {"matchLabels": selector},
            }
        ],
        "ports": [{"protocol": "TCP", "port": port}],
    }


@pytest.mark.parametrize("count", [0, 1, 3])
def test_policy_has_exactly_one_rule_per_target_after_dns_and_broker(
    example_policy: ClusterPolicy, count: int
) -> None:
    rules = spec_of(egress_policy(OWNER, egress_rules(example_policy, TARGETS[:count])))["egress"]
    assert len(rules) == 2 + count


@pytest.mark.parametrize("index", range(len(TARGETS)))
def test_target_rule_allows_its_cidrs_on_its_tcp_port(example_policy: ClusterPolicy, index: int) -> None:
    target = TARGETS[index]
    rule = spec_of(egress_policy(OWNER, egress_rules(example_policy, TARGETS)))["egress"][2 + index]
    assert rule == {
        "to": [{"ipBlock": {"cidr": cidr}} for cidr in target.cidrs],
        "ports": [{"protocol": "TCP", "port": target.port}],
    }


def test_policy_pod_selector_equals_the_service_selector(example_policy: ClusterPolicy) -> None:
    spec = GymHostSpec.model_validate(SMALL_HOST)
    service_selector = spec_of(host_service(OWNER, spec))["selector"]
    assert spec_of(egress_policy(OWNER, egress_rules(example_policy, TARGETS)))["podSelector"] == {
        "matchLabels": service_selector
    }


def test_policy_is_owned_and_labelled_by_the_host(example_policy: ClusterPolicy) -> None:
    meta = egress_policy(OWNER, egress_rules(example_policy, TARGETS))["metadata"]
    assert isinstance(meta, dict)
    assert (meta["labels"], meta["ownerReferences"], meta["namespace"]) == (
        child_labels(OWNER),
        [OWNER.reference()],
        "evals",
    )
