"""Labels the operator puts on children; selectors use exactly these.

Every selector and every delete by selector matches an owner's uid (LABEL_HOST_UID, LABEL_EPISODE_UID): a
name is chosen by whoever creates the object, and a long one is shortened to a label value that another
chosen name can equal. The name labels stay for people (`kubectl get pods -l gymsandbox.dev/episode=NAME`).
"""

from __future__ import annotations

from gymsandbox.api.names import (
    LABEL_COMPONENT,
    LABEL_EPISODE,
    LABEL_EPISODE_UID,
    LABEL_HOST,
    LABEL_HOST_UID,
    LABEL_MANAGED_BY,
    MANAGED_BY,
)
from gymsandbox.desired.names import label_value
from gymsandbox.desired.owner import Owner

COMPONENT_GYMHOST = "gymhost"
COMPONENT_EPISODE = "episode"
# Per owner kind: its name label, its uid label, its children's component.
OWNER_LABELS = {
    "GymHost": (LABEL_HOST, LABEL_HOST_UID, COMPONENT_GYMHOST),
    "EpisodeSandbox": (LABEL_EPISODE, LABEL_EPISODE_UID, COMPONENT_EPISODE),
}


def selector(owner: Owner) -> dict[str, str]:
    """Selects the owner's pod: the NetworkPolicy's podSelector and the Service's selector."""
    _, uid_key, component = OWNER_LABELS[owner.kind]
    return {uid_key: owner.uid, LABEL_COMPONENT: component}


def child_labels(owner: Owner) -> dict[str, str]:
    name_key, _, _ = OWNER_LABELS[owner.kind]
    return {LABEL_MANAGED_BY: MANAGED_BY, name_key: label_value(owner.name), **selector(owner)}


SANDBOX_CHILDREN = f"{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_COMPONENT}={COMPONENT_EPISODE}"
HOST_CHILDREN = f"{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_COMPONENT}={COMPONENT_GYMHOST}"


def sandbox_pod_labels(owner: Owner, host_name: str, host_uid: str) -> dict[str, str]:
    """An episode's children's labels, plus its host's: a pod outliving its episode still counts against
    that host's cap until it is gone."""
    return {**child_labels(owner), LABEL_HOST: label_value(host_name), LABEL_HOST_UID: host_uid}


def sandbox_pods_selector(episode_uids: set[str]) -> str:
    """A label selector for the sandbox pods of the episodes of these uids (and no other pods)."""
    return f"{SANDBOX_CHILDREN},{LABEL_EPISODE_UID} in ({','.join(sorted(episode_uids))})"


def host_sandbox_pods_selector(host_uid: str) -> str:
    """Every sandbox pod of this host's episodes, whether or not its episode still exists."""
    return f"{SANDBOX_CHILDREN},{LABEL_HOST_UID}={host_uid}"
