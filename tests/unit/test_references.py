"""Which Secrets and claims a GymHost may use (policy/references.py): labelled ones only, never ours."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from gymsandbox.api.conditions import Reason
from gymsandbox.api.gymhost import GymHostSpec
from gymsandbox.policy.cluster import ClusterPolicy
from gymsandbox.policy.references import refused_references, secret_values
from tests.unit.test_desired_pod import make_spec

USABLE = {"gymsandbox.dev/usable-by": "gymhosts"}
POLICY = ClusterPolicy()


def secret(name: str, labels: dict[str, str] | None = None, **data: str) -> dict[str, Any]:
    encoded = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
    return {"metadata": {"name": name, "labels": labels or {}}, "data": encoded}


def claim(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels or {}}}


SPEC: GymHostSpec = make_spec(
    envFrom=[{"secretRef": {"name": "openai-credentials"}}], **{"storage.dataset": None}
)
CLAIMS = {"gym-storage": claim("gym-storage", USABLE)}


def refusal(secrets: dict[str, Any], claims: dict[str, Any] = CLAIMS, policy: ClusterPolicy = POLICY) -> str:
    refused = refused_references(SPEC, secrets, claims, policy)
    assert refused is not None
    return f"{refused.reason}: {refused.message}"


def test_a_labelled_secret_and_claim_are_usable() -> None:
    assert refused_references(SPEC, {"openai-credentials": secret("x", USABLE)}, CLAIMS, POLICY) is None


@pytest.mark.parametrize(
    ("found", "words"),
    [
        (None, "envFrom Secret openai-credentials does not exist"),
        (secret("x"), "lacks the label gymsandbox.dev/usable-by=gymhosts"),
        (secret("x", {"gymsandbox.dev/usable-by": "everyone"}), "lacks the label"),
        # Another run's lease Secret, labelled usable or not: it is the operator's.
        (
            secret("x", {**USABLE, "app.kubernetes.io/managed-by": "gymsandbox"}),
            "envFrom Secret openai-credentials is the operator's own",
        ),
    ],
    ids=["missing", "unlabelled", "other-value", "operators-own"],
)
def test_any_other_secret_is_refused(found: dict[str, Any] | None, words: str) -> None:
    text = refusal({"openai-credentials": found})
    assert text.startswith(f"{Reason.SECRET_NOT_ALLOWED}: ")
    assert words in text


def test_the_signing_key_is_refused_even_with_an_open_selector() -> None:
    spec = make_spec(
        envFrom=[{"secretRef": {"name": "gymsandbox-lease-signing-key"}}], **{"storage.dataset": None}
    )
    policy = ClusterPolicy.model_validate({"references": {"secretSelector": {}}})
    refused = refused_references(spec, {"gymsandbox-lease-signing-key": secret("k")}, CLAIMS, policy)
    assert refused is not None
    assert "is the operator's own" in refused.message


def test_an_unlabelled_claim_is_refused_and_a_missing_one_left_to_wait() -> None:
    secrets = {"openai-credentials": secret("x", USABLE)}
    assert refusal(secrets, {"gym-storage": claim("gym-storage")}).startswith(f"{Reason.CLAIM_NOT_ALLOWED}: ")
    assert refused_references(SPEC, secrets, {"gym-storage": None}, POLICY) is None


def test_an_empty_selector_allows_every_claim() -> None:
    policy = ClusterPolicy.model_validate({"references": {"claimSelector": {}}})
    secrets = {"openai-credentials": secret("x", USABLE)}
    assert refused_references(SPEC, secrets, {"gym-storage": claim("gym-storage")}, policy) is None


def test_secret_values_are_decoded_and_short_ones_left_out() -> None:
    found = {"a": secret("a", API_KEY="sk-123456", PIN="12"), "b": None}
    assert secret_values(found) == ("sk-123456",)
