"""The pinned versions in hack/versions.env, for the Python tooling (standard library only)."""

from __future__ import annotations

from hack.localcluster.paths import HACK

VERSIONS = HACK / "versions.env"


def pin(name: str) -> str:
    """The value of `NAME=value` in hack/versions.env; a KeyError names a pin that is not there."""
    for line in VERSIONS.read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep and not line.startswith("#") and key.strip() == name:
            return value.strip()
    raise KeyError(f"{name} is not pinned in {VERSIONS}")
