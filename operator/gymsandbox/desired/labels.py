"""Labels the operator puts on children; selectors use exactly these."""

from __future__ import annotations

from gymsandbox.api.names import LABEL_COMPONENT, LABEL_HOST, LABEL_MANAGED_BY, MANAGED_BY
from gymsandbox.desired.names import label_value

COMPONENT_GYMHOST = "gymhost"


def host_selector(host_name: str) -> dict[str, str]:
    """Selects the host's pod: the NetworkPolicy's podSelector and the Service's selector."""
    return {LABEL_HOST: label_value(host_name), LABEL_COMPONENT: COMPONENT_GYMHOST}


def host_labels(host_name: str) -> dict[str, str]:
    return {LABEL_MANAGED_BY: MANAGED_BY, **host_selector(host_name)}
