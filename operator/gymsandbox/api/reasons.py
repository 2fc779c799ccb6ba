"""What each condition type, failure kind and reason means, and what to do about it, for people.

The one source of the troubleshooting table: `gymsandbox docs` renders docs/troubleshooting.md from these
mappings, and tests/unit/test_reasons.py fails when a constant of api/conditions.py has no entry. The words
follow what the code does: the admission checks in policy/, the status rules in status/, the refusals the
handlers make.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from gymsandbox.api.conditions import ConditionType, FailureKind, Reason


class ReasonHelp(NamedTuple):
    meaning: str
    action: str


CONDITION_HELP: Mapping[ConditionType, str] = {
    ConditionType.ACCEPTED: "GymHost: the spec passed cluster policy.",
    ConditionType.EGRESS_READY: "GymHost: the NetworkPolicy holds the resolved allowlist.",
    ConditionType.POD_SCHEDULED: "The pod is bound to a node of its runtime.",
    ConditionType.READY: "The summary: the host serves on `status.endpoint`, or the episode's sandbox is"
    " usable.",
    ConditionType.ADMITTED: "EpisodeSandbox: the episode holds one of its host's concurrency slots.",
    ConditionType.RECONCILING: "kstatus: True while the operator is still working towards Ready.",
    ConditionType.STALLED: "kstatus: True when only a change to the spec or the image helps"
    " (a Policy or Workload failure, or expiry); Flux then fails fast.",
}

FAILURE_KIND_HELP: Mapping[FailureKind, str] = {
    FailureKind.POLICY: "The spec or the cluster policy: fix the spec, or ask for the policy to change.",
    FailureKind.INFRASTRUCTURE: "The cluster, not the evaluated code: mask the sample rather than score it.",
    FailureKind.WORKLOAD: "The container itself: fix the image or the command.",
}

_NOTHING = "Nothing."
_WAIT = "Wait."
_DNS_ACTION = "Fix the name or the resolver, or list the name in `policy.egress.staticHosts`."
_CAP_ACTION = "Lower the value to the cap named in the message."

REASON_HELP: Mapping[Reason, ReasonHelp] = {
    # Accepted (and Admitted for episodes): refusals by cluster policy and the host
    Reason.ACCEPTED: ReasonHelp("`Accepted=True`: the spec passed cluster policy.", _NOTHING),
    Reason.INVALID_SPEC: ReasonHelp(
        "The stored spec fails the model (e.g. it was stored before the CRD tightened).",
        "Fix the field the message names.",
    ),
    Reason.IMAGE_NOT_APPROVED: ReasonHelp(
        "A GymHost's `spec.image` or an `episodes.images` entry is not on `approvedImages` (an"
        " `episodes.images` prefix must lie under an approved prefix). An episode's image must be approved"
        " and also be in its host's `episodes.images`.",
        "Use an approved image, or ask the admin to approve it.",
    ),
    Reason.UNKNOWN_RUNTIME: ReasonHelp(
        "A GymHost's `spec.runtime` or `episodes.runtime` is not a key of `runtimeProfiles`. An episode's"
        " runtime must be its host's episode runtime (`episodes.runtime`, else the host's runtime).",
        "Use a runtime that is.",
    ),
    Reason.TTL_OVER_CAP: ReasonHelp(
        "`lifetime.ttlSeconds` or `episodes.maxTTLSeconds` is over the policy's `maxTTLSeconds`; an"
        " episode's TTL is over its host's `episodes.maxTTLSeconds` or that cap. A renewal past the cap"
        " after admission is cut to the cap rather than refused.",
        _CAP_ACTION,
    ),
    Reason.RESOURCES_OVER_CAP: ReasonHelp(
        "cpu, memory, ephemeral storage or gpu is over the policy's cap for it.", _CAP_ACTION
    ),
    Reason.RESOURCES_UNDER_FLOOR: ReasonHelp(
        "cpu, memory or ephemeral storage is under the policy's floor for it (`minCpu`, `minMemory`,"
        " `minEphemeralStorage`): every pod gets real limits, never none.",
        "Raise the value to the floor named in the message.",
    ),
    Reason.EGRESS_OVER_CAP: ReasonHelp(
        "`egress.allow` plus `modelEndpoints` list more entries than `maxEgressEntries`.", _CAP_ACTION
    ),
    Reason.EGRESS_INVALID: ReasonHelp(
        "An egress entry is malformed, or is (or resolves to) loopback, link-local (metadata), multicast,"
        " reserved, space in `egress.deniedCIDRs`, or private space outside `egress.allowedPrivateCIDRs`.",
        "Drop the entry, or ask for a narrow allowed CIDR.",
    ),
    Reason.EPISODES_OVER_CAP: ReasonHelp(
        "`episodes.maxConcurrent` is over the policy's `maxEpisodesPerHost`.", _CAP_ACTION
    ),
    Reason.CHILD_CONFLICT: ReasonHelp(
        "An object this one does not control already has one of its children's names.",
        "Delete or rename that object.",
    ),
    Reason.SECRET_NOT_ALLOWED: ReasonHelp(
        "An `envFrom` Secret does not exist, is the operator's own, or lacks the labels of"
        " `references.secretSelector`.",
        "Have whoever may write Secrets create or label it (`gymsandbox.dev/usable-by: gymhosts` by"
        " default).",
    ),
    Reason.CLAIM_NOT_ALLOWED: ReasonHelp(
        "`claimName` or `dataset.claimName` names a claim without the labels of `references.claimSelector`.",
        "Label the claim.",
    ),
    # Admitted (EpisodeSandbox)
    Reason.ADMITTED: ReasonHelp("`Admitted=True`: the episode holds a concurrency slot.", _NOTHING),
    Reason.QUEUED_CONCURRENCY_LIMIT: ReasonHelp(
        "The episode waits for one of its host's `episodes.maxConcurrent` slots; `status.queuePosition` 1"
        " is next. Episodes are admitted in FIFO order (creation time) as slots free.",
        _WAIT,
    ),
    Reason.ADMISSION_TIMEOUT: ReasonHelp(
        "No slot freed within `admissionTimeoutSeconds`. This is final.",
        "Delete the episode and retry later.",
    ),
    Reason.HOST_NOT_FOUND: ReasonHelp(
        "`hostRef.name` names no GymHost in this namespace, or that host is being deleted.",
        "Create the host, or point `hostRef.name` at one that exists.",
    ),
    Reason.HOST_NOT_READY: ReasonHelp(
        "The episode's host is itself refused (invalid spec or policy). An episode does not wait for its"
        " host's pod.",
        "Fix the host.",
    ),
    Reason.EGRESS_NOT_SUBSET: ReasonHelp(
        "An episode's egress entry is not covered by its host's allowlist.",
        "Ask only for what the host allows.",
    ),
    Reason.SANDBOX_READY: ReasonHelp("`Ready=True` for an episode: the sandbox is running.", _NOTHING),
    # EgressReady
    Reason.EGRESS_APPLIED: ReasonHelp(
        "`EgressReady=True`: the NetworkPolicy allows exactly DNS, the broker and the allowlist.", _NOTHING
    ),
    Reason.DNS_RESOLUTION_FAILED: ReasonHelp(
        "A name in the egress allowlist does not resolve, so there is no NetworkPolicy and no pod yet"
        " (`EgressReady=False` on a GymHost; an episode's names are resolved after admission). Tried again"
        " at each resync.",
        _DNS_ACTION,
    ),
    # PodScheduled / Ready: progress
    Reason.SCHEDULED: ReasonHelp("`PodScheduled=True`: the pod is bound to a node.", _NOTHING),
    Reason.POD_PENDING: ReasonHelp("The pod is being created or waits to be scheduled.", _WAIT),
    Reason.POD_NOT_READY: ReasonHelp(
        "The pod runs but is not Ready yet: a GymHost's does not yet pass `readinessPath` on `port`.",
        "Wait; if it stays, check those two fields.",
    ),
    Reason.HOST_READY: ReasonHelp("`Ready=True` for a GymHost: it serves on `status.endpoint`.", _NOTHING),
    Reason.NOT_ACCEPTED: ReasonHelp(
        "`EgressReady` and `PodScheduled` are Unknown because the spec was refused or the episode was not"
        " admitted.",
        "Read the `Accepted` or `Admitted` condition's reason.",
    ),
    Reason.EGRESS_NOT_READY: ReasonHelp(
        "The last resolution of an egress name failed: the pod waits for its egress policy, or, running,"
        " is kept not Ready while the NetworkPolicy keeps the previous addresses.",
        _DNS_ACTION,
    ),
    Reason.POD_TERMINATING: ReasonHelp(
        "The pod is being deleted or replaced (e.g. after a spec change).", _WAIT
    ),
    Reason.POD_SANDBOX_FAILED: ReasonHelp(
        "The kubelet has not made the pod's sandbox for more than 5 s; the message is its latest"
        " `FailedCreatePodSandBox` event (e.g. the CNI plugin's).",
        "Usually transient; if it stays, look at that node's runtime and network plugin.",
    ),
    # Ready: failures
    Reason.UNSCHEDULABLE: ReasonHelp(
        "No node fits; the message is the scheduler's.",
        "Add capacity, or nodes that match the runtime profile's `nodeSelector` and `tolerations`.",
    ),
    Reason.RUNTIME_CLASS_NOT_FOUND: ReasonHelp(
        "The runtime profile's RuntimeClass is not installed. No pod is created rather than one running"
        " elsewhere.",
        "Install it, or fix the profile's `runtimeClassName`.",
    ),
    Reason.RUNTIME_HANDLER_MISSING: ReasonHelp(
        "The RuntimeClass exists, but the node the pod landed on has no runtime for its `handler` (the"
        " kubelet's `FailedCreatePodSandBox` event, quoted in the message). The kubelet keeps retrying; the"
        " pod starts if the runtime appears.",
        "Install the runtime on the nodes the RuntimeClass selects, or fix its `handler` or `scheduling`.",
    ),
    Reason.PVC_NOT_BOUND: ReasonHelp(
        "The workspace or dataset claim is missing or not Bound (a claim whose StorageClass binds on first"
        " use does not count: the pod is created to bind it), or the scheduler reports an unbound claim.",
        "Create the claim or check its StorageClass; the host starts once it binds.",
    ),
    Reason.IMAGE_PULL_BACK_OFF: ReasonHelp(
        "The image cannot be pulled (also `ErrImagePull`, `InvalidImageName`, `ErrImageNeverPull`).",
        "Check the reference, and whether the nodes can reach the registry.",
    ),
    Reason.CRASH_LOOP_BACK_OFF: ReasonHelp(
        "The container keeps exiting. `failure.logsTail` holds its last 20 log lines, lease tokens redacted.",
        "Fix the image or the command.",
    ),
    Reason.OOM_KILLED: ReasonHelp(
        "The container exceeded `resources.memory` (`failure.logsTail` too).", "Raise it, within the cap."
    ),
    Reason.STORAGE_LIMIT_EXCEEDED: ReasonHelp(
        "The kubelet evicted the pod because it wrote more than its own `resources.ephemeralStorage` (its"
        " writable layer, its logs or an emptyDir such as /tmp): the workload's doing, not the node's.",
        "Write less, or raise it within the cap.",
    ),
    Reason.CONTAINER_CONFIG_ERROR: ReasonHelp(
        "The kubelet cannot build the container, e.g. an `envFrom` Secret is missing.",
        "Create what is missing.",
    ),
    Reason.POD_FAILED: ReasonHelp(
        "The pod ended in phase Failed (`failure.logsTail` too).",
        "Read the logs; the operator replaces the pod.",
    ),
    Reason.POD_LOST: ReasonHelp(
        "The pod was evicted or preempted, its node shut down or was lost, or the kubelet refused it"
        " (`OutOfcpu`, `NodeAffinity`, ...).",
        "Nothing: the operator replaces the pod.",
    ),
    Reason.NODE_UNREACHABLE: ReasonHelp(
        "The pod's node stopped reporting (its kubelet or the node is down), so the node controller marked"
        " the pod not Ready; what runs there is unknown. If the node comes back the pod is Ready again at the"
        " kubelet's next status sync; if not, Kubernetes evicts it after 5 minutes (`PodLost`) and the"
        " operator replaces it.",
        "Check that node.",
    ),
    Reason.EXPIRED: ReasonHelp(
        "`lifetime.ttlSeconds` ran out. This is final: an episode is reaped; a GymHost is deleted, or with"
        " `expiryPolicy: Retain` only its pod is.",
        "Create a new one.",
    ),
}
