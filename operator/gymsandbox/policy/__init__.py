"""Cluster policy and egress parsing: pure functions, no Kubernetes I/O."""

from gymsandbox.policy.admission import Refusal, admit_gymhost, host_ttl_seconds
from gymsandbox.policy.cluster import ClusterPolicy, PolicyError, RuntimeProfile, image_approved, load_policy
from gymsandbox.policy.egress import (
    EgressError,
    EgressTarget,
    ResolutionError,
    ResolvedTarget,
    check_forbidden,
    egress_targets,
    model_endpoint_target,
    parse_allow_entry,
    resolve,
)
from gymsandbox.policy.quantity import parse_quantity

__all__ = [
    "ClusterPolicy",
    "EgressError",
    "EgressTarget",
    "PolicyError",
    "Refusal",
    "ResolutionError",
    "ResolvedTarget",
    "RuntimeProfile",
    "admit_gymhost",
    "check_forbidden",
    "egress_targets",
    "host_ttl_seconds",
    "image_approved",
    "load_policy",
    "model_endpoint_target",
    "parse_allow_entry",
    "parse_quantity",
    "resolve",
]
