"""Lease tokens against live objects: the owner token in the episode's Secret, operate leases derived
from it, and everything that must be refused."""

from __future__ import annotations

import base64
import time
from typing import Any

import pytest
from kubernetes import client

from gymsandbox.leases import (
    SIGNING_KEY_SECRET,
    Scope,
    SigningKey,
    TokenError,
    issue,
    key_from_secret,
    operate_claims,
    verify_live,
)
from tests.support.chart import OPERATOR_NAMESPACE
from tests.support.cluster import Cluster
from tests.support.episodes import Episodes, episode
from tests.support.gymhosts import Hosts, apply, eventually, sample
from tests.support.processes import OperatorProcess

pytestmark = pytest.mark.integration

DESTROY = frozenset({Scope.OWNER})  # what deleting an episode requires
USE = frozenset({Scope.OWNER, Scope.OPERATE})  # what exec and files accept


@pytest.fixture
def key(core: client.CoreV1Api) -> SigningKey:
    secret = client.ApiClient().sanitize_for_serialization(
        core.read_namespaced_secret(SIGNING_KEY_SECRET, OPERATOR_NAMESPACE)
    )
    return key_from_secret(secret)


@pytest.fixture
def live_episode(
    cluster: Cluster, operator: OperatorProcess, namespace: str, hosts: Hosts, api_client: client.ApiClient
) -> tuple[Episodes, str]:
    apply(cluster, namespace, *sample())
    hosts.wait_reason("swe-gym-run-1", "HostReady")
    episodes = Episodes(api_client, namespace)
    episodes.create(episode("leased", rolloutId="rollout-7"))
    episodes.wait_ready("leased")
    return episodes, "leased"


def owner_token(core: client.CoreV1Api, namespace: str) -> str:
    data = core.read_namespaced_secret("leased-sandbox-token", namespace).data
    return base64.b64decode(data["token"]).decode()


def now() -> int:
    return int(time.time())


def refused(token: str, key: SigningKey, live: dict[str, Any], **kwargs: Any) -> str:
    with pytest.raises(TokenError) as error:
        verify_live(token, key, live, now=kwargs.pop("at", now()), **kwargs)
    return error.value.code


def test_owner_token_verifies_against_the_live_episode(
    live_episode: tuple[Episodes, str], core: client.CoreV1Api, key: SigningKey, namespace: str
) -> None:
    episodes, name = live_episode
    claims = verify_live(
        owner_token(core, namespace), key, episodes.get(name) or {}, scopes=DESTROY, now=now()
    )
    assert (claims.scope, claims.rollout_id) == (Scope.OWNER, "rollout-7")


def test_operate_lease_can_use_but_not_destroy(
    live_episode: tuple[Episodes, str], core: client.CoreV1Api, key: SigningKey, namespace: str
) -> None:
    episodes, name = live_episode
    live = episodes.get(name) or {}
    owner = verify_live(owner_token(core, namespace), key, live, scopes=DESTROY, now=now())
    operate = issue(operate_claims(owner, owner.expires_at), key)
    assert (
        verify_live(operate, key, live, scopes=USE, rollout_id="rollout-7", now=now()).scope == Scope.OPERATE
    )
    assert refused(operate, key, live, scopes=DESTROY) == "wrong_scope"
    assert refused(operate, key, live, scopes=USE, rollout_id="rollout-9") == "wrong_rollout"


def test_tampered_and_expired_tokens_are_refused(
    live_episode: tuple[Episodes, str], core: client.CoreV1Api, key: SigningKey, namespace: str
) -> None:
    episodes, name = live_episode
    live = episodes.get(name) or {}
    token = owner_token(core, namespace)
    version, payload, signature = token.split(".")
    tampered = ".".join([version, payload[:-2] + ("AA" if payload[-2:] != "AA" else "BB"), signature])
    assert refused(tampered, key, live, scopes=DESTROY) in ("bad_signature", "malformed")
    claims = verify_live(token, key, live, scopes=DESTROY, now=now())
    assert refused(token, key, live, scopes=DESTROY, at=claims.expires_at) == "expired"
    assert refused(token, SigningKey.generate(), live, scopes=DESTROY) == "bad_signature"


def test_token_of_a_deleted_and_recreated_episode_is_refused(
    live_episode: tuple[Episodes, str], core: client.CoreV1Api, key: SigningKey, namespace: str
) -> None:
    episodes, name = live_episode
    old_token = owner_token(core, namespace)
    episodes.delete(name)
    eventually(lambda: episodes.get(name) is None, timeout=15, what="the episode to go")
    episodes.create(episode(name, rolloutId="rollout-7"))
    episodes.wait_ready(name)
    live = episodes.get(name) or {}
    assert refused(old_token, key, live, scopes=DESTROY) == "stale_object"
    assert verify_live(owner_token(core, namespace), key, live, scopes=DESTROY, now=now())
