"""Children of hosts and episodes made to match what their owner wants: each child is read (or, just after its
owner was admitted, created without looking), the planner says what to write (plan/children.py), and the
write is made here. A name taken by an object the owner does not control is a ChildConflictError."""

from __future__ import annotations

from gymsandbox.desired.owner import Manifest, Owner, controlled_by
from gymsandbox.kube.client import (
    NETWORK_POLICY,
    POD,
    ChildConflictError,
    Kind,
    Kube,
    create_or_adopt,
)
from gymsandbox.kube.store import Store
from gymsandbox.plan.children import Write, plan_network_policy, plan_pod


def apply_write(kube: Kube, kind: Kind, owner: Owner, live: Manifest, write: Write) -> Manifest:
    """Make `write` to the owner's child `live`; returns the child as it is afterwards."""
    name = live["metadata"]["name"]
    if write.verb == "conflict":
        raise ChildConflictError(write.why)
    if write.verb == "replace" and write.body is not None:
        return kube.replace(kind, write.body)
    if write.verb == "label" and write.body is not None:
        return kube.patch(kind, owner.namespace, name, {"metadata": {"labels": write.body}})
    if write.verb == "delete":
        kube.delete(kind, owner.namespace, name, uid=write.uid)
    return live


def ensure_network_policy(kube: Kube, owner: Owner, desired: Manifest, *, fresh: bool = False) -> Manifest:
    """Create or adopt the policy; an edited one gets its spec back."""
    existing, created = create_or_adopt(kube, desired, owner.uid, fresh=fresh)
    if created:
        return existing
    return apply_write(
        kube, NETWORK_POLICY, owner, existing, plan_network_policy(existing, desired, owner.uid)
    )


def ensure_pod(
    kube: Kube, owner: Owner, desired: Manifest, *, seen: Store | None = None, fresh: bool = False
) -> Manifest | None:
    """Create the pod, or end it when its template changed or it finished (plan_pod). Returns the live pod.
    `seen`: the pods the watch has seen, read instead of the API (a pod it has not seen yet is created,
    and adopted when it turns out to exist)."""
    name = desired["metadata"]["name"]
    pod = seen.get(owner.namespace, name) if seen is not None else kube.get(POD, owner.namespace, name)
    if pod is None:
        pod, _ = create_or_adopt(kube, desired, owner.uid, fresh=fresh or seen is not None)
    else:
        write = plan_pod(pod, desired, owner.uid)
        pod = apply_write(kube, POD, owner, pod, write)
        if write.verb != "label":
            return pod
    if seen is not None:
        seen.put(pod)
    return pod


def delete_pod(kube: Kube, owner: Owner, name: str, *, seen: Store | None = None) -> None:
    """Delete the owner's pod of that name at once; a pod someone else made under that name is left alone.
    `seen`: as for ensure_pod."""
    pod = seen.get(owner.namespace, name) if seen is not None else kube.get(POD, owner.namespace, name)
    if pod is not None and controlled_by(pod, owner.uid):
        kube.delete(POD, owner.namespace, name, uid=pod["metadata"]["uid"], grace_seconds=0)
