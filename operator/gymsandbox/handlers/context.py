"""What every handler shares, kept in kopf's memo: the cluster policy, the API access and the resolver."""

from __future__ import annotations

import os
from dataclasses import dataclass

from gymsandbox.handlers.kube import Kube
from gymsandbox.policy.cluster import ClusterPolicy
from gymsandbox.policy.egress import Resolver, system_resolver

# How often every object is reconciled even without events: drift repair and DNS re-resolution.
RESYNC_SECONDS = float(os.environ.get("GYMSANDBOX_RESYNC_SECONDS", "10"))


@dataclass(frozen=True)
class OperatorContext:
    policy: ClusterPolicy
    kube: Kube
    resolver: Resolver = system_resolver
