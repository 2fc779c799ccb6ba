"""`gymsandbox policy check`: the operator's own validation of a cluster policy, offline, before anything runs
it. A file is either a policy, or Kubernetes manifests (what `helm template` prints), in which each ConfigMap
holding a `policy.yaml` key is a policy: so the policy the chart would render from an admin's values is
checked as the operator would read it, including what values.schema.json cannot say (quantities, CIDRs,
image prefixes)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import yaml

from gymsandbox.policy.cluster import PolicyError, parse_policy

POLICY_KEY = "policy.yaml"  # the key of the chart's policy ConfigMap (templates/policy-configmap.yaml)


@dataclass(frozen=True)
class Checked:
    """One policy found in a file: where (the file, or the file and its ConfigMap) and what is wrong with it
    (empty: nothing; the operator would start with it)."""

    source: str
    problems: tuple[str, ...] = ()


def policies_in(text: str, source: str) -> Iterator[tuple[str, str]]:
    """(where, policy text) for each policy in `text`: each policy ConfigMap of a manifest stream, else the
    whole text as one policy."""
    try:
        documents: list[Any] = list(yaml.safe_load_all(text))
    except yaml.YAMLError:
        documents = []  # not a manifest stream: checked as a policy, whose loader says what is wrong
    maps = [
        d
        for d in documents
        if isinstance(d, dict) and d.get("kind") == "ConfigMap" and POLICY_KEY in (d.get("data") or {})
    ]
    if not maps:
        yield source, text
        return
    for configmap in maps:
        meta = configmap.get("metadata") or {}
        where = f"{source}: ConfigMap {meta.get('namespace', '')}/{meta.get('name', '')}".replace(" /", " ")
        yield where, str(configmap["data"][POLICY_KEY])


def check_policies(text: str, source: str) -> list[Checked]:
    """Each policy in `text` validated as the operator validates its own at start."""
    checked = []
    for where, policy in policies_in(text, source):
        try:
            parse_policy(policy, where)
        except PolicyError as e:
            checked.append(Checked(where, tuple(e.problems)))
        else:
            checked.append(Checked(where))
    return checked
