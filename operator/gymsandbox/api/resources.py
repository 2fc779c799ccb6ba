"""The custom resources this operator serves: their names, models and the columns kubectl prints.

One entry per kind; the CRD generator (gymsandbox.crdgen) and the handlers read their names from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from gymsandbox.api.common import Model
from gymsandbox.api.conditions import ConditionType
from gymsandbox.api.episode import EpisodeSandboxSpec, EpisodeSandboxStatus
from gymsandbox.api.gymhost import GymHostSpec, GymHostStatus
from gymsandbox.api.names import GROUP


@dataclass(frozen=True)
class PrinterColumn:
    """A column of `kubectl get`; json_path is a kubectl JSONPath into the object."""

    name: str
    json_path: str
    type: Literal["string", "integer", "number", "boolean", "date"] = "string"


@dataclass(frozen=True)
class CustomResource:
    """A namespaced kind in GROUP, served and stored at VERSION, with a status subresource."""

    kind: str
    plural: str
    short_names: tuple[str, ...]
    description: str
    spec: type[Model]
    status: type[Model]
    columns: tuple[PrinterColumn, ...]
    # Fields usable in a list's fieldSelector (the operator lists a host's episodes by .spec.hostRef.name).
    selectable_fields: tuple[str, ...] = ()

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def crd_name(self) -> str:
        return f"{self.plural}.{GROUP}"


_READY = f'.status.conditions[?(@.type=="{ConditionType.READY}")]'
READY_COLUMN = PrinterColumn("Ready", f"{_READY}.status")
REASON_COLUMN = PrinterColumn("Reason", f"{_READY}.reason")
RUNTIME_COLUMN = PrinterColumn("Runtime", ".spec.runtime")
# An episode's runtime is often its host's (spec.runtime unset): the column shows the one it runs under.
EFFECTIVE_RUNTIME_COLUMN = PrinterColumn("Runtime", ".status.runtime")
AGE_COLUMN = PrinterColumn("Age", ".metadata.creationTimestamp", "date")

GYMHOST = CustomResource(
    kind="GymHost",
    plural="gymhosts",
    short_names=("gh",),
    description="An isolated environment host for one evaluation run, serving HTTP on status.endpoint.",
    spec=GymHostSpec,
    status=GymHostStatus,
    columns=(
        READY_COLUMN,
        REASON_COLUMN,
        RUNTIME_COLUMN,
        PrinterColumn("Endpoint", ".status.endpoint"),
        AGE_COLUMN,
    ),
)

EPISODE_SANDBOX = CustomResource(
    kind="EpisodeSandbox",
    plural="episodesandboxes",
    short_names=("esb",),
    description="A short-lived sandbox for one episode, owned by a GymHost, admitted under its caps.",
    spec=EpisodeSandboxSpec,
    status=EpisodeSandboxStatus,
    columns=(
        READY_COLUMN,
        REASON_COLUMN,
        PrinterColumn("Host", ".spec.hostRef.name"),
        EFFECTIVE_RUNTIME_COLUMN,
        AGE_COLUMN,
    ),
    selectable_fields=(".spec.hostRef.name",),
)

RESOURCES: tuple[CustomResource, ...] = (GYMHOST, EPISODE_SANDBOX)
