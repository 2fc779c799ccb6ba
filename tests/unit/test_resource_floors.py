"""Resources have floors as well as caps: to the kubelet a limit of 0 is no limit at all, so the models refuse
0 (as the CRDs' CEL rules do on the API server), and cluster policy refuses what is under its floors."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from gymsandbox.api.common import ZERO_RESOURCE_MESSAGE, Resources
from gymsandbox.api.conditions import Reason
from gymsandbox.api.episode import EpisodeResources
from gymsandbox.crdgen import model_schema
from gymsandbox.policy.admission import resources_refusal
from gymsandbox.policy.cluster import ClusterPolicy

ZEROS = ["0", "0m", "0.0", "0Gi", "00Mi"]


@pytest.mark.parametrize("model", [Resources, EpisodeResources])
@pytest.mark.parametrize("field", ["cpu", "memory", "ephemeralStorage"])
@pytest.mark.parametrize("zero", ZEROS)
def test_a_zero_resource_is_refused_by_the_models(model: Any, field: str, zero: str) -> None:
    with pytest.raises(ValidationError, match="must be more than 0"):
        model.model_validate({field: zero})


@pytest.mark.parametrize("model", [Resources, EpisodeResources])
def test_the_smallest_real_quantities_pass_the_models(model: Any) -> None:
    assert model.model_validate({"cpu": "1m", "memory": "1", "ephemeralStorage": "0.5Mi"})


@pytest.mark.parametrize("model", [Resources, EpisodeResources])
@pytest.mark.parametrize("field", ["cpu", "memory", "ephemeralStorage"])
def test_the_crds_refuse_zero_with_the_models_words(model: Any, field: str) -> None:
    rules = model_schema(model, "validation")["properties"][field]["x-kubernetes-validations"]
    assert rules == [
        {"rule": "quantity(self).isGreaterThan(quantity('0'))", "message": ZERO_RESOURCE_MESSAGE}
    ]


@pytest.mark.parametrize(
    ("asked", "reason", "words"),
    [
        ({"cpu": "5m"}, Reason.RESOURCES_UNDER_FLOOR, "resources.cpu 5m is under the cluster floor of 10m"),
        ({"memory": "8Mi"}, Reason.RESOURCES_UNDER_FLOOR, "resources.memory 8Mi is under the cluster floor"),
        ({"ephemeralStorage": "1Mi"}, Reason.RESOURCES_UNDER_FLOOR, "resources.ephemeralStorage 1Mi"),
        ({"cpu": "10m", "memory": "16Mi", "ephemeralStorage": "16Mi"}, None, ""),
        ({"cpu": "9"}, Reason.RESOURCES_OVER_CAP, "resources.cpu 9 exceeds the cluster cap of 8"),
    ],
    ids=["cpu", "memory", "ephemeral-storage", "at-the-floors", "over-cap"],
)
def test_policy_refuses_resources_under_its_floors_as_over_its_caps(
    asked: dict[str, str], reason: Reason | None, words: str
) -> None:
    refusal = resources_refusal(EpisodeResources.model_validate(asked), ClusterPolicy())
    assert (refusal.reason if refusal else None) == reason
    assert words in (refusal.message if refusal else "")


def test_a_policy_whose_floor_is_over_its_cap_is_refused() -> None:
    with pytest.raises(ValidationError, match=r"caps\.minMemory 64Gi is over caps\.maxMemory 32Gi"):
        ClusterPolicy.model_validate({"caps": {"minMemory": "64Gi"}})
