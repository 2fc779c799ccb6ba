"""Admission of an EpisodeSandbox under its GymHost and the cluster policy: pure checks, first refusal wins.

Concurrency (the FIFO queue) is decided separately, by `queue.py`, from the host's episodes as listed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gymsandbox.api.conditions import Reason
from gymsandbox.api.episode import EpisodeSandboxSpec
from gymsandbox.api.gymhost import GymHostSpec
from gymsandbox.policy.admission import Refusal, resources_refusal
from gymsandbox.policy.cluster import ClusterPolicy, image_approved
from gymsandbox.policy.egress import (
    EgressError,
    EgressTarget,
    check_forbidden,
    egress_targets,
    network_within,
    parse_allow_entry,
)


@dataclass(frozen=True)
class EpisodeRequest:
    """An episode's spec with what it is judged against."""

    spec: EpisodeSandboxSpec
    host: GymHostSpec
    policy: ClusterPolicy


def episode_runtime(spec: EpisodeSandboxSpec, host: GymHostSpec) -> str:
    """The profile an episode runs in: its own, else the host's episodes.runtime, else the host's runtime."""
    return spec.runtime or host.episodes.runtime or host.runtime


def episode_ttl_seconds(spec: EpisodeSandboxSpec, host: GymHostSpec) -> int:
    return spec.lifetime.ttl_seconds or host.episodes.default_ttl_seconds


def check_image(request: EpisodeRequest) -> Refusal | None:
    image = request.spec.image
    if not image_approved(image, request.policy.approved_images):
        return Refusal(Reason.IMAGE_NOT_APPROVED, f'image "{image}" is not on the cluster\'s approved list')
    if not image_approved(image, request.host.episodes.images):
        return Refusal(Reason.IMAGE_NOT_APPROVED, f'image "{image}" is not in the host\'s episodes.images')
    return None


def check_runtime(request: EpisodeRequest) -> Refusal | None:
    allowed = request.host.episodes.runtime or request.host.runtime
    runtime = episode_runtime(request.spec, request.host)
    if runtime != allowed:
        return Refusal(
            Reason.UNKNOWN_RUNTIME,
            f'runtime "{runtime}" is not allowed for this host\'s episodes (allowed: "{allowed}")',
        )
    if runtime not in request.policy.runtime_profiles:
        return Refusal(
            Reason.UNKNOWN_RUNTIME, f'runtime "{runtime}" is not a runtime profile of this cluster'
        )
    return None


def check_resources(request: EpisodeRequest) -> Refusal | None:
    return resources_refusal(request.spec.resources, request.policy)


def check_ttl(request: EpisodeRequest) -> Refusal | None:
    ttl = episode_ttl_seconds(request.spec, request.host)
    for cap, whose in (
        (request.host.episodes.max_ttl_seconds, "the host's episodes.maxTTLSeconds"),
        (request.policy.caps.max_ttl_seconds, "the cluster cap"),
    ):
        if ttl > cap:
            return Refusal(Reason.TTL_OVER_CAP, f"lifetime.ttlSeconds {ttl} exceeds {whose} of {cap}")
    return None


def covered(target: EgressTarget, host_targets: list[EgressTarget]) -> bool:
    """True when one of the host's entries allows at least everything `target` asks for."""
    for allowed in host_targets:
        if allowed.port != target.port:
            continue
        if target.network is None and allowed.network is None and target.host == allowed.host:
            return True
        if (
            target.network is not None
            and allowed.network is not None
            and network_within(target.network, allowed.network)
        ):
            return True
    return False


def check_egress(request: EpisodeRequest) -> Refusal | None:
    host_targets = egress_targets(request.host.egress)
    for entry in request.spec.egress.allow:
        try:
            target = parse_allow_entry(entry)
            egress = request.policy.egress
            check_forbidden(target, egress.allowed_private_networks, denied=egress.denied_networks)
        except EgressError as e:
            return Refusal(Reason.EGRESS_INVALID, str(e))
        if not covered(target, host_targets):
            return Refusal(
                Reason.EGRESS_NOT_SUBSET, f"egress entry {entry} is not within the host's allowlist"
            )
    return None


EPISODE_CHECKS: tuple[Callable[[EpisodeRequest], Refusal | None], ...] = (
    check_image,
    check_runtime,
    check_resources,
    check_ttl,
    check_egress,
)


def admit_episode(request: EpisodeRequest) -> Refusal | None:
    """The first refusal of EPISODE_CHECKS, or None when the episode may take (or wait for) a slot."""
    for check in EPISODE_CHECKS:
        refusal = check(request)
        if refusal:
            return refusal
    return None
