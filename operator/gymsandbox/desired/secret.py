"""The lease Secret: the only place an object's lease token lives (issued by gymsandbox.leases)."""

from __future__ import annotations

import base64

from gymsandbox.api.names import LEASE_TOKEN_KEY
from gymsandbox.desired.labels import child_labels
from gymsandbox.desired.names import owned_child_name
from gymsandbox.desired.owner import Manifest, Owner


def lease_secret_name(owner: Owner) -> str:
    return owned_child_name(owner.kind, owner.name, "Secret")


def lease_secret(owner: Owner, token: str) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": owner.metadata(lease_secret_name(owner), child_labels(owner)),
        "type": "Opaque",
        "data": {LEASE_TOKEN_KEY: base64.b64encode(token.encode()).decode()},
    }
