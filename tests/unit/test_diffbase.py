"""kopf's last-handled configuration is kept as digests (runner.DigestDiffBaseStorage): small for any spec,
and still different whenever the spec is."""

from __future__ import annotations

import json
from typing import Any

import kopf

from gymsandbox.runner import DigestDiffBaseStorage

STORAGE = DigestDiffBaseStorage(prefix="gymsandbox.dev", key="last-handled-configuration")


def body(spec: dict[str, Any], labels: dict[str, str] | None = None) -> kopf.Body:
    return kopf.Body(
        {"metadata": {"name": "h", "labels": labels or {"a": "b"}}, "spec": spec, "status": {"x": 1}}
    )


def test_the_essence_is_digests_whatever_the_size_of_the_spec() -> None:
    huge = {"env": [{"name": f"V{i}", "value": "x" * 4096} for i in range(128)]}
    essence = STORAGE.build(body=body(huge))
    assert set(essence) == {"spec", "metadata"}
    assert len(json.dumps(essence)) < 256


def test_a_changed_spec_or_label_changes_its_digest_and_status_does_not() -> None:
    base = STORAGE.build(body=body({"image": "a"}))
    assert STORAGE.build(body=body({"image": "b"}))["spec"] != base["spec"]
    assert STORAGE.build(body=body({"image": "a"}, {"a": "c"}))["metadata"] != base["metadata"]
    same = kopf.Body(
        {"metadata": {"name": "h", "labels": {"a": "b"}}, "spec": {"image": "a"}, "status": {"y": 2}}
    )
    assert STORAGE.build(body=same) == base
