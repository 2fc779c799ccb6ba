"""kstatus's abnormal-true conditions, so Flux and other kstatus users tell "still working" from "stuck".

kstatus (sigs.k8s.io/cli-utils) reads `Ready` only as ready or not yet; a resource is Failed only with
`Stalled=True`, and InProgress with `Reconciling=True`. Stalled here means that only a change to the spec or
the image can help: a Policy or Workload failure, or expiry. The Argo CD health script (docs/gitops) draws the
same line. Anything the cluster may still fix by itself (scheduling, storage, pulls, DNS) is Reconciling.
"""

from __future__ import annotations

from gymsandbox.api.conditions import ConditionType, FailureKind, Reason
from gymsandbox.status.conditions import ConditionState
from gymsandbox.status.pod import PodFailure

STUCK_KINDS = frozenset({FailureKind.POLICY, FailureKind.WORKLOAD})


def stalled(ready: ConditionState, failure: PodFailure | None) -> bool:
    if ready.status:
        return False
    return ready.reason == Reason.EXPIRED or (failure is not None and failure.kind in STUCK_KINDS)


def progress_conditions(ready: ConditionState, failure: PodFailure | None) -> list[ConditionState]:
    """Reconciling and Stalled, from Ready and the failure; at most one of them True, with Ready's words."""
    stuck = stalled(ready, failure)
    working = not ready.status and not stuck
    return [
        ConditionState(ConditionType.RECONCILING, working, ready.reason, ready.message if working else ""),
        ConditionState(ConditionType.STALLED, stuck, ready.reason, ready.message if stuck else ""),
    ]
