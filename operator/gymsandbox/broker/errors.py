"""Broker errors: a stable code, an HTTP status, and a message safe to show the caller."""

from __future__ import annotations

from typing import Literal

ErrorCode = Literal[
    "unauthorized",
    "forbidden",
    "episode_not_found",
    "session_lost",
    "conflict",
    "invalid_request",
    "image_not_approved",
    "sandbox_tool_missing",
    "quota_exceeded",
    "payload_too_large",
    "backend_error",
    "shutting_down",
]

STATUS: dict[ErrorCode, int] = {
    "unauthorized": 401,
    "forbidden": 403,
    "episode_not_found": 404,
    "session_lost": 404,
    "conflict": 409,
    "invalid_request": 422,
    "image_not_approved": 422,
    "sandbox_tool_missing": 422,  # the episode's image lacks a program the broker runs in it (sh, sleep)
    "quota_exceeded": 429,
    "payload_too_large": 413,
    "backend_error": 502,
    "shutting_down": 503,
}


class BrokerError(Exception):
    """Raised anywhere in a request; the app turns it into `{code, message}` with the code's status."""

    def __init__(
        self, code: ErrorCode, message: str, *, retry_after: int | None = None, cause: str | None = None
    ) -> None:
        super().__init__(f"{code}: {message}")
        self.code: ErrorCode = code
        self.message = message
        self.retry_after = retry_after
        self.cause = cause  # a bounded word for metrics (why a token was refused), never shown

    @property
    def status(self) -> int:
        return STATUS[self.code]
