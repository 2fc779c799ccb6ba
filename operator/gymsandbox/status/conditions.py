"""metav1.Condition bookkeeping: replace by type; lastTransitionTime moves only when the status flips."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class ConditionState:
    """A condition as computed, before timestamps: what the status should say now."""

    type: str
    status: bool | None  # None is Unknown
    reason: str
    message: str = ""

    @property
    def status_text(self) -> str:
        return {True: "True", False: "False", None: "Unknown"}[self.status]


def _timestamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def merge_conditions(
    existing: Iterable[Mapping[str, object]],
    computed: Iterable[ConditionState],
    generation: int,
    now: datetime,
) -> list[dict[str, object]]:
    """The new `status.conditions`: one entry per computed type, in computed order.

    Types the operator no longer computes are dropped; others' lastTransitionTime is kept unless the
    status changed.
    """
    previous = {str(c.get("type")): c for c in existing}
    merged = []
    for state in computed:
        before = previous.get(state.type)
        flipped = before is None or before.get("status") != state.status_text
        merged.append(
            {
                "type": state.type,
                "status": state.status_text,
                "reason": state.reason,
                "message": state.message[:32768],
                "observedGeneration": generation,
                "lastTransitionTime": kept
                if (kept := None if flipped else (before or {}).get("lastTransitionTime"))
                else _timestamp(now),
            }
        )
    return merged


def find(conditions: Iterable[Mapping[str, object]], condition_type: str) -> Mapping[str, object] | None:
    return next((c for c in conditions if c.get("type") == condition_type), None)
