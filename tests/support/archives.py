"""Tar archives in memory, for upload and download round trips."""

from __future__ import annotations

import io
import tarfile


def tar_of(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def untar(data: bytes) -> dict[str, bytes]:
    """Regular files by name (a leading "./" dropped, as `tar -C dir .` writes them)."""
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        return {
            m.name.removeprefix("./"): archive.extractfile(m).read()  # type: ignore[union-attr]
            for m in archive.getmembers()
            if m.isfile()
        }
