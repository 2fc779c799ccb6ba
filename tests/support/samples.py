"""The sample policy (examples/policy.yaml) as the tests and the benchmarks start from it (the sample
manifests are gymhosts.sample())."""

from __future__ import annotations

from typing import Any

import yaml
from hack.localcluster.paths import ROOT

POLICY = ROOT / "examples" / "policy.yaml"


def sample_policy() -> dict[str, Any]:
    """examples/policy.yaml, a fresh copy to edit."""
    policy: dict[str, Any] = yaml.safe_load(POLICY.read_text())
    return policy
