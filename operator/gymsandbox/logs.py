"""The operator's log: quiet by default. kopf writes a line for every timer run and handler that went as
planned (`Timer 'resync' succeeded.` every few seconds per host); those carry no news and bury the lines
that do. Without --verbose they are dropped; the transitions (`announce` in handlers/common.py) and every
warning and error stay."""

from __future__ import annotations

import logging
import re

# kopf's own wording (kopf/_core/actions/execution.py and kopf/_core/reactor/processing.py).
ROUTINE = re.compile(
    r"(Handler|Timer|Daemon) '[^']*' succeeded\."
    r"|(Creation|Updating|Resuming|Deletion|Resumption) is processed: \d+ succeeded; 0 failed\."
)


def routine(record: logging.LogRecord) -> bool:
    """A success line of kopf's with nothing to report."""
    return record.levelno <= logging.INFO and ROUTINE.fullmatch(record.getMessage()) is not None


class QuietRoutine(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not routine(record)


def quiet_kopf() -> None:
    """Drop kopf's routine success lines (they are logged on its per-object logger)."""
    logging.getLogger("kopf.objects").addFilter(QuietRoutine())
