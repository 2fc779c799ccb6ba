"""The host's NetworkPolicy: deny all egress but DNS to the cluster resolver, the broker and the allowlist."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gymsandbox.desired.labels import host_labels, host_selector
from gymsandbox.desired.names import child_name
from gymsandbox.desired.owner import Manifest, Owner
from gymsandbox.policy.cluster import ClusterPolicy
from gymsandbox.policy.egress import ResolvedTarget

NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"  # set by the API server on every namespace
DNS_PORT = 53


def egress_policy_name(owner: Owner) -> str:
    return child_name(owner.name, "egress")


def _peer(namespace: str, pod_selector: Mapping[str, str]) -> dict[str, object]:
    return {
        "namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: namespace}},
        "podSelector": {"matchLabels": dict(pod_selector)},
    }


def egress_rules(policy: ClusterPolicy, resolved: Sequence[ResolvedTarget]) -> list[dict[str, object]]:
    """DNS first, then the broker, then one rule per allow entry (its resolved CIDRs on its port)."""
    rules: list[dict[str, object]] = [
        {
            "to": [_peer(policy.dns.namespace, policy.dns.pod_selector)],
            "ports": [{"protocol": "UDP", "port": DNS_PORT}, {"protocol": "TCP", "port": DNS_PORT}],
        },
        {
            "to": [_peer(policy.broker.namespace, policy.broker.pod_selector)],
            "ports": [{"protocol": "TCP", "port": policy.broker.port}],
        },
    ]
    for target in resolved:
        if not target.cidrs:
            continue  # `to: []` would mean every destination: an entry with no address allows nothing
        rules.append(
            {
                "to": [{"ipBlock": {"cidr": cidr}} for cidr in target.cidrs],
                "ports": [{"protocol": "TCP", "port": target.port}],
            }
        )
    return rules


def egress_policy(owner: Owner, policy: ClusterPolicy, resolved: Sequence[ResolvedTarget]) -> Manifest:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": owner.metadata(egress_policy_name(owner), host_labels(owner.name)),
        "spec": {
            "podSelector": {"matchLabels": host_selector(owner.name)},
            "policyTypes": ["Egress"],
            "egress": egress_rules(policy, resolved),
        },
    }
