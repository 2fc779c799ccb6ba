"""The owner of a set of children: what every builder needs to name, label and attach them."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gymsandbox.api.names import API_VERSION, GROUP

TEMPLATE_HASH_ANNOTATION = f"{GROUP}/template-hash"

# A Kubernetes object as plain JSON-shaped data, the way the builders make it and the API returns it.
Manifest = dict[str, Any]


@dataclass(frozen=True)
class Owner:
    kind: str
    name: str
    namespace: str
    uid: str

    def reference(self) -> dict[str, object]:
        """A controller ownerReference: the garbage collector deletes the child with its owner."""
        return {
            "apiVersion": API_VERSION,
            "kind": self.kind,
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }

    def metadata(
        self, name: str, labels: dict[str, str], annotations: dict[str, str] | None = None
    ) -> dict[str, object]:
        meta: dict[str, object] = {
            "name": name,
            "namespace": self.namespace,
            "labels": labels,
            "ownerReferences": [self.reference()],
        }
        if annotations:
            meta["annotations"] = annotations
        return meta


def template_hash(template: object) -> str:
    """A stable digest of a child's desired content; a changed digest means the child must be replaced."""
    encoded = json.dumps(template, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(encoded).hexdigest()[:16]


def controlled_by(child: Mapping[str, Any], owner_uid: str) -> bool:
    """The child's controller reference names this owner's uid: it is the owner's, whatever its name."""
    refs = (child.get("metadata") or {}).get("ownerReferences") or []
    return any(ref.get("uid") == owner_uid and ref.get("controller") for ref in refs)
