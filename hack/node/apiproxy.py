#!/usr/bin/env python3
"""apiproxy.py NETNS LISTEN_IP:PORT TARGET_IP:PORT: accept TCP connections inside network namespace NETNS and
relay each, byte for byte, to TARGET in this process's own namespace.

The local API server listens on the host's loopback only. Pods on the real node reach it as
`kubernetes.default.svc` through this relay, which sits in its own namespace so that their traffic is
forwarded like traffic to a remote API server: kube-proxy and NetworkPolicy apply to it as on any cluster.
TLS passes through untouched. Standard library only.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import socket
import sys

CLONE_NEWNET = 0x40000000


def set_network_namespace(path: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns {path}")
    finally:
        os.close(fd)


def listener_in(netns: str, host: str, port: int) -> socket.socket:
    """A listening socket made inside `netns`; the calling thread returns to its own namespace after."""
    own = f"/proc/self/task/{os.getpid()}/ns/net"
    home = os.open(own, os.O_RDONLY)
    try:
        set_network_namespace(f"/run/netns/{netns}")
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
        sock.setblocking(False)
    finally:
        set_network_namespace(f"/proc/self/fd/{home}")
        os.close(home)
    return sock


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(ConnectionError, OSError):
            writer.close()


async def serve(sock: socket.socket, target_host: str, target_port: int) -> None:
    async def relay(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(target_host, target_port)
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(pipe(client_reader, upstream_writer), pipe(upstream_reader, client_writer))

    server = await asyncio.start_server(relay, sock=sock)
    async with server:
        await server.serve_forever()


def main() -> int:
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    netns, listen, target = sys.argv[1:]
    listen_host, listen_port = listen.rsplit(":", 1)
    target_host, target_port = target.rsplit(":", 1)
    sock = listener_in(netns, listen_host, int(listen_port))
    print(f"relaying {netns}/{listen} -> {target}", flush=True)
    asyncio.run(serve(sock, target_host, int(target_port)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
