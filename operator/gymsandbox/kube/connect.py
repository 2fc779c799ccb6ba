"""The connection to the API server: in a pod its service account, elsewhere KUBECONFIG or ~/.kube/config.
A connection that cannot be set up, or an API server that does not answer or turns the caller away at
start, is one line saying what is wrong and what to do (`ConnectionSetupError`, `startup_problem`)."""

from __future__ import annotations

import os
from pathlib import Path

import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from gymsandbox.kube.client import api_outage, api_refusal


class ConnectionSetupError(Exception):
    """No usable kubeconfig or in-cluster configuration: the process cannot talk to any API server."""


def kubeconfig_paths() -> list[Path]:
    """The files the kubernetes client reads: KUBECONFIG's (a path list), else ~/.kube/config."""
    named = os.environ.get("KUBECONFIG")
    if named:
        return [Path(p).expanduser() for p in named.split(os.pathsep) if p]
    return [Path("~/.kube/config").expanduser()]


def api_client(connections: int) -> client.ApiClient:
    """A client with one pooled connection per thread that uses it (the operator's handler threads, the
    episodes' workers and their helpers; the broker's workers): a smaller pool would discard, and log, a
    connection after nearly every burst."""
    configuration = client.Configuration()
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        try:
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        except ConfigException as e:
            raise ConnectionSetupError(f"the in-cluster configuration cannot be used: {e}") from None
    else:
        load_kubeconfig(configuration)
    configuration.connection_pool_maxsize = connections
    return client.ApiClient(configuration)


def load_kubeconfig(configuration: client.Configuration) -> None:
    paths = kubeconfig_paths()
    where = f"KUBECONFIG={os.environ['KUBECONFIG']}" if os.environ.get("KUBECONFIG") else str(paths[0])
    missing = [str(p) for p in paths if not p.exists()]
    if len(missing) == len(paths):
        raise ConnectionSetupError(
            f"no kubeconfig: {' and '.join(missing)} does not exist; set KUBECONFIG to a cluster's"
            " kubeconfig (or run in a pod, with its service account)"
        )
    try:
        config.load_kube_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    except OSError as e:
        raise ConnectionSetupError(f"the kubeconfig ({where}) cannot be read: {e.strerror}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" (line {mark.line + 1})" if mark is not None else ""
        raise ConnectionSetupError(f"the kubeconfig ({where}) is not valid YAML{at}") from None
    except (ConfigException, ValueError, TypeError, KeyError) as e:
        raise ConnectionSetupError(f"the kubeconfig ({where}) cannot be used: {e}") from None


def startup_problem(error: BaseException, server: str) -> str | None:
    """One line for an API server that, at start, does not answer, refuses the credentials or forbids what
    the process needs; None for anything else (a bug keeps its traceback)."""
    outage = api_outage(error)
    if outage is not None:
        return f"the API server at {server} does not answer ({outage}); is the cluster up, and the one meant?"
    if isinstance(error, ApiException) and error.status == 401:
        return f"the API server at {server} does not accept these credentials (401 Unauthorized)"
    refusal = api_refusal(error)
    if refusal is not None:
        return f"the API server at {server} refused: {refusal}"
    return None
