"""Pieces both kinds' handlers use: status timestamps, failure envelopes with log tails, and announcements."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from gymsandbox.api.conditions import ConditionType, Reason
from gymsandbox.kube.client import EVENT, Kube
from gymsandbox.metrics import METRICS
from gymsandbox.status.conditions import ConditionState, find
from gymsandbox.status.pod import SANDBOX_EVENT_REASON, PodFailure, sandbox_overdue
from gymsandbox.status.redaction import redact

if TYPE_CHECKING:
    from gymsandbox.handlers.context import OperatorContext

LOG_TAIL_LINES = 20
LOG_TAIL_CHARS = 4096
SANDBOX_ERROR_CHARS = 1024
# One line per change of Ready (the same change an event announces): what a quiet log keeps.
TRANSITIONS = logging.getLogger("gymsandbox.transitions")
RESOURCES = {"GymHost": "gymhosts", "EpisodeSandbox": "episodesandboxes"}
TAILED_REASONS = frozenset({Reason.CRASH_LOOP_BACK_OFF, Reason.OOM_KILLED, Reason.POD_FAILED})


def needs_reconcile(body: Mapping[str, Any], type: str | None) -> bool:
    """New to this process (a creation, the listing at start, a resync), or a spec its status has not
    observed (an edit; for an episode, a renewal). The object's own status writes are neither."""
    if type in (None, "ADDED"):
        return True
    generation = (body.get("metadata") or {}).get("generation")
    return generation != (body.get("status") or {}).get("observedGeneration")


def now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def timestamp(moment: datetime | None) -> str | None:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if moment else None


def parse_time(text: object) -> datetime | None:
    return datetime.fromisoformat(str(text).replace("Z", "+00:00")) if text else None


def status_changed(current: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Whether merging `new` into `current` would change anything (None and absent are the same)."""
    return any(current.get(key) != value for key, value in new.items())


def logs_tail(kube: Kube, pod: Mapping[str, Any], container: str, secrets: Sequence[str]) -> str | None:
    """The container's last log lines (previous run first), else the termination message the kubelet kept.

    Untrusted code may print its environment: `secrets` (the owner's token, the values of its envFrom
    Secrets), as printed or encoded, and anything shaped like a lease token are redacted
    (status/redaction.py).
    """
    meta = pod["metadata"]
    text = kube.log_tail(meta["namespace"], meta["name"], container, LOG_TAIL_LINES)
    if not text:
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            if status.get("name") == container:
                state, last = status.get("state") or {}, status.get("lastState") or {}
                text = (last.get("terminated") or state.get("terminated") or {}).get("message")
    if not text:
        return None
    text = redact(text, secrets)
    return "\n".join(text.splitlines()[-LOG_TAIL_LINES:])[-LOG_TAIL_CHARS:]


def sandbox_error(kube: Kube, pod: Mapping[str, Any] | None, moment: datetime) -> str | None:
    """Why the kubelet has not made the pod's sandbox (its latest FailedCreatePodSandBox event), asked only
    once the pod is overdue. The kubelet puts it in no pod field."""
    if pod is None or not sandbox_overdue(pod, moment):
        return None
    meta = pod["metadata"]
    events = kube.list(
        EVENT, meta["namespace"], fields=f"involvedObject.uid={meta['uid']},reason={SANDBOX_EVENT_REASON}"
    )
    latest = max(events, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""), default=None)
    message = str((latest or {}).get("message") or "")
    return message[:SANDBOX_ERROR_CHARS] or None


def failure_fields(
    kube: Kube,
    failure: PodFailure | None,
    pod: Mapping[str, Any] | None,
    container: str,
    secrets: Sequence[str],
) -> dict[str, Any] | None:
    """`status.failure`, with the log tail when the workload itself failed."""
    if failure is None:
        return None
    fields: dict[str, Any] = {
        "kind": str(failure.kind),
        "reason": str(failure.reason),
        "message": failure.message[:4096],
    }
    if pod is not None and failure.reason in TAILED_REASONS:
        fields["logsTail"] = logs_tail(kube, pod, failure.container or container, secrets)
    return fields


def announce(
    ctx: OperatorContext,
    body: Mapping[str, Any],
    previous: Mapping[str, Any],
    conditions: Sequence[ConditionState],
    failure: PodFailure | None,
) -> None:
    """One log line and the metrics per change of Ready's reason, and a Warning event for a failure or
    refusal."""
    before = find(previous.get("conditions") or [], ConditionType.READY) or {}
    ready = next(c for c in conditions if c.type == ConditionType.READY)
    if before.get("reason") == ready.reason and before.get("status") == ready.status_text:
        return
    meta = body.get("metadata") or {}
    failed = failure is not None
    resource = RESOURCES.get(str(body.get("kind")), "unknown")
    if failure is not None:
        METRICS.failed(resource, str(meta.get("uid")), str(failure.kind), str(failure.reason))
    elif ready.status:
        METRICS.ready(resource, str(meta.get("uid")))
    TRANSITIONS.log(
        logging.WARNING if failed else logging.INFO,
        "%s %s/%s: Ready=%s %s: %s",
        body.get("kind", "object"),
        meta.get("namespace"),
        meta.get("name"),
        ready.status_text,
        ready.reason,
        ready.message,
    )
    if failed:
        ctx.events.warn(ctx.kube, body, ready.reason, ready.message)
