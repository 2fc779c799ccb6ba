"""The connection to the API server: in a pod its service account, elsewhere KUBECONFIG or ~/.kube/config."""

from __future__ import annotations

import os

from kubernetes import client, config


def api_client(connections: int) -> client.ApiClient:
    """A client with one pooled connection per thread that uses it (the operator's handler threads, the
    episodes' workers and their helpers; the broker's workers): a smaller pool would discard, and log, a
    connection after nearly every burst."""
    configuration = client.Configuration()
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    else:
        config.load_kube_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    configuration.connection_pool_maxsize = connections
    return client.ApiClient(configuration)
