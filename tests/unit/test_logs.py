"""The operator's log formats: full and plain lines, and one JSON record per line that a log pipeline can
parse (a traceback included in its record, not spilled over lines of its own)."""

from __future__ import annotations

import json
import logging
import re
import sys

import pytest

from gymsandbox.logs import formatter


def record(message: str, level: int = logging.INFO, exc_info: bool = False) -> logging.LogRecord:
    info = sys.exc_info() if exc_info else None
    return logging.LogRecord("gymsandbox.transitions", level, __file__, 1, message, None, info)


def test_a_json_record_is_one_line_with_the_message_and_its_severity() -> None:
    line = formatter("json").format(record("GymHost a/b: Ready=True HostReady", logging.WARNING))
    fields = json.loads(line)
    assert "\n" not in line
    assert fields["message"] == "GymHost a/b: Ready=True HostReady"
    assert fields["severity"] == "warning"
    assert fields["logger"] == "gymsandbox.transitions"


def test_a_traceback_stays_inside_its_json_record() -> None:
    try:
        raise ValueError("a bug")
    except ValueError:
        line = formatter("json").format(record("handler failed", logging.ERROR, exc_info=True))
    assert "\n" not in line
    assert "ValueError: a bug" in json.loads(line)["exception"]


@pytest.mark.parametrize(
    ("log_format", "expected"), [("plain", "^hello$"), ("full", r"^\[.+\] gymsandbox\.")]
)
def test_plain_is_the_message_alone_and_full_adds_time_logger_and_level(
    log_format: str, expected: str
) -> None:
    assert re.search(expected, formatter(log_format).format(record("hello")))
