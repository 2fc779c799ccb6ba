"""Small, typed access to the Kubernetes API for handlers: read, create-or-adopt, replace, delete.

Errors that could carry a Secret's content are re-raised without the response body.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any
from urllib.parse import quote, urlencode

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.client.rest import RESTResponse

from gymsandbox.desired.owner import Manifest, controlled_by
from gymsandbox.metrics import METRICS

# Items per page of a paged listing (Kube.pages).
LIST_PAGE = 500
# A watch's connection timeout, and how much of its stream is read at a time.
WATCH_CONNECT_SECONDS = 10.0
WATCH_CHUNK = 1 << 16
# How long the headers of requests (the bearer token among them) are reused before they are made again.
AUTH_SECONDS = 10.0


class ChildConflictError(Exception):
    """A child's name is taken by an object the owner does not control."""


@dataclass(frozen=True)
class Kind:
    """Where a kind lives in the API: group/version path and plural."""

    api_version: str
    plural: str
    namespaced: bool = True

    @property
    def base(self) -> str:
        prefix = "/api" if "/" not in self.api_version else "/apis"
        return f"{prefix}/{self.api_version}"

    def path(self, namespace: str | None, name: str | None = None) -> str:
        """Names are quoted: a name can never turn into another path, a query or a fragment. A namespaced
        kind without a namespace: its objects in every namespace."""
        path = self.base
        if self.namespaced and namespace is not None:
            path += f"/namespaces/{quote(str(namespace), safe='')}"
        path += f"/{self.plural}"
        return f"{path}/{quote(name, safe='')}" if name else path


SECRET = Kind("v1", "secrets")
POD = Kind("v1", "pods")
SERVICE = Kind("v1", "services")
PVC = Kind("v1", "persistentvolumeclaims")
EVENT = Kind("v1", "events")
NETWORK_POLICY = Kind("networking.k8s.io/v1", "networkpolicies")
RUNTIME_CLASS = Kind("node.k8s.io/v1", "runtimeclasses", namespaced=False)
STORAGE_CLASS = Kind("storage.k8s.io/v1", "storageclasses", namespaced=False)
GYMHOST = Kind("gymsandbox.dev/v1alpha1", "gymhosts")
EPISODE = Kind("gymsandbox.dev/v1alpha1", "episodesandboxes")

KINDS = {"Secret": SECRET, "Pod": POD, "Service": SERVICE, "NetworkPolicy": NETWORK_POLICY}


