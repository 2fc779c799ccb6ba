"""Progress messages: one line on stderr each, tagged with the part that speaks and the time, so that stdout
stays for what a command prints as its answer (a path, `NAME=REFERENCE` lines)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable


def logger(component: str) -> Callable[[str], None]:
    """A log function for `component`: log("started etcd") prints `[component HH:MM:SS] started etcd`."""

    def log(message: str) -> None:
        print(f"[{component} {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)

    return log
