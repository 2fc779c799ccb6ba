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


SANDBOX_CHILDREN = f"{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_COMPONENT}={COMPONENT_EPISODE}"
HOST_CHILDREN = f"{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_COMPONENT}={COMPONENT_GYMHOST}"


def sandbox_pod_labels(owner: Owner, host_name: str) -> dict[str, str]:
    """An episode's children's labels, plus its host's name: a pod outliving its episode still counts
    against that host's cap until it is gone."""
    return {**child_labels(owner), LABEL_HOST: label_value(host_name)}


def episodes_pods_selector(names: list[str]) -> str:
    """A label selector for the sandbox pods of these episodes (and no other pods)."""
    return sandbox_pods_selector({label_value(name) for name in names})


def sandbox_pods_selector(episode_labels: set[str]) -> str:
    """The sandbox pods whose episode label is one of these."""
    return f"{SANDBOX_CHILDREN},{LABEL_EPISODE} in ({','.join(sorted(episode_labels))})"


def host_sandbox_pods_selector(host_name: str) -> str:
    """Every sandbox pod of this host's episodes, whether or not its episode still exists."""
    return f"{SANDBOX_CHILDREN},{LABEL_HOST}={label_value(host_name)}"
