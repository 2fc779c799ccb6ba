"""The owner of children: a controller ownerReference, shared metadata, and a stable template hash."""

from __future__ import annotations

import pytest

from gymsandbox.api.names import API_VERSION
from gymsandbox.desired.owner import Owner, template_hash

OWNER = Owner(
    kind="GymHost", name="swe-gym-run-1", namespace="evals", uid="3f0c7a52-1d1e-4c41-9b52-7c5a0f1e9d10"
)


def test_reference_marks_the_owner_as_controller() -> None:
    assert OWNER.reference()["controller"] is True


def test_reference_blocks_owner_deletion_until_the_child_is_gone() -> None:
    assert OWNER.reference()["blockOwnerDeletion"] is True


def test_reference_names_the_owner_by_api_version_kind_name_and_uid() -> None:
    reference = OWNER.reference()
    assert {k: reference[k] for k in ("apiVersion", "kind", "name", "uid")} == {
        "apiVersion": API_VERSION,
        "kind": "GymHost",
        "name": "swe-gym-run-1",
        "uid": "3f0c7a52-1d1e-4c41-9b52-7c5a0f1e9d10",
    }


def test_metadata_carries_exactly_one_owner_reference() -> None:
    meta = OWNER.metadata("swe-gym-run-1-host", {"a": "b"})
    assert meta["ownerReferences"] == [OWNER.reference()]


def test_metadata_puts_the_child_in_the_owner_namespace() -> None:
    meta = OWNER.metadata("swe-gym-run-1-host", {"a": "b"})
    assert (meta["name"], meta["namespace"], meta["labels"]) == ("swe-gym-run-1-host", "evals", {"a": "b"})


@pytest.mark.parametrize("annotations", [None, {}])
def test_metadata_omits_annotations_when_there_are_none(annotations: dict[str, str] | None) -> None:
    assert "annotations" not in OWNER.metadata("n", {}, annotations)


def test_metadata_keeps_given_annotations() -> None:
    assert OWNER.metadata("n", {}, {"k": "v"})["annotations"] == {"k": "v"}


def test_template_hash_is_stable_under_dict_key_order() -> None:
    first = {"image": "x", "env": [{"name": "A", "value": "1"}], "nested": {"a": 1, "b": 2}}
    second = {"nested": {"b": 2, "a": 1}, "env": [{"value": "1", "name": "A"}], "image": "x"}
    assert template_hash(first) == template_hash(second)


def test_template_hash_is_the_same_for_equal_content() -> None:
    assert template_hash({"a": [1, 2, {"b": None}]}) == template_hash({"a": [1, 2, {"b": None}]})


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ({"image": "registry/gym:1"}, {"image": "registry/gym:2"}),
        ({"a": 1}, {"a": "1"}),
        ({"a": [1, 2]}, {"a": [2, 1]}),
        ({"a": 1}, {"a": 1, "b": None}),
        ({"a": {"b": True}}, {"a": {"b": False}}),
        ({}, []),
    ],
)
def test_template_hash_differs_for_different_content(first: object, second: object) -> None:
    assert template_hash(first) != template_hash(second)


def test_template_hash_is_pinned_across_processes() -> None:
    # The hash is stored on live pods; a restarted operator must compute the same value for the same content.
    assert template_hash({}) == "44136fa355b3678a"  # sha256(b"{}")[:16]
