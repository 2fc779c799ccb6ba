"""python -m tests.node.dns_responder ADDRESS NAME ANSWER: a minimal DNS server on ADDRESS:53 (UDP).

It answers A queries for NAME with ANSWER and names it does not know with NXDOMAIN. It plays a resolver
outside the cluster, in a test network namespace; Debian's busybox has no DNS server applet."""

from __future__ import annotations

import socket
import struct
import sys

TYPE_A, CLASS_IN = 1, 1


def question_name(packet: bytes) -> tuple[str, int]:
    """The first question's name and the offset just past its type and class."""
    labels, offset = [], 12
    while length := packet[offset]:
        labels.append(packet[offset + 1 : offset + 1 + length].decode("ascii", "replace"))
        offset += 1 + length
    return ".".join(labels).lower(), offset + 5


def answer(packet: bytes, name: str, address: str) -> bytes:
    asked, end = question_name(packet)
    qtype = struct.unpack("!H", packet[end - 4 : end - 2])[0]
    known = asked == name.lower()
    found = known and qtype == TYPE_A  # the name has no other records: NOERROR with no answer
    flags = 0x8180 if known else 0x8183  # response, recursion available; NOERROR or NXDOMAIN
    header = packet[:2] + struct.pack("!HHHHH", flags, 1, 1 if found else 0, 0, 0)
    reply = header + packet[12:end]
    if found:
        reply += struct.pack("!HHHIH", 0xC00C, TYPE_A, CLASS_IN, 30, 4) + socket.inet_aton(address)
    return reply


def main() -> int:
    listen, name, address = sys.argv[1:4]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind((listen, 53))
        while True:
            packet, peer = sock.recvfrom(512)
            if len(packet) > 12:
                sock.sendto(answer(packet, name, address), peer)


if __name__ == "__main__":
    sys.exit(main())
