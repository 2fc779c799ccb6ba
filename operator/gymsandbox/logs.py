"""The operator's log, on stderr: quiet by default (the transitions, `announce` in handlers/common.py, and
every warning and error; nothing while idle); --verbose adds the debug lines. Three formats: full (time,
logger, level), plain (the message only) and json (one record per line)."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

FORMATS = ("full", "plain", "json")
FULL = "[%(asctime)s] %(name)-20.20s [%(levelname)-8.8s] %(message)s"


class JsonFormatter(logging.Formatter):
    """One JSON object per record: timestamp, severity, logger, message (and the traceback, if any)."""

    def format(self, record: logging.LogRecord) -> str:
        fields = {
            "timestamp": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "severity": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            fields["exception"] = self.formatException(record.exc_info)
        return json.dumps(fields)


def formatter(log_format: str) -> logging.Formatter:
    if log_format == "json":
        return JsonFormatter()
    return logging.Formatter("%(message)s" if log_format == "plain" else FULL)


def configure_logging(*, verbose: bool, log_format: str) -> None:
    """The root logger to stderr in `log_format`, at DEBUG when verbose, else INFO; the client libraries'
    chatter (kubernetes, urllib3) only from WARNING (urllib3's from ERROR unless verbose)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter(log_format))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    logging.getLogger("kubernetes").setLevel(logging.WARNING)
    quiet_urllib3(verbose=verbose)


def quiet_urllib3(*, verbose: bool) -> None:
    """urllib3's retries and pool discards are the callers' to report (an outage is one line of ours): its
    warnings only with --verbose."""
    logging.getLogger("urllib3").setLevel(logging.WARNING if verbose else logging.ERROR)
