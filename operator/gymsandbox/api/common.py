"""Pieces shared by the GymHost and EpisodeSandbox models."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel
from pydantic.config import JsonDict

from gymsandbox.api.conditions import FailureKind

# A Kubernetes quantity such as "500m", "2", "1.5Gi" or "4G"; anything else (e.g. "1Gii") is refused.
QUANTITY_PATTERN = r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$"
DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
# Relative, segments that do not start with "." (so no "." or ".."), no empty segment, no outer slashes.
SUB_PATH_PATTERN = r"^[A-Za-z0-9_-][A-Za-z0-9._-]*(/[A-Za-z0-9_-][A-Za-z0-9._-]*)*$"
# An absolute directory as a process may name it ("." and ".." segments and a trailing "/" allowed): a
# working directory, which nothing compares.
WORKDIR_PATTERN = r"^/([A-Za-z0-9._-]+/?)*$"
# An absolute path of these characters. A mount path must also be in normal form (NORMAL_PATH_PATTERN).
ABSOLUTE_PATH_PATTERN = r"^/[A-Za-z0-9._/-]*$"
# An absolute path in normal form: no empty segment ("//"), no segment of dots alone ("." or ".."), no
# trailing "/" (the root "/" aside). Mount paths are compared as strings (distinct, none inside another),
# which is sound for normal forms only: "/x/../workspace/env" lies inside "/workspace" yet does not start
# with it.
NORMAL_PATH_PATTERN = r"^/(\.*[A-Za-z0-9_-][A-Za-z0-9._-]*(/\.*[A-Za-z0-9_-][A-Za-z0-9._-]*)*)?$"
NORMAL_PATH_MESSAGE = (
    "must be a path in normal form, without '.' or '..' segments, '//' or a trailing '/': mount paths are"
    " compared as written"
)
ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"

Quantity = Annotated[str, Field(pattern=QUANTITY_PATTERN, max_length=32)]
DnsLabel = Annotated[str, Field(pattern=DNS_LABEL_PATTERN, min_length=1, max_length=63)]


def list_map(*keys: str) -> JsonDict:
    """Schema extension for a list whose items are identified by `keys`.

    The API server then refuses two items with the same keys, and server-side apply merges items by them
    instead of replacing the whole list.
    """
    return {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": list(keys)}


def cel(rule: str, message: str, *, reason: str | None = None) -> JsonDict:
    """One `x-kubernetes-validations` entry: a CEL rule the API server enforces, and its refusal message."""
    out: JsonDict = {"rule": rule, "message": message}
    if reason:
        out["reason"] = reason
    return out


ZERO_RESOURCE_MESSAGE = "must be more than 0: to the kubelet a limit of 0 is no limit at all"


def _more_than_zero(value: str) -> str:
    number = value.rstrip("mkMGTPEi")
    if float(number) <= 0:
        raise ValueError(ZERO_RESOURCE_MESSAGE)
    return value


# A resource a pod is limited to: a limit of 0 reads as "no limit" to the kubelet, so 0 is refused by the API
# server (CEL), the models and cluster policy alike.
ResourceQuantity = Annotated[
    str,
    Field(
        pattern=QUANTITY_PATTERN,
        max_length=32,
        json_schema_extra={
            "x-kubernetes-validations": [
                cel("quantity(self).isGreaterThan(quantity('0'))", ZERO_RESOURCE_MESSAGE)
            ]
        },
    ),
    AfterValidator(_more_than_zero),
]


def _normal_path(value: str) -> str:
    if not re.fullmatch(NORMAL_PATH_PATTERN, value):
        raise ValueError(NORMAL_PATH_MESSAGE)
    return value


# Where a volume is mounted in a container: absolute and in normal form, refused otherwise by the API server
# (CEL), the models and so the operator alike, so that comparing mount paths as strings is sound.
MountPath = Annotated[
    str,
    Field(
        pattern=ABSOLUTE_PATH_PATTERN,
        max_length=253,
        json_schema_extra={
            "x-kubernetes-validations": [cel(f"self.matches(r'{NORMAL_PATH_PATTERN}')", NORMAL_PATH_MESSAGE)]
        },
    ),
    AfterValidator(_normal_path),
]


class Model(BaseModel):
    """Frozen, camelCase on the wire, unknown fields refused.

    The API server prunes unknown fields before the operator sees an object; refusing them here catches
    typos in code and tests.
    """

    model_config = ConfigDict(
        frozen=True, alias_generator=to_camel, populate_by_name=True, extra="forbid", use_enum_values=True
    )

    def wire(self) -> dict[str, object]:
        """The object as the API server stores it: camelCase keys, unset optionals left out."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class Resources(Model):
    """Requests equal limits: what is asked is what is given, so scheduler and caps see the same numbers."""

    cpu: ResourceQuantity = Field("1", description="CPU for the container, e.g. 500m or 2 (more than 0).")
    memory: ResourceQuantity = Field(
        "1Gi", description="Memory for the container, e.g. 512Mi or 4Gi (more than 0)."
    )
    ephemeral_storage: ResourceQuantity = Field(
        "1Gi", description="Scratch disk outside the mounted volumes; the pod is evicted past it."
    )
    gpu: int = Field(0, ge=0, le=16, description="Number of nvidia.com/gpu devices.")


class Condition(Model):
    """A metav1.Condition."""

    type: str = Field(max_length=316, description="Condition type, e.g. Ready.")
    status: Literal["True", "False", "Unknown"] = Field(description="True, False or Unknown.")
    reason: str = Field(max_length=1024, description="CamelCase reason, a stable constant.")
    message: str = Field("", max_length=32768, description="Human-readable detail.")
    observed_generation: int = Field(
        0, ge=0, description="The .metadata.generation the condition was set from."
    )
    last_transition_time: datetime = Field(description="When status last changed.")


# Status conditions, one per type: replaced by type, never appended (metav1.Condition conventions).
Conditions = Annotated[list[Condition], Field(json_schema_extra=list_map("type"))]


class Failure(Model):
    """Why the object cannot become Ready, classified so trainers can mask infrastructure losses."""

    kind: FailureKind = Field(description="Infrastructure, Workload or Policy.")
    reason: str = Field(max_length=128, description="Same constant as the Ready condition's reason.")
    message: str = Field("", max_length=4096, description="What happened.")
    logs_tail: str | None = Field(
        None, max_length=8192, description="Last lines of the container log, if any."
    )


class Lifetime(Model):
    ttl_seconds: int | None = Field(
        None,
        ge=1,
        le=31_536_000,
        description="Seconds after creation when the host expires (status.expiresAt). Unset: the cluster"
        " policy's caps.maxTTLSeconds (86400, a day, unless the admin set another); every host ends.",
    )
    expiry_policy: Literal["Delete", "Retain"] = Field(
        "Delete",
        description="Delete removes the object at expiry; Retain removes only the pod and keeps the record.",
    )


def validation_message(error: ValidationError) -> str:
    """Every problem as `field.path: message`, without echoing the offending input (it may be sensitive)."""
    return "; ".join(
        f"{'.'.join(str(p) for p in problem['loc']) or 'spec'}: {problem['msg']}"
        for problem in error.errors(include_input=False, include_url=False)
    )
