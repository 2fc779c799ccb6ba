"""Which namespaces an operator instance serves, matched as kopf matches its --namespace patterns."""

from __future__ import annotations

from typing import cast

import pytest

from gymsandbox.handlers.context import OperatorContext
from gymsandbox.handlers.kube import Kube
from gymsandbox.leases import SigningKey
from gymsandbox.policy.cluster import ClusterPolicy


def context(*patterns: str) -> OperatorContext:
    return OperatorContext(
        policy=ClusterPolicy(), kube=cast(Kube, None), signing_key=SigningKey.generate(), namespaces=patterns
    )


@pytest.mark.parametrize(
    ("patterns", "namespace", "served"),
    [
        ((), "anything", True),
        (("t-*",), "t-one", True),
        (("t-*",), "o-one", False),
        (("evals",), "evals", True),
        (("*", "!kube-*"), "kube-system", False),
        (("*", "!kube-*"), "evals", True),
        (("!o-*",), "t-one", True),
        (("!o-*",), "o-one", False),
    ],
)
def test_namespace_patterns(patterns: tuple[str, ...], namespace: str, served: bool) -> None:
    assert context(*patterns).watches(namespace) is served
