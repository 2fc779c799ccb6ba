"""Fixed names: API group, versions, labels, annotations and the finalizer."""

from __future__ import annotations

GROUP = "gymsandbox.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
CATEGORY = "gymsandbox"

FINALIZER = f"{GROUP}/cleanup"

# Labels the operator puts on every child; users may not set keys under the group prefix.
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "gymsandbox"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_HOST = f"{GROUP}/gymhost"
LABEL_EPISODE = f"{GROUP}/episode"
# Owner identity, which no other object can take: selectors and deletes by selector match these, never the
# name labels above (a name is chosen by whoever creates the object, and long ones are shortened).
LABEL_HOST_UID = f"{GROUP}/gymhost-uid"
LABEL_EPISODE_UID = f"{GROUP}/episode-uid"
# An episode's own labels reach its pod only under this prefix, never as keys others select on.
USER_LABEL_PREFIX = f"user.{GROUP}/"

# Environment variables the operator injects into host pods; users may not define these names.
ENV_PREFIX_RESERVED = "GYMSANDBOX_"
ENV_BROKER_URL = "GYMSANDBOX_BROKER_URL"
ENV_BROKER_CA = "GYMSANDBOX_BROKER_CA"  # PEM of the CA that signed the broker's certificate, when not public
ENV_LEASE_TOKEN = "GYMSANDBOX_LEASE_TOKEN"  # noqa: S105 - the variable's name, not a secret
# The lease token as a file of the host pod: the mounted lease Secret, which follows renewal and key rotation
# (the variable above keeps the token the pod started with).
ENV_LEASE_TOKEN_FILE = "GYMSANDBOX_LEASE_TOKEN_FILE"  # noqa: S105 - the variable's name, not a secret
LEASE_MOUNT_PATH = "/var/run/secrets/gymsandbox"
# The host pod's own writable /tmp, an emptyDir: its root file system is read-only.
TMP_MOUNT_PATH = "/tmp"  # noqa: S108 - the container's own /tmp

# Key of the lease token inside the lease Secret.
LEASE_TOKEN_KEY = "token"  # noqa: S105 - a key name
