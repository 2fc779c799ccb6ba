"""Labels the operator puts on children; selectors use exactly these."""

from __future__ import annotations

from gymsandbox.api.names import LABEL_COMPONENT, LABEL_EPISODE, LABEL_HOST, LABEL_MANAGED_BY, MANAGED_BY
from gymsandbox.desired.names import label_value
from gymsandbox.desired.owner import Owner

COMPONENT_GYMHOST = "gymhost"
COMPONENT_EPISODE = "episode"
OWNER_LABELS = {
    "GymHost": (LABEL_HOST, COMPONENT_GYMHOST),
    "EpisodeSandbox": (LABEL_EPISODE, COMPONENT_EPISODE),
}


def selector(owner: Owner) -> dict[str, str]:
    """Selects the owner's pod: the NetworkPolicy's podSelector and the Service's selector."""
    key, component = OWNER_LABELS[owner.kind]
    return {key: label_value(owner.name), LABEL_COMPONENT: component}


def child_labels(owner: Owner) -> dict[str, str]:
    return {LABEL_MANAGED_BY: MANAGED_BY, **selector(owner)}


def episodes_pods_selector(names: list[str]) -> str:
    """A label selector for the sandbox pods of these episodes (and no other pods)."""
    values = ",".join(sorted({label_value(name) for name in names}))
    return (
        f"{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_COMPONENT}={COMPONENT_EPISODE},{LABEL_EPISODE} in ({values})"
    )
