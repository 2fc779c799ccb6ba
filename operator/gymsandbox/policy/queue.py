"""FIFO admission under a host's episodes.maxConcurrent, decided from one listing of the host's episodes.

The decision is pure; the caller lists the episodes (a quorum read, so its own earlier admissions are
seen), applies the plan, and holds a per-host lock so two plans never overlap.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gymsandbox.api.names import LABEL_EPISODE_UID


@dataclass(frozen=True)
class EpisodeSlot:
    """One episode as the planner sees it."""

    name: str
    created: datetime
    admitted: bool = False
    closing: bool = (
        False  # being deleted: its slot passes to its pod, counted among `lingering` while it runs
    )
    admissible: bool = True  # False when policy refused it or it timed out: it never queues
    expires_at: datetime | None = None  # for admitted episodes
    wait_deadline: datetime | None = None  # created + admissionTimeoutSeconds, when set


@dataclass(frozen=True)
class QueuePlan:
    admit: list[str] = field(default_factory=list)  # take a slot now, in FIFO order
    positions: dict[str, int] = field(default_factory=dict)  # still waiting: 1 is next
    timed_out: list[str] = field(default_factory=list)  # waited longer than admissionTimeoutSeconds
    expired: list[str] = field(default_factory=list)  # admitted and past expiresAt: reap
    active: int = 0  # slots held after this plan
    queued: int = 0  # waiting after this plan


def plan_queue(
    episodes: Sequence[EpisodeSlot], max_concurrent: int, now: datetime, *, lingering: int = 0
) -> QueuePlan:
    """`lingering`: sandbox pods still running without an open episode; each holds a slot until it is gone."""
    live = [e for e in episodes if not e.closing]
    holding = [e for e in live if e.admitted]
    expired = [e.name for e in holding if e.expires_at is not None and now >= e.expires_at]
    # An expired episode keeps its slot until it is deleted: the reaper frees it, not the planner.
    candidates = sorted(
        (e for e in live if not e.admitted and e.admissible), key=lambda e: (e.created, e.name)
    )
    # Giving up is final: an episode past its admission deadline never takes a slot, even one just freed.
    timed_out = [e.name for e in candidates if e.wait_deadline is not None and now >= e.wait_deadline]
    waiting = [e for e in candidates if e.name not in timed_out]
    free = max(0, max_concurrent - len(holding) - lingering)
    admit = [e.name for e in waiting[:free]]
    queue = [e.name for e in waiting[free:]]
    return QueuePlan(
        admit=admit,
        positions={name: position for position, name in enumerate(queue, start=1)},
        timed_out=timed_out,
        expired=expired,
        active=len(holding) + len(admit),
        queued=len(queue),
    )


_OVER = ("Succeeded", "Failed")


@dataclass(frozen=True)
class Lingering:
    """A host's sandbox pods whose episode is not open (gone, closing, or never seen)."""

    holding: int = 0  # still running (terminating or not): each holds a slot until it is gone
    to_end: list[str] = field(default_factory=list)  # episode uids whose pods are not terminating yet


def lingering_sandboxes(pods: Iterable[Mapping[str, Any]], open_episodes: set[str]) -> Lingering:
    """Which of a host's sandbox pods run without an open episode (by the episode uid on their label), how
    many of them hold a slot, and whose pods are to be ended now. Looked at in every plan, not only after a
    deletion event: an episode deleted with its pod orphaned is gone from the episodes' store the moment its
    event arrives, and a plan run by another worker before the deletion's own sweep would otherwise give its
    slot away while the pod still runs."""
    lingering = [
        pod
        for pod in pods
        if (pod["metadata"].get("labels") or {}).get(LABEL_EPISODE_UID) not in open_episodes
    ]
    to_end = {
        str(pod["metadata"]["labels"][LABEL_EPISODE_UID])
        for pod in lingering
        if not pod["metadata"].get("deletionTimestamp")
        and LABEL_EPISODE_UID in (pod["metadata"].get("labels") or {})
    }
    holding = sum(1 for pod in lingering if (pod.get("status") or {}).get("phase") not in _OVER)
    return Lingering(holding=holding, to_end=sorted(to_end))


EXACT_HEAD = 3  # the first in line always see their exact place


def position_due(stored: int | None, planned: int, *, still: bool) -> bool:
    """Whether a waiting episode's queuePosition is written now. While its host's queue moves (slots
    freeing), a position is rewritten near the head, or once it has halved: every admission shifts the
    whole queue, and rewriting each position would cost a write per waiting episode per admission. Once the
    queue has been `still` for a moment, every position is made exact."""
    if stored == planned:
        return False
    if stored is None or still or planned <= EXACT_HEAD or planned > stored:
        return True
    return planned <= stored // 2
