"""The signing key's Secret: made once by the operator, read by the broker. No decisions."""

from __future__ import annotations

import logging
import time

from kubernetes.client.exceptions import ApiException

from gymsandbox.kube.client import SECRET, Kube
from gymsandbox.leases import SIGNING_KEY_SECRET, SigningKey, key_from_secret
from gymsandbox.leases import signing_key_secret as signing_key_manifest


class SigningKeyError(Exception):
    """The operator cannot hold a signing key, so it cannot issue any lease: it refuses to start."""


def ensure_signing_key(kube: Kube, namespace: str) -> SigningKey:
    """The key in the operator's namespace, created on first start. Only the trusted side reads it."""
    secret = kube.get(SECRET, namespace, SIGNING_KEY_SECRET)
    if secret is None:
        try:
            secret = kube.create(
                SECRET, signing_key_manifest(namespace, SIGNING_KEY_SECRET, SigningKey.generate())
            )
        except ApiException as e:
            if e.status == 404:
                raise SigningKeyError(
                    f"namespace {namespace} does not exist (create it, or pass --operator-namespace)"
                ) from None
            if e.status != 409:
                raise SigningKeyError(
                    f"cannot create Secret {namespace}/{SIGNING_KEY_SECRET}: HTTP {e.status} {e.reason}"
                ) from None
            secret = kube.get(SECRET, namespace, SIGNING_KEY_SECRET)  # another instance made it first
    if secret is None:
        raise SigningKeyError(f"Secret {namespace}/{SIGNING_KEY_SECRET} vanished while being created")
    try:
        return key_from_secret(secret)
    except ValueError as e:
        raise SigningKeyError(str(e)) from None


def wait_for_signing_key(kube: Kube, namespace: str, *, timeout: float, poll: float = 1.0) -> SigningKey:
    """The key the operator creates on its first start, read-only: the broker may read it, never make it."""
    deadline = time.monotonic() + timeout
    waiting_logged = False
    while True:
        try:
            secret = kube.get(SECRET, namespace, SIGNING_KEY_SECRET)
        except ApiException as e:
            raise SigningKeyError(
                f"cannot read Secret {namespace}/{SIGNING_KEY_SECRET}: HTTP {e.status} {e.reason}"
            ) from None
        if secret is not None:
            try:
                return key_from_secret(secret)
            except ValueError as e:
                raise SigningKeyError(str(e)) from None
        if time.monotonic() >= deadline:
            raise SigningKeyError(
                f"Secret {namespace}/{SIGNING_KEY_SECRET} does not exist after {timeout:.0f} s: the operator "
                "creates it on its first start; is the operator running with --operator-namespace "
                f"{namespace}?"
            )
        if not waiting_logged:
            logging.getLogger(__name__).info(
                "waiting for the operator to create Secret %s/%s", namespace, SIGNING_KEY_SECRET
            )
            waiting_logged = True
        time.sleep(poll)
