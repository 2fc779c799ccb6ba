"""The broker's HTTP app (FastAPI). Routes are thin: the service authenticates, applies policy and calls
the backend. Every error is `{code, message}` with a stable code; nothing answers a bare 500."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import Annotated

import anyio.to_thread
from fastapi import APIRouter, FastAPI, Header, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from kubernetes.client.exceptions import ApiException
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gymsandbox.broker.errors import BrokerError
from gymsandbox.broker.models import (
    PROTOCOL_VERSION,
    CreateEpisode,
    Episode,
    EpisodeList,
    ExecRequest,
    ExecResult,
    Health,
    LeaseGrant,
    LeaseRequest,
    LeaseRevocation,
    RenewRequest,
)
from gymsandbox.broker.service import BrokerService, BrokerState, Upload
from gymsandbox.broker.telemetry import Telemetry

log = logging.getLogger("gymsandbox.broker")
JSON_BODY_LIMIT = 1024 * 1024  # every JSON call fits easily; only file transfers carry more

Authorization = Annotated[str | None, Header()]
RolloutId = Annotated[str | None, Header(alias="X-Rollout-Id", max_length=253)]
IdempotencyKey = Annotated[str | None, Header(alias="Idempotency-Key", max_length=200)]

router = APIRouter()


def service(request: Request) -> BrokerService:
    broker: BrokerService = request.app.state.service
    return broker


@router.get("/healthz", responses={503: {"model": Health}})
async def healthz(request: Request) -> Response:
    if service(request).state.shutting_down:  # not ready: let the Service route elsewhere
        return JSONResponse(Health(status="shutting_down").wire(), 503)
    return JSONResponse(Health(status="ok").wire())


@router.post("/v1/episodes", status_code=201)
async def create_episode(
    request: Request,
    response: Response,
    body: CreateEpisode,
    authorization: Authorization = None,
    idempotency_key: IdempotencyKey = None,
) -> Episode:
    episode, created = await service(request).create(authorization, body, idempotency_key)
    if not created:
        response.status_code = 200  # a retry with the same Idempotency-Key: the same episode
    return episode


@router.get("/v1/episodes")
async def list_episodes(request: Request, authorization: Authorization = None) -> EpisodeList:
    return await service(request).list_episodes(authorization)


@router.get("/v1/episodes/{episode_id}")
async def get_episode(
    request: Request, episode_id: str, authorization: Authorization = None, x_rollout_id: RolloutId = None
) -> Episode:
    return await service(request).get(authorization, episode_id, x_rollout_id)


@router.delete("/v1/episodes/{episode_id}")
async def close_episode(
    request: Request, episode_id: str, authorization: Authorization = None, x_rollout_id: RolloutId = None
) -> Episode:
    return await service(request).close(authorization, episode_id, x_rollout_id)


@router.post("/v1/episodes/{episode_id}/exec")
async def exec_in_episode(
    request: Request,
    episode_id: str,
    body: ExecRequest,
    authorization: Authorization = None,
    x_rollout_id: RolloutId = None,
) -> ExecResult:
    return await service(request).exec(authorization, episode_id, body, x_rollout_id)


@router.post("/v1/episodes/{episode_id}/leases", status_code=201)
async def grant_lease(
    request: Request, episode_id: str, body: LeaseRequest, authorization: Authorization = None
) -> LeaseGrant:
    return await service(request).grant_lease(authorization, episode_id, body)


@router.delete("/v1/episodes/{episode_id}/leases")
async def revoke_leases(
    request: Request, episode_id: str, authorization: Authorization = None
) -> LeaseRevocation:
    return await service(request).revoke_leases(authorization, episode_id)


@router.post("/v1/episodes/{episode_id}/renew")
async def renew(
    request: Request, episode_id: str, body: RenewRequest, authorization: Authorization = None
) -> Episode:
    return await service(request).renew(authorization, episode_id, body)


TAR = "application/x-tar"
UPLOAD = {
    "requestBody": {
        "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}
    }
}


def upload(request: Request) -> Upload:
    """The body, read only once the caller is authenticated and its size reserved (BodyLimit has refused
    anything declared or streamed over the transfer cap)."""
    declared = request.headers.get("content-length", "")
    cap = service(request).state.settings.max_transfer_bytes
    return Upload(int(declared) if declared.isdigit() else cap, request.body)


@router.put("/v1/episodes/{episode_id}/files/{path:path}", status_code=204, openapi_extra=UPLOAD)
async def put_file(
    request: Request,
    episode_id: str,
    path: str,
    authorization: Authorization = None,
    x_rollout_id: RolloutId = None,
) -> Response:
    await service(request).put_file(authorization, episode_id, path, upload(request), x_rollout_id)
    return Response(status_code=204)


@router.get("/v1/episodes/{episode_id}/files/{path:path}")
async def get_file(
    request: Request,
    episode_id: str,
    path: str,
    authorization: Authorization = None,
    x_rollout_id: RolloutId = None,
) -> Response:
    data = await service(request).get_file(authorization, episode_id, path, x_rollout_id)
    return Response(data, media_type="application/octet-stream")


@router.put("/v1/episodes/{episode_id}/directories/{path:path}", status_code=204, openapi_extra=UPLOAD)
async def put_directory(
    request: Request,
    episode_id: str,
    path: str,
    authorization: Authorization = None,
    x_rollout_id: RolloutId = None,
) -> Response:
    await service(request).put_directory(authorization, episode_id, path, upload(request), x_rollout_id)
    return Response(status_code=204)


@router.get("/v1/episodes/{episode_id}/directories/{path:path}")
async def get_directory(
    request: Request,
    episode_id: str,
    path: str,
    authorization: Authorization = None,
    x_rollout_id: RolloutId = None,
) -> Response:
    data = await service(request).get_directory(authorization, episode_id, path, x_rollout_id)
    return Response(data, media_type=TAR)


class Served:
    """ASGI middleware around every call: counts calls in flight (for a graceful stop), turns anything
    unexpected into a JSON 502 here, inside the app (a catch-all exception handler would still reset the
    client's connection), and reports each answer (metrics, one access-log line). Plain ASGI: Starlette's
    BaseHTTPMiddleware costs about a millisecond a request."""

    def __init__(self, app: ASGIApp, state: BrokerState, telemetry: Telemetry) -> None:
        self.app, self.state, self.telemetry = app, state, telemetry

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started, status = time.monotonic(), 0

        async def answering(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        self.state.in_flight += 1
        try:
            try:
                await self.app(scope, receive, answering)
            except Exception as e:
                if status:  # the answer has begun: nothing better can be sent
                    raise
                await _unexpected(e)(scope, receive, answering)
        finally:
            self.state.in_flight -= 1
            self.telemetry.served(scope, status, time.monotonic() - started)


def _unexpected(error: Exception) -> Response:
    if isinstance(error, ApiException) and error.status == 404:
        # deleted between the broker's read and its write (e.g. reaped)
        return JSONResponse({"code": "episode_not_found", "message": "the episode no longer exists"}, 404)
    return _backend_error(error)


def _backend_error(error: Exception) -> Response:
    log.error("backend failure: %s", type(error).__name__)  # the message may echo request content
    return JSONResponse({"code": "backend_error", "message": "the cluster could not be reached"}, 502)


async def _framework_error(_: Request, error: Exception) -> Response:
    """The framework's own refusals (unroutable paths, unparsable bodies) in the broker's error shape."""
    assert isinstance(error, StarletteHTTPException)
    if error.status_code == 404:  # no route matches: the request is malformed, it names no episode
        message = "no such route: episode ids cannot contain '/', and paths cannot contain line breaks"
        return JSONResponse({"code": "invalid_request", "message": message}, 422)
    if error.status_code == 413:
        return JSONResponse({"code": "payload_too_large", "message": str(error.detail)}, 413)
    return JSONResponse({"code": "invalid_request", "message": str(error.detail)}, 422)


async def _broker_error(_: Request, error: Exception) -> Response:
    assert isinstance(error, BrokerError)
    headers = {"Retry-After": str(error.retry_after)} if error.retry_after else None
    return JSONResponse({"code": error.code, "message": error.message}, error.status, headers=headers)


async def _invalid(_: Request, error: Exception) -> Response:
    assert isinstance(error, RequestValidationError)
    problems = "; ".join(
        f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg')}" for e in error.errors()
    )
    return JSONResponse({"code": "invalid_request", "message": problems[:2000]}, 422)


def create_app(state: BrokerState) -> FastAPI:
    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        # Every blocking call runs in anyio's thread pool, 40 threads unless told otherwise.
        anyio.to_thread.current_default_thread_limiter().total_tokens = state.settings.worker_threads
        yield

    app = FastAPI(title="gymsandbox episode broker", version=PROTOCOL_VERSION, lifespan=lifespan)
    app.state.service = BrokerService(state)
    app.include_router(router)
    app.add_middleware(Served, state=state, telemetry=app.state.service.telemetry)
    app.add_middleware(BodyLimit, json_limit=JSON_BODY_LIMIT, upload_limit=state.settings.max_transfer_bytes)
    app.add_exception_handler(BrokerError, _broker_error)
    app.add_exception_handler(RequestValidationError, _invalid)
    app.add_exception_handler(StarletteHTTPException, _framework_error)
    return app


class BodyLimit:
    """ASGI middleware: a request body over the limit is refused with 413 as soon as it is declared or
    streamed past the limit, before anything parses or buffers it whole."""

    def __init__(self, app: ASGIApp, json_limit: int, upload_limit: int) -> None:
        self.app, self.json_limit, self.upload_limit = app, json_limit, upload_limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.upload_limit if scope["method"] == "PUT" else self.json_limit
        declared = dict(scope.get("headers") or []).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > limit:
            await _too_large(limit)(scope, receive, send)
            return
        received = 0

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > limit:
                raise BrokerError("payload_too_large", f"the request body is over the limit of {limit} bytes")
            return message

        await self.app(scope, counted, send)


def _too_large(limit: int) -> JSONResponse:
    return JSONResponse(
        {"code": "payload_too_large", "message": f"the request body is over {limit} bytes"}, 413
    )
