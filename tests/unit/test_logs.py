"""Which of kopf's lines the quiet log drops: routine successes only, never news, warnings or errors."""

from __future__ import annotations

import logging

import pytest

from gymsandbox.logs import routine


def record(message: str, level: int = logging.INFO) -> logging.LogRecord:
    return logging.LogRecord("kopf.objects", level, __file__, 1, message, None, None)


@pytest.mark.parametrize(
    "message",
    [
        "Timer 'episodes_tick' succeeded.",
        "Timer 'resync' succeeded.",
        "Handler 'reconcile' succeeded.",
        "Handler 'pod_changed' succeeded.",
        "Creation is processed: 1 succeeded; 0 failed.",
        "Resuming is processed: 2 succeeded; 0 failed.",
        "Updating is processed: 1 succeeded; 0 failed.",
    ],
)
def test_routine_success_lines_are_dropped(message: str) -> None:
    assert routine(record(message))


@pytest.mark.parametrize(
    "message",
    [
        "Creation is processed: 0 succeeded; 1 failed.",  # a failure is news
        "Handler 'reconcile' failed temporarily: gymhost a changed meanwhile",
        "Handler 'cleanup' failed permanently: boom",
        "Timer 'resync' succeeded. And then something else.",
        "Removing the finalizer, thus allowing the actual deletion.",
    ],
)
def test_other_lines_are_kept(message: str) -> None:
    assert not routine(record(message))


def test_a_warning_is_kept_whatever_it_says() -> None:
    assert not routine(record("Timer 'resync' succeeded.", logging.WARNING))
