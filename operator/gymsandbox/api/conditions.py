"""Condition types and reasons: every value a condition can carry is a named constant here."""

from __future__ import annotations

from enum import StrEnum


class ConditionType(StrEnum):
    ACCEPTED = "Accepted"  # the spec passed cluster policy
    EGRESS_READY = "EgressReady"  # the NetworkPolicy encodes the resolved allowlist
    POD_SCHEDULED = "PodScheduled"  # the pod is bound to a node of its runtime
    READY = "Ready"  # summary: the host serves on status.endpoint / the episode sandbox is usable
    ADMITTED = "Admitted"  # the episode holds one of its host's concurrency slots
    # kstatus (Flux): True while the operator is still working towards Ready / when only a spec change helps
    RECONCILING = "Reconciling"
    STALLED = "Stalled"


class Reason(StrEnum):
    # Accepted
    ACCEPTED = "Accepted"
    INVALID_SPEC = "InvalidSpec"
    IMAGE_NOT_APPROVED = "ImageNotApproved"
    UNKNOWN_RUNTIME = "UnknownRuntime"
    TTL_OVER_CAP = "TTLOverCap"
    RESOURCES_OVER_CAP = "ResourcesOverCap"
    RESOURCES_UNDER_FLOOR = "ResourcesUnderFloor"
    EGRESS_OVER_CAP = "EgressOverCap"
    EGRESS_INVALID = "EgressInvalid"
    EPISODES_OVER_CAP = "EpisodesOverCap"
    CHILD_CONFLICT = "ChildConflict"  # a child's name is taken by an object this one does not control
    SECRET_NOT_ALLOWED = "SecretNotAllowed"  # noqa: S105 - envFrom names a Secret hosts may not use
    CLAIM_NOT_ALLOWED = "ClaimNotAllowed"  # a claim the policy does not let hosts mount
    # Admitted (EpisodeSandbox)
    ADMITTED = "Admitted"
    QUEUED_CONCURRENCY_LIMIT = "QueuedConcurrencyLimit"
    ADMISSION_TIMEOUT = "AdmissionTimeout"
    HOST_NOT_FOUND = "HostNotFound"
    HOST_NOT_READY = "HostNotReady"
    EGRESS_NOT_SUBSET = "EgressNotSubset"
    SANDBOX_READY = "SandboxReady"
    # EgressReady
    EGRESS_APPLIED = "EgressApplied"
    DNS_RESOLUTION_FAILED = "DNSResolutionFailed"
    # PodScheduled / Ready: progress
    SCHEDULED = "Scheduled"
    POD_PENDING = "PodPending"
    POD_NOT_READY = "PodNotReady"
    HOST_READY = "HostReady"
    NOT_ACCEPTED = "NotAccepted"
    EGRESS_NOT_READY = "EgressNotReady"
    POD_TERMINATING = "PodTerminating"
    POD_SANDBOX_FAILED = "PodSandboxFailed"  # the kubelet could not make the sandbox yet; it keeps trying
    # Ready: failures
    UNSCHEDULABLE = "Unschedulable"
    RUNTIME_CLASS_NOT_FOUND = "RuntimeClassNotFound"
    RUNTIME_HANDLER_MISSING = "RuntimeHandlerMissing"  # the RuntimeClass exists, the node has no such runtime
    PVC_NOT_BOUND = "PersistentVolumeClaimNotBound"
    IMAGE_PULL_BACK_OFF = "ImagePullBackOff"
    CRASH_LOOP_BACK_OFF = "CrashLoopBackOff"
    OOM_KILLED = "OOMKilled"
    STORAGE_LIMIT_EXCEEDED = "EphemeralStorageLimitExceeded"  # evicted for overrunning its own disk limit
    CONTAINER_CONFIG_ERROR = "CreateContainerConfigError"
    POD_FAILED = "PodFailed"
    POD_LOST = "PodLost"
    NODE_UNREACHABLE = "NodeUnreachable"  # the pod's node stopped reporting: its real state is unknown
    EXPIRED = "Expired"


class FailureKind(StrEnum):
    """Who is to blame, so a trainer can mask samples lost to infrastructure instead of scoring them zero."""

    INFRASTRUCTURE = "Infrastructure"
    WORKLOAD = "Workload"
    POLICY = "Policy"
