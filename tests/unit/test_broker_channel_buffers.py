"""The exec stream's channel buffers grow in place: the kubernetes client appends each frame to its channel's
buffer (`buffers[channel] += data`) for every frame already waiting, so with bytes a large read copied all it
had received once per frame (quadratic: some 27 s for 50 MiB in 32 KiB frames)."""

from __future__ import annotations

from gymsandbox.broker.backend import ChannelBuffers

STDOUT, STDERR = 1, 2
FRAME = bytes(range(256)) * 128  # 32 KiB, as the API server frames exec output


def test_appending_frames_grows_one_buffer_in_place_as_the_client_does() -> None:
    buffers = ChannelBuffers()
    buffers[STDOUT] = FRAME[:100]  # the client's first frame of a channel
    first = buffers[STDOUT]
    for _ in range(64):
        buffers[STDOUT] += FRAME  # the client's every later frame
    assert buffers[STDOUT] is first  # one buffer, extended: not a new copy per frame
    assert bytes(buffers[STDOUT]) == FRAME[:100] + FRAME * 64


def test_channels_stay_apart_and_a_read_channel_starts_afresh() -> None:
    buffers = ChannelBuffers()
    buffers[STDOUT] = b"out"
    buffers[STDERR] = b"err"
    buffers[STDOUT] += b"put"
    taken = buffers.pop(STDOUT)  # what the client's read_channel hands over, then forgets
    buffers[STDOUT] = b"next"
    assert (bytes(taken), bytes(buffers[STDOUT]), bytes(buffers[STDERR])) == (b"output", b"next", b"err")
    assert all(isinstance(value, bytearray) for value in buffers.values())