class Kube:
    """Raw JSON over the client's connection pool: manifests stay plain dicts, as the builders make them.

    Requests go to the pool itself with headers made once per AUTH_SECONDS: the client's own request path
    serializes every body through its models' sanitizer and asks its configuration for the host and a
    refreshed token on every call: about 12% of the client's CPU per request (a twentieth of the operator's
    in a burst of episodes)."""

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        fence: Callable[[], str | None] | None = None,
        timeout: float | None = None,
    ) -> None:
        self.api_client = api_client
        self.timeout = timeout  # seconds for each request that names none (None: the pool's own)
        self._headers: tuple[float, str, dict[str, str]] | None = None  # when made, the host, the headers
        # Asked before every write: a reason means the write is refused here, as the API server's 503 would
        # be (an operator that does not lead its Lease writes nothing: handlers/leader.py).
        self.fence = fence

    def address(self) -> tuple[str, dict[str, str]]:
        """The API server's address and the headers every request carries (user agent, authorization)."""
        moment, made = time.monotonic(), self._headers
        if made is None or moment - made[0] >= AUTH_SECONDS:
            configuration = self.api_client.configuration
            headers = dict(self.api_client.default_headers)
            for setting in configuration.auth_settings().values():  # runs the token's refresh hook
                if setting["in"] == "header":
                    headers[setting["key"]] = setting["value"]
            made = self._headers = (moment, configuration.host, headers)
        return made[1], made[2]

    def _request(
        self,
        method: str,
        path: str,
        body: object = None,
        *,
        content_type: str = "application/json",
        accept: str = "application/json",
        query: list[tuple[str, str]] | None = None,
        timeout: float | None = None,
    ) -> bytes:
        fenced = self.fence() if self.fence is not None and method != "GET" else None
        if fenced is not None:
            raise ApiException(status=503, reason=fenced)
        host, common = self.address()
        url = host + path + (f"?{urlencode(query)}" if query else "")
        headers = {**common, "Content-Type": content_type, "Accept": accept}
        payload = None if body is None else json.dumps(body, default=jsonable).encode()
        started, code = time.monotonic(), "error"
        try:
            response = self.api_client.rest_client.pool_manager.request(
                method,
                url,
                body=payload,
                headers=headers,
                timeout=urllib3.Timeout(total=limit) if (limit := timeout or self.timeout) else None,
                preload_content=False,
            )
            code = str(response.status)
            data: bytes = response.data or b""
        finally:
            METRICS.api_request(*request_labels(method, path), code, time.monotonic() - started)
        if not 200 <= response.status <= 299:
            raise ApiException(http_resp=RESTResponse(response), body=data.decode(errors="replace"))
        return data

    def _call(
        self,
        method: str,
        path: str,
        body: object = None,
        content_type: str = "application/json",
        query: list[tuple[str, str]] | None = None,
    ) -> Manifest:
        data = self._request(method, path, body, content_type=content_type, query=query)
        return json.loads(data) if data else {}

    def get(self, kind: Kind, namespace: str | None, name: str) -> Manifest | None:
        try:
            return self._call("GET", kind.path(namespace, name))
        except ApiException as e:
            if e.status == 404:
                return None
            raise self._sanitized(kind, e) from None

    def list(self, kind: Kind, namespace: str, *, labels: str = "", fields: str = "") -> list[Manifest]:
        """A consistent (quorum) read: it reflects every write this process has already made."""
        query = [
            (key, value) for key, value in (("labelSelector", labels), ("fieldSelector", fields)) if value
        ]
        return list(self._call("GET", kind.path(namespace), query=query).get("items", []))

    def pages(
        self, kind: Kind, namespace: str | None, *, labels: str, size: int = LIST_PAGE
    ) -> Iterator[Sequence[Manifest]]:
        """A label-selected listing `size` items at a time (one consistent snapshot, as `list`), so that a
        caller reducing each page never holds thousands of whole objects at once."""
        for answer in self.listing(kind, namespace, labels=labels, size=size):
            yield list(answer.get("items", []))

    def listing(
        self, kind: Kind, namespace: str | None, *, labels: str, size: int = LIST_PAGE
    ) -> Iterator[Manifest]:
        """The pages of a listing as the API server answers them (each with the listing's resourceVersion)."""
        token = ""
        while True:
            query = [(k, v) for k, v in (("labelSelector", labels), ("limit", str(size))) if v] + (
                [("continue", token)] if token else []
            )
            answer = self._call("GET", kind.path(namespace), query=query)
            yield answer
            token = str((answer.get("metadata") or {}).get("continue") or "")
            if not token:
                return

    def watch(
        self,
        kind: Kind,
        namespace: str | None,
        *,
        labels: str,
        resource_version: str,
        server_timeout: int,
        client_timeout: float,
    ) -> Iterator[Manifest]:
        """The events after `resource_version` (bookmarks among them) until the API server ends the watch,
        after about `server_timeout` seconds. No byte for `client_timeout` seconds raises urllib3's
        ReadTimeoutError; an ERROR event raises its Status as an ApiException (410: the version is gone)."""
        host, common = self.address()
        query = [(k, v) for k, v in (("labelSelector", labels),) if v] + [
            ("watch", "true"),
            ("resourceVersion", resource_version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(server_timeout)),
        ]
        started, code = time.monotonic(), "error"
        resource = request_labels("GET", kind.path(namespace))[1]
        try:
            response = self.api_client.rest_client.pool_manager.request(
                "GET",
                host + kind.path(namespace) + f"?{urlencode(query)}",
                headers={**common, "Accept": "application/json"},
                timeout=urllib3.Timeout(connect=WATCH_CONNECT_SECONDS, read=client_timeout),
                preload_content=False,
            )
            code = str(response.status)
        finally:
            METRICS.api_request("watch", resource, code, time.monotonic() - started)
        try:
            if response.status != 200:
                body = response.data.decode(errors="replace")
                raise ApiException(http_resp=RESTResponse(response), body=body)
            rest = b""
            for chunk in response.stream(WATCH_CHUNK):
                *lines, rest = (rest + chunk).split(b"\n")
                for line in lines:
                    event = json.loads(line) if line.strip() else None
                    if event is not None and event.get("type") == "ERROR":
                        status = event.get("object") or {}
                        raise ApiException(status=status.get("code"), reason=status.get("reason"))
                    if event is not None:
                        yield event
        except BaseException:
            response.close()  # a stream left half-read: its connection is not reused
            raise
        finally:
            response.release_conn()

    def create(self, kind: Kind, manifest: Mapping[str, Any]) -> Manifest:
        try:
            return self._call("POST", kind.path(manifest["metadata"]["namespace"]), dict(manifest))
        except ApiException as e:
            raise self._sanitized(kind, e) from None

    def replace(self, kind: Kind, manifest: Mapping[str, Any]) -> Manifest:
        meta = manifest["metadata"]
        try:
            return self._call("PUT", kind.path(meta["namespace"], meta["name"]), dict(manifest))
        except ApiException as e:
            raise self._sanitized(kind, e) from None

    def log_tail(self, namespace: str, pod: str, container: str, lines: int) -> str | None:
        """The last lines of the container's previous run (else its current one); None when unavailable."""
        for previous in ("true", "false"):
            query = [("container", container), ("tailLines", str(lines)), ("previous", previous)]
            try:
                data = self._request(
                    "GET", POD.path(namespace, pod) + "/log", accept="*/*", query=query, timeout=5
                )
            except ApiException:
                continue
            if data:
                return data.decode(errors="replace")
        return None

    def patch(self, kind: Kind, namespace: str, name: str, body: Mapping[str, Any]) -> Manifest:
        """A JSON merge patch of the object itself (not its status)."""
        return self._call(
            "PATCH", kind.path(namespace, name), dict(body), content_type="application/merge-patch+json"
        )

    def patch_status(
        self,
        kind: Kind,
        namespace: str,
        name: str,
        status: Mapping[str, Any],
        *,
        resource_version: str | None = None,
    ) -> Manifest:
        """A merge patch of the status; with `resource_version`, only of that exact state (else 409)."""
        body: dict[str, Any] = {"status": dict(status)}
        if resource_version:
            body["metadata"] = {"resourceVersion": resource_version}
        return self._call(
            "PATCH", kind.path(namespace, name) + "/status", body, content_type="application/merge-patch+json"
        )

    def delete(
        self,
        kind: Kind,
        namespace: str | None,
        name: str,
        *,
        uid: str | None = None,
        resource_version: str | None = None,
        grace_seconds: int | None = None,
    ) -> bool:
        """Delete if present and, with `uid` / `resource_version`, only that incarnation / that exact state
        (so a concurrent change such as a renewal wins over the delete). False when nothing was deleted."""
        body: dict[str, Any] = {}
        preconditions = {
            key: value for key, value in (("uid", uid), ("resourceVersion", resource_version)) if value
        }
        if preconditions:
            body["preconditions"] = preconditions
        if grace_seconds is not None:
            body["gracePeriodSeconds"] = grace_seconds
        try:
            self._call("DELETE", kind.path(namespace, name), body or None)
        except ApiException as e:
            if e.status in (404, 409):  # gone, or a newer incarnation that is not ours to delete
                return False
            raise self._sanitized(kind, e) from None
        return True

    def delete_collection(
        self, kind: Kind, namespace: str, *, fields: str | None = None, labels: str | None = None
    ) -> Sequence[Manifest]:
        """Delete every object the field or label selector matches, in one request; the answer lists them as
        deleted (a pod still terminating has its deletionTimestamp)."""
        query = [
            (key, value) for key, value in (("fieldSelector", fields), ("labelSelector", labels)) if value
        ]
        if not query:
            raise ValueError(
                "delete_collection needs a selector: it never deletes a whole namespace's objects"
            )
        return list(self._call("DELETE", kind.path(namespace), query=query).get("items", []))

    @staticmethod
    def _sanitized(kind: Kind, error: ApiException) -> ApiException:
        """For Secrets, the same status and reason without the body and headers, which may echo the data. Of
        the body only the causes' reasons stay (fixed words: NamespaceTerminating, FieldValueInvalid), so a
        caller can still tell why."""
        if kind is not SECRET:
            return error
        sanitized = ApiException(status=error.status, reason=error.reason)
        reasons = cause_reasons(error)
        if reasons:
            sanitized.body = json.dumps({"details": {"causes": [{"reason": r} for r in reasons]}})
        return sanitized


