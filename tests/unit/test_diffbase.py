"""kopf's last-handled configuration is kept as digests (runner.DigestDiffBaseStorage): small for any spec,
and still different whenever the spec is."""

from __future__ import annotations

import json
from typing import Any

import kopf
import pytest

from gymsandbox.handlers.common import RESOURCES as PLURALS
from gymsandbox.runner import CHANGE_HANDLED_KINDS, DigestDiffBaseStorage, digest

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


KOPF_STORAGE = kopf.AnnotationsDiffBaseStorage(prefix="gymsandbox.dev", key="last-handled-configuration")


def digested(essence: Any) -> dict[str, Any]:
    return {key: {"sha256": digest(value)} for key, value in essence.items()}


@pytest.mark.parametrize("extra_fields", [None, ["status.phase"], [("metadata", "ownerReferences")]])
def test_the_digests_are_those_of_kopfs_own_essence(extra_fields: list[Any] | None) -> None:
    """What is left out before kopf copies the body (status, metadata but labels and annotations) is only
    what kopf's essence drops, and an extra field still counts."""
    live = kopf.Body(
        {
            "apiVersion": "gymsandbox.dev/v1alpha1",
            "kind": "GymHost",
            "metadata": {
                "name": "h",
                "uid": "u-1",
                "resourceVersion": "7",
                "labels": {"a": "b"},
                "annotations": {"note": "x", "kubectl.kubernetes.io/last-applied-configuration": "{}"},
                "ownerReferences": [{"kind": "X", "name": "o", "uid": "u-0"}],
                "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}],
            },
            "spec": {"image": "a"},
            "status": {"phase": "Ready", "episodes": {"active": 3}},
        }
    )
    ours = STORAGE.build(body=live, extra_fields=extra_fields)
    assert ours == digested(KOPF_STORAGE.build(body=live, extra_fields=extra_fields))
    if extra_fields:
        assert ours != STORAGE.build(body=live)


def test_only_the_kinds_named_get_an_essence() -> None:
    storage = DigestDiffBaseStorage(
        prefix="gymsandbox.dev", key="last-handled-configuration", kinds={"GymHost"}
    )
    host = kopf.Body({"kind": "GymHost", "metadata": {"name": "h"}, "spec": {"image": "a"}})
    pod = kopf.Body({"kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": []}})
    assert storage.build(body=host) == STORAGE.build(body=host)
    assert storage.build(body=pod) == {}


def test_every_handler_that_compares_essences_is_on_a_kind_that_gets_one() -> None:
    """A timer or on.update handler on another kind would see no change ever (its essence is empty).
    Importing gymsandbox.runner registered the handlers."""
    registry = kopf.get_default_registry()
    handlers = [*registry._changing.get_all_handlers(), *registry._spawning.get_all_handlers()]
    plurals = {h.selector.any_name or h.selector.plural for h in handlers if h.selector is not None}
    assert plurals == {PLURALS[kind] for kind in CHANGE_HANDLED_KINDS}
