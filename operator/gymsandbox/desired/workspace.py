"""Where a run's writable directories live on its claim: chosen by the operator, never by a spec.

The kubelet resolves a volume subPath by following the symlinks it finds inside the volume, so a subPath that
runs through a directory some pod can write is that pod's to redirect (into another run's workspace, or the
shared environment). Writable directories therefore live only below WORKSPACES_ROOT, which no spec can name
(SUB_PATH_PATTERN refuses a component that starts with a dot), keyed by uid:

    .gymsandbox/hosts/<host uid>/workspace           the host's workspace: read-write in the host pod
    .gymsandbox/hosts/<host uid>/episodes/<ep uid>   an episode's workspace: read-write in its sandbox pod,
                                                     read-only in the host pod (episodes/ as a whole)

Every directory a pod can write is the last component of the one subPath that mounts it writable; every
other component is made by the kubelet and writable by no pod. So no subPath passes through anything an
untrusted party can create, and a spec cannot reach another run's directories by naming them.
"""

from __future__ import annotations

WORKSPACES_ROOT = ".gymsandbox/hosts"


def _host_tree(host_uid: str) -> str:
    return f"{WORKSPACES_ROOT}/{host_uid}"


def host_workspace_sub_path(host_uid: str) -> str:
    return f"{_host_tree(host_uid)}/workspace"


def host_episodes_sub_path(host_uid: str) -> str:
    return f"{_host_tree(host_uid)}/episodes"


def episode_workspace_dir(episode_uid: str) -> str:
    """The episode's workspace as a directory of host_episodes_sub_path (and of episodesMountPath)."""
    return episode_uid


def episode_workspace_sub_path(host_uid: str, episode_uid: str) -> str:
    return f"{host_episodes_sub_path(host_uid)}/{episode_workspace_dir(episode_uid)}"