def jsonable(value: object) -> str:
    """What json.dumps cannot write itself, as the Kubernetes client writes it: times in ISO 8601."""
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


# Answers that mean the API server is overloaded or cut off, not that the request was wrong.
OUTAGE_STATUSES = frozenset({429, 500, 502, 503, 504})
VERBS = {"GET": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


def request_labels(method: str, path: str) -> tuple[str, str]:
    """(verb, resource) as the API server's audit log names them: `list` and `deletecollection` for a
    collection, a subresource after a slash (`pods/log`, `episodesandboxes/status`)."""
    parts = path.strip("/").split("/")
    rest = parts[2:] if parts[0] == "api" else parts[3:]
    if len(rest) > 2 and rest[0] == "namespaces":
        rest = rest[2:]
    resource = "/".join([rest[0], *rest[2:3]])
    verb = VERBS.get(method, method.lower())
    if len(rest) == 1:
        verb = {"get": "list", "delete": "deletecollection"}.get(verb, verb)
    return verb, resource


def status_body(error: ApiException) -> dict[str, Any]:
    """The Status object an error carries (empty when its body is not one)."""
    try:
        body = json.loads(error.body or "")
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def cause_reasons(error: ApiException) -> list[str]:
    """The reasons of the causes in an error's Status body (none when it has no such body)."""
    details = status_body(error).get("details")
    causes = details.get("causes") if isinstance(details, dict) else None
    if not isinstance(causes, list):
        return []
    return [c["reason"] for c in causes if isinstance(c, dict) and isinstance(c.get("reason"), str)]


def namespace_terminating(error: ApiException) -> bool:
    """A create refused because the namespace is being deleted: the object is about to go too."""
    return error.status == 403 and "NamespaceTerminating" in cause_reasons(error)


def api_outage(error: BaseException) -> str | None:
    """A few words when `error` is the API server not answering (an overload, a stall, a restart)."""
    if isinstance(error, ApiException) and error.status in OUTAGE_STATUSES:
        return f"{error.status} {error.reason}"
    if isinstance(error, urllib3.exceptions.HTTPError):
        return type(error).__name__
    return None


def api_refusal(error: BaseException) -> str | None:
    """The API server's own words when it refused a request as forbidden: a missing RBAC rule, or, for a few
    seconds after it restarts, an authorizer that has not loaded the rules yet."""
    if not isinstance(error, ApiException) or error.status != 403 or namespace_terminating(error):
        return None
    return str(status_body(error).get("message") or f"{error.status} {error.reason}")


def controller_uid(obj: Mapping[str, Any], kind: str) -> str | None:
    """The uid of the object of `kind` that controls `obj` (its controller ownerReference), if any."""
    refs = obj.get("metadata", {}).get("ownerReferences") or []
    return next((ref.get("uid") for ref in refs if ref.get("controller") and ref.get("kind") == kind), None)


def create_or_adopt(
    kube: Kube, manifest: Mapping[str, Any], owner_uid: str, *, fresh: bool = False
) -> tuple[Manifest, bool]:
    """Create the child; if its name exists and the owner controls it, adopt it. Returns (object, created).
    `fresh`: the owner was just admitted, so the child is most likely not there: create without looking."""
    kind = KINDS[manifest["kind"]]
    meta = manifest["metadata"]
    existing = None if fresh else kube.get(kind, meta["namespace"], meta["name"])
    if existing is None:
        try:
            return kube.create(kind, manifest), True
        except ApiException as e:
            if e.status != 409:
                raise
            existing = kube.get(kind, meta["namespace"], meta["name"])
            if existing is None:
                raise
    if not controlled_by(existing, owner_uid):
        raise ChildConflictError(
            f"{manifest['kind']} {meta['name']} already exists and is not controlled by this object"
        )
    return existing, False
