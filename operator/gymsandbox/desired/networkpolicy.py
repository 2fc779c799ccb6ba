"""The host's NetworkPolicy: deny all egress but DNS to the cluster resolver, the broker and the allowlist."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gymsandbox.desired.labels import child_labels, selector
from gymsandbox.desired.names import owned_child_name
from gymsandbox.desired.owner import TEMPLATE_HASH_ANNOTATION, Manifest, Owner, template_hash
from gymsandbox.policy.cluster import ClusterPolicy
from gymsandbox.policy.egress import ResolvedTarget

NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"  # set by the API server on every namespace
DNS_PORT = 53


def egress_policy_name(owner: Owner) -> str:
    return owned_child_name(owner.kind, owner.name, "NetworkPolicy")


def _peer(namespace: str, pod_selector: Mapping[str, str]) -> dict[str, object]:
    return {
        "namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: namespace}},
        "podSelector": {"matchLabels": dict(pod_selector)},
    }


def dns_rule(policy: ClusterPolicy) -> dict[str, object]:
    return {
        "to": [_peer(policy.dns.namespace, policy.dns.pod_selector)],
        "ports": [{"protocol": "UDP", "port": DNS_PORT}, {"protocol": "TCP", "port": DNS_PORT}],
    }


def broker_rule(policy: ClusterPolicy) -> dict[str, object]:
    return {
        "to": [_peer(policy.broker.namespace, policy.broker.pod_selector)],
        "ports": [{"protocol": "TCP", "port": policy.broker.port}],
    }


def target_rules(resolved: Sequence[ResolvedTarget]) -> list[dict[str, object]]:
    """One rule per allow entry: its resolved CIDRs on its TCP port."""
    return [
        {
            "to": [{"ipBlock": {"cidr": cidr}} for cidr in target.cidrs],
            "ports": [{"protocol": "TCP", "port": target.port}],
        }
        for target in resolved
        if target.cidrs  # `to: []` would mean every destination: an entry with no address allows nothing
    ]


def egress_rules(policy: ClusterPolicy, resolved: Sequence[ResolvedTarget]) -> list[dict[str, object]]:
    """A host's egress: DNS first, then the broker, then the allowlist."""
    return [dns_rule(policy), broker_rule(policy), *target_rules(resolved)]


def episode_egress_rules(
    policy: ClusterPolicy, resolved: Sequence[ResolvedTarget]
) -> list[dict[str, object]]:
    """An episode's egress: nothing, or DNS and its allowlist; never the broker (episodes do not call it)."""
    targets = target_rules(resolved)
    return [dns_rule(policy), *targets] if targets else []


def egress_policy(owner: Owner, rules: list[dict[str, object]]) -> Manifest:
    """Deny all egress of the owner's pod but `rules`; the digest annotation lets a cheap check spot edits."""
    spec: dict[str, object] = {"podSelector": {"matchLabels": selector(owner)}, "policyTypes": ["Egress"]}
    if rules:  # the API server drops an empty list; leaving it out keeps stored and desired equal
        spec["egress"] = rules
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": owner.metadata(
            egress_policy_name(owner), child_labels(owner), {TEMPLATE_HASH_ANNOTATION: template_hash(spec)}
        ),
        "spec": spec,
    }
