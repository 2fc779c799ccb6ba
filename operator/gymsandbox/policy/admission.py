"""Admission of a GymHost against cluster policy: small pure checks, the first refusal wins.

Each check returns a Refusal (a Reason constant and a message naming the offending spec value and the limit)
or None. Messages quote only spec and policy values. DNS names are not resolved here (that is I/O, done when
the NetworkPolicy is built); addresses written in the spec are checked.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gymsandbox.api.common import Resources
from gymsandbox.api.conditions import Reason
from gymsandbox.api.episode import EpisodeResources
from gymsandbox.api.gymhost import GymHostSpec
from gymsandbox.policy.cluster import ClusterPolicy, image_approved
from gymsandbox.policy.egress import EgressError, check_forbidden, egress_targets
from gymsandbox.policy.quantity import parse_quantity


@dataclass(frozen=True)
class Refusal:
    reason: Reason
    message: str


Check = Callable[[GymHostSpec, ClusterPolicy], "Refusal | None"]


def _not_approved(what: str, image: str) -> Refusal:
    return Refusal(Reason.IMAGE_NOT_APPROVED, f'{what} "{image}" is not on the cluster\'s approved list')


def _unknown_runtime(what: str, name: str, policy: ClusterPolicy) -> Refusal:
    known = ", ".join(sorted(policy.runtime_profiles)) or "none are configured"
    message = f'{what} "{name}" is not a runtime profile of this cluster (profiles: {known})'
    return Refusal(Reason.UNKNOWN_RUNTIME, message)


def _over_cap(reason: Reason, field: str, value: object, cap: object) -> Refusal:
    return Refusal(reason, f"{field} {value} exceeds the cluster cap of {cap}")


def check_image(spec: GymHostSpec, policy: ClusterPolicy) -> Refusal | None:
    return None if image_approved(spec.image, policy.approved_images) else _not_approved("image", spec.image)


def check_runtime(spec: GymHostSpec, policy: ClusterPolicy) -> Refusal | None:
    if spec.runtime in policy.runtime_profiles:
        return None
    return _unknown_runtime("runtime", spec.runtime, policy)


def check_episode_runtime(spec: GymHostSpec, policy: ClusterPolicy) -> Refusal | None:
    runtime = spec.episodes.runtime
    if runtime is None or runtime in policy.runtime_profiles:
        return None
    return _unknown_runtime("episodes.runtime", runtime, policy)


def check_episode_images(spec: GymHostSpec, policy: ClusterPolicy) -> Refusal | None:
    for image in spec.episodes.images:
        if image.endswith("/"):  # a prefix: allowed when it lies under one of the cluster's prefixes
            if not any(image.startswith(p) for p in policy.approved_images if p.endswith("/")):
                return _not_approved("episodes.images prefix", image)
        elif not image_approved(image, policy.approved_images):
            return _not_approved("episodes.images entry", image)
    return None


def check_ttl(spec: GymHostSpec, policy: ClusterPolicy) -> Refusal | None:
    cap = policy.caps.max_ttl_seconds
    ttl = spec.lifetime.ttl_seconds
    if ttl is not None and ttl > cap:
        return _over_cap(Reason.TTL_OVER_CAP, "lifetime.ttlSeconds", ttl, cap)
    if spec.episodes.max_ttl_seconds > cap:
        return _over_cap(Reason.TTL_OVER_CAP, "episodes.maxTTLSeconds", spec.episodes.max_ttl_seconds, cap)
    return None


def check_resources(spec: GymHostSpec, policy: ClusterPolicy) -> Refusal | None:
    return resources_refusal(spec.resources, policy)


def resources_refusal(asked: Resources | EpisodeResources, policy: ClusterPolicy) -> Refusal | None:
    """The first of cpu, memory, ephemeral storage under the cluster's floor or over its cap, or gpu over its
    cap; else None."""
    caps = policy.caps
    for field, value, floor, cap in (
        ("resources.cpu", asked.cpu, caps.min_cpu, caps.max_cpu),
        ("resources.memory", asked.memory, caps.min_memory, caps.max_memory),
        (
            "resources.ephemeralStorage",
            asked.ephemeral_storage,
            caps.min_ephemeral_storage,
            caps.max_ephemeral_storage,
        ),
    ):
        if parse_quantity(value) < parse_quantity(floor) or parse_quantity(value) <= 0:
            return Refusal(
                Reason.RESOURCES_UNDER_FLOOR, f"{field} {value} is under the cluster floor of {floor}"
            )
        if parse_quantity(value) > parse_quantity(cap):
            return _over_cap(Reason.RESOURCES_OVER_CAP, field, value, cap)
    if asked.gpu > caps.max_gpu:
        return _over_cap(Reason.RESOURCES_OVER_CAP, "resources.gpu", asked.gpu, caps.max_gpu)
    return None


def check_episodes(spec: GymHostSpec, policy: ClusterPolicy) -> Refusal | None:
    cap, asked = policy.caps.max_episodes_per_host, spec.episodes.max_concurrent
    if asked > cap:
        return _over_cap(Reason.EPISODES_OVER_CAP, "episodes.maxConcurrent", asked, cap)
    return None


def check_egress_count(spec: GymHostSpec, policy: ClusterPolicy) -> Refusal | None:
    # Entries as written, duplicates included: the cap is on what the spec asks for.
    count = len(spec.egress.allow) + len(spec.egress.model_endpoints)
    cap = policy.caps.max_egress_entries
    if count > cap:
        return Refusal(
            Reason.EGRESS_OVER_CAP,
            f"egress lists {count} entries (allow plus modelEndpoints), over the cluster cap of {cap}",
        )
    return None


def check_egress_targets(spec: GymHostSpec, policy: ClusterPolicy) -> Refusal | None:
    allowed_private, denied = policy.egress.allowed_private_networks, policy.egress.denied_networks
    try:
        for target in egress_targets(spec.egress):
            check_forbidden(target, allowed_private, denied=denied)
    except EgressError as exc:
        return Refusal(Reason.EGRESS_INVALID, str(exc))
    return None


GYMHOST_CHECKS: tuple[Check, ...] = (
    check_image,
    check_runtime,
    check_episode_runtime,
    check_episode_images,
    check_ttl,
    check_resources,
    check_episodes,
    check_egress_count,
    check_egress_targets,
)


def admit_gymhost(spec: GymHostSpec, policy: ClusterPolicy) -> Refusal | None:
    """The first refusal of GYMHOST_CHECKS, in order, or None when the spec is admitted."""
    for check in GYMHOST_CHECKS:
        refusal = check(spec, policy)
        if refusal is not None:
            return refusal
    return None


def host_ttl_seconds(spec: GymHostSpec, policy: ClusterPolicy) -> int:
    """The lifetime to enforce: the spec's ttlSeconds, or the cluster cap when the spec leaves it unset."""
    ttl = spec.lifetime.ttl_seconds
    return policy.caps.max_ttl_seconds if ttl is None else ttl
