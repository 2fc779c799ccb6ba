"""The Secret that holds the lease signing key (pure manifest shape; the handler creates it once).

The Secret lives in the operator's namespace, is read only by the operator and the broker, and holds
the raw key bytes base64-encoded under ``data["signing-key"]``. Errors name the Secret and what is
wrong with it, never the key material.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

from gymsandbox.api.names import LABEL_MANAGED_BY, MANAGED_BY
from gymsandbox.leases.tokens import MIN_KEY_BYTES, SigningKey

SIGNING_KEY_SECRET = "gymsandbox-lease-signing-key"  # noqa: S105 - the Secret's name, not a secret
SIGNING_KEY_DATA_KEY = "signing-key"


def signing_key_secret(namespace: str, name: str, key: SigningKey) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace, "labels": {LABEL_MANAGED_BY: MANAGED_BY}},
        "type": "Opaque",
        "data": {SIGNING_KEY_DATA_KEY: base64.b64encode(key.to_bytes()).decode("ascii")},
    }


def _describe(secret: Mapping[str, Any]) -> str:
    metadata = secret.get("metadata")
    if isinstance(metadata, Mapping):
        name, namespace = metadata.get("name"), metadata.get("namespace")
        if isinstance(name, str) and isinstance(namespace, str):
            return f"Secret {namespace}/{name}"
        if isinstance(name, str):
            return f"Secret {name}"
    return "signing-key Secret"


def key_from_secret(secret: Mapping[str, Any]) -> SigningKey:
    """Read the signing key back; ValueError (without key material) when missing, short or corrupt."""
    where = _describe(secret)
    data = secret.get("data")
    encoded = data.get(SIGNING_KEY_DATA_KEY) if isinstance(data, Mapping) else None
    if encoded is None:
        raise ValueError(f"{where} has no data[{SIGNING_KEY_DATA_KEY!r}]")
    if not isinstance(encoded, str):
        raise ValueError(f"{where}: data[{SIGNING_KEY_DATA_KEY!r}] is not a base64 string")
    try:
        raw = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"{where}: data[{SIGNING_KEY_DATA_KEY!r}] is not valid base64") from None
    if len(raw) < MIN_KEY_BYTES:
        raise ValueError(
            f"{where}: data[{SIGNING_KEY_DATA_KEY!r}] holds {len(raw)} bytes, need at least {MIN_KEY_BYTES}"
        )
    return SigningKey.from_bytes(raw)
