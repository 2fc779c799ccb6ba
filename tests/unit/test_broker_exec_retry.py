"""Which failed execs the broker tries again: only those the API server says it never sent to the kubelet
(apimachinery's upgrade proxy: "error dialing backend", "error sending request"), where nothing ran."""

from __future__ import annotations

from gymsandbox.broker.backend import EXIT_UNREACHABLE, ExecOutcome, never_sent

NOT_SENT = 'Internal error occurred: error sending request: Post "https://10.0.0.1:10250/exec/ns/p/c": EOF'
NOT_DIALED = "Internal error occurred: error dialing backend: dial tcp 10.0.0.1:10250: connect: refused"


def outcome(code: int = EXIT_UNREACHABLE, stdout: bytes = b"") -> ExecOutcome:
    return ExecOutcome(code, stdout, b"the sandbox refused the command: ...", False, False, 0.1)


def failure(message: str) -> dict[str, str]:
    return {"status": "Failure", "message": message}


def test_a_request_the_api_server_never_sent_or_dialed_is_tried_again() -> None:
    assert never_sent(failure(NOT_SENT), outcome())
    assert never_sent(failure(NOT_DIALED), outcome())


def test_a_command_that_ran_is_never_tried_again() -> None:
    assert not never_sent(failure(NOT_SENT), outcome(stdout=b"partial"))  # it printed: it ran
    assert not never_sent({"status": "Failure", "message": "command terminated with exit code 1"}, outcome(1))
    assert not never_sent({"status": "Success"}, outcome(0))
    assert not never_sent({}, outcome())  # the stream broke: whether it ran is unknown
    assert not never_sent(failure('exec: "sh": executable file not found in $PATH'), outcome())
