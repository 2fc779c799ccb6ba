"""A GymHost's whole verdict (policy/hosts.py), the one its reconcile and its episodes' admission share: the
first refusal of spec, cluster policy and references, then its lifetime; and no episode under a host whose
verdict is not yes, whatever the reason."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from gymsandbox.api.conditions import Reason
from gymsandbox.policy.cluster import USABLE_BY_LABEL, ClusterPolicy, load_policy
from gymsandbox.policy.hosts import HostReferences, HostVerdict, judge_host, parse_host_spec, refused_by_host

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
POLICY = load_policy(EXAMPLES / "policy.yaml")
CREATED = datetime(2026, 12, 7, tzinfo=UTC)
USABLE = {"metadata": {"labels": {USABLE_BY_LABEL: "gymhosts"}}}
UNMARKED: dict[str, Any] = {"metadata": {"labels": {}}}


def example_spec(**changes: Any) -> dict[str, Any]:
    host = next(
        d for d in yaml.safe_load_all((EXAMPLES / "gymhost.yaml").read_text()) if d["kind"] == "GymHost"
    )
    return {**host["spec"], **changes}


def verdict(
    spec: dict[str, Any],
    secrets: dict[str, Any] | None = None,
    claims: dict[str, Any] | None = None,
    now: datetime = CREATED,
) -> HostVerdict:
    claimed = {"gym-storage": USABLE} if claims is None else claims
    return judge_host(parse_host_spec(spec), HostReferences(secrets or {}, claimed), POLICY, CREATED, now)


@pytest.mark.parametrize(
    ("spec", "secrets", "claims", "reason"),
    [
        (example_spec(port="eighty"), None, None, Reason.INVALID_SPEC),
        (example_spec(image="evil.example.org/miner:1"), None, None, Reason.IMAGE_NOT_APPROVED),
        (example_spec(runtime="vm"), None, None, Reason.UNKNOWN_RUNTIME),
        (
            example_spec(envFrom=[{"secretRef": {"name": "team-b"}}]),
            {"team-b": UNMARKED},
            None,
            Reason.SECRET_NOT_ALLOWED,
        ),
        (
            example_spec(envFrom=[{"secretRef": {"name": "gone"}}]),
            {"gone": None},
            None,
            Reason.SECRET_NOT_ALLOWED,
        ),
        (example_spec(), None, {"gym-storage": UNMARKED}, Reason.CLAIM_NOT_ALLOWED),
        # Policy before references: the first refusal names the spec's own fault.
        (
            example_spec(image="evil.example.org/miner:1"),
            None,
            {"gym-storage": UNMARKED},
            Reason.IMAGE_NOT_APPROVED,
        ),
    ],
    ids=[
        "invalid",
        "image",
        "runtime",
        "secret-unmarked",
        "secret-missing",
        "claim-unmarked",
        "policy-first",
    ],
)
def test_the_first_refusal_of_spec_policy_and_references_is_the_verdict(
    spec: dict[str, Any], secrets: dict[str, Any] | None, claims: dict[str, Any] | None, reason: Reason
) -> None:
    judged = verdict(spec, secrets, claims)
    assert judged.refusal is not None
    assert judged.refusal.reason == reason
    assert not judged.runs


def with_storage(path: str, mount_path: str) -> dict[str, Any]:
    """The example spec with the mountPath of `path` (environment, workspace) changed."""
    storage = example_spec()["storage"]
    return example_spec(storage={**storage, path: {**storage[path], "mountPath": mount_path}})


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        (
            with_storage("environment", "/x/../workspace/env"),
            "storage.environment.mountPath: Value error, must",
        ),
        (with_storage("workspace", "/workspace/"), "path in normal form"),
        (
            with_storage("workspace", "/tmp/workspace"),
            "the operator's own /var/run/secrets/gymsandbox and /tmp",
        ),
        (example_spec(env=[{"name": "HF_TOKEN", "value": "x"}]), "env HF_TOKEN: looks like a credential"),
    ],
    ids=["dot-dot", "trailing-slash", "inside-tmp", "credential-name"],
)
def test_a_stored_spec_the_api_server_would_refuse_now_is_refused_by_the_operator_too(
    spec: dict[str, Any], words: str
) -> None:
    """An object stored under an older CRD meets the same rules on its next reconcile: it gets no pod."""
    judged = verdict(spec)

    assert judged.refusal is not None
    assert (judged.refusal.reason, words in judged.refusal.message) == (Reason.INVALID_SPEC, True)
    assert not judged.runs


def test_a_host_within_policy_and_its_lifetime_runs_until_it_expires() -> None:
    spec = example_spec(lifetime={"ttlSeconds": 600, "expiryPolicy": "Delete"})
    running = verdict(spec, now=CREATED + timedelta(seconds=599))
    assert running.runs
    assert running.expires_at == CREATED + timedelta(seconds=600)
    expired = verdict(spec, now=CREATED + timedelta(seconds=600))
    assert expired.expired
    assert not expired.runs
    assert expired.refusal is None


def test_a_host_without_a_ttl_ends_as_its_field_description_says_at_the_policys_cap() -> None:
    """What `kubectl explain gymhost.spec.lifetime.ttlSeconds` tells a user (the generated CRD) is what
    happens: unset, the host expires at creation plus the policy's caps.maxTTLSeconds, a day by default."""
    crd = yaml.safe_load(
        (Path(__file__).resolve().parents[2] / "crds" / "gymhosts.gymsandbox.dev.yaml").read_text()
    )
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    described = schema["properties"]["spec"]["properties"]["lifetime"]["properties"]["ttlSeconds"][
        "description"
    ]
    default_cap = ClusterPolicy().caps.max_ttl_seconds
    assert f"caps.maxTTLSeconds ({default_cap}, a day" in described
    assert default_cap == 86_400
    spec = example_spec(lifetime={"expiryPolicy": "Delete"})
    assert verdict(spec).expires_at == CREATED + timedelta(seconds=POLICY.caps.max_ttl_seconds)


def test_a_claim_not_created_yet_is_not_a_refusal_the_pod_waits_for_it() -> None:
    assert verdict(example_spec(), claims={"gym-storage": None}).runs


@pytest.mark.parametrize(
    ("judged", "words"),
    [
        (verdict(example_spec(port="eighty")), "GymHost h has an invalid spec"),
        (
            verdict(example_spec(), claims={"gym-storage": UNMARKED}),
            "GymHost h is refused: PersistentVolumeClaim",
        ),
        (verdict(example_spec(image="evil.example.org/miner:1")), "GymHost h is refused: "),
        (
            verdict(example_spec(lifetime={"ttlSeconds": 60}), now=CREATED + timedelta(hours=1)),
            "GymHost h expired at 2026-12-07T00:01:00Z",
        ),
    ],
    ids=["invalid", "claim", "policy", "expired"],
)
def test_a_host_refused_for_any_reason_admits_no_episode(judged: HostVerdict, words: str) -> None:
    refusal = refused_by_host("h", judged)
    assert refusal is not None
    assert refusal.reason == Reason.HOST_NOT_READY
    assert refusal.message.startswith(words)


def test_a_host_that_runs_refuses_no_episode_for_itself() -> None:
    assert refused_by_host("h", verdict(example_spec())) is None
