"""A command as it reaches the sandbox: an environment or a shell script through the exec stream's stdin,
never in the exec URL.

The API server records every `pods/exec` request's URL in its audit log (the `command` query parameters),
and keeps it in its own request logs; an exec's environment and shell script are the model's and the
trainer's data (a key in an env value, a prompt or generated code in a script). So for a request with
either, the URL carries only LOADER, a fixed script, and a random end marker; the command itself follows
on stdin as one line of single-quoted words (`command_script`), read by LOADER with the shell's own `read`
(no tool beyond `sh`) up to the marker and run by `eval` with stdin from /dev/null, as an exec without
stdin runs. A request of argv alone (and a working directory) is the exec's own argv, as `kubectl exec`'s
is: an exec with stdin costs the API server more (make bench-broker: at 200 execs at once on kwok, twice
the time), and an argv holds nothing the caller did not choose to show.
"""

from __future__ import annotations

import secrets
import shlex
from dataclasses import dataclass

from gymsandbox.broker.models import ExecRequest

# $1: the end marker. Lines up to it are the script; each keeps its newline (a quoted word may span lines).
# A stream that ends before the marker runs nothing and says so (exit 125: the broker's, not the command's).
LOADER = r"""
script=
while IFS= read -r line; do
  if [ "$line" = "$1" ]; then
    eval "$script" </dev/null
    exit
  fi
  script="$script$line
"
done
echo "gymsandbox-broker: the command did not arrive whole" >&2
exit 125
"""


@dataclass(frozen=True)
class Delivery:
    """What opens the exec (`argv`: LOADER and the marker, or the command itself) and what it reads first
    (`stdin`; None: no stdin)."""

    argv: list[str]
    stdin: bytes | None = None


def command_script(request: ExecRequest) -> str:
    """The command as one shell line (a quoted word may span lines): into the working directory, then the
    argv (or `sh -c` and the script) in place of the shell, under `env` with the variables when there are
    any, as the exec's own argv used to be. Every word is single-quoted."""
    argv = list(request.argv) if request.argv else ["sh", "-c", str(request.shell)]
    if request.env:
        argv = ["env", *(f"{name}={value}" for name, value in request.env.items()), *argv]
    run = "exec " + " ".join(shlex.quote(arg) for arg in argv)
    if request.workdir:
        run = f"cd -- {shlex.quote(request.workdir)} && {run}"
    return run


def delivery(request: ExecRequest, marker: str | None = None) -> Delivery:
    """The exec that runs `request`: argv alone in the URL; with an environment or a script, LOADER and a
    fresh marker (no line of the script can end it early), the command on stdin."""
    if request.shell is None and not request.env:
        argv = list(request.argv or [])
        if request.workdir:
            argv = ["sh", "-c", 'cd -- "$0" && exec "$@"', request.workdir, *argv]
        return Delivery(argv)
    end = marker or f"gymsandbox-end-{secrets.token_hex(16)}"
    script = command_script(request)
    return Delivery(["sh", "-c", LOADER, "sh", end], f"{script}\n{end}\n".encode())
