"""File-transfer safety, pure: sandbox paths and tar archives are checked before anything is written, so
a refused upload leaves nothing behind.

Paths are absolute in the sandbox, or relative to its working directory: no `..`, no NUL. A tar member
may not be absolute, climb out with `..`, be a device or FIFO, or be a link whose target leaves the
destination (a symlink to `/etc` followed by a file written "through" it is the classic escape).
"""

from __future__ import annotations

import io
import posixpath
import re
import tarfile
from dataclasses import dataclass

from gymsandbox.broker.errors import BrokerError

MAX_PATH_LENGTH = 1024
MAX_MEMBERS = 10_000


def sandbox_path(path: str) -> str:
    """A normalised path in the sandbox (absolute, or relative to its working directory), or a BrokerError
    naming why not. Either way it names a path of the sandbox's own file system, which its commands can
    reach anyway: the checks keep a path meaning what it says, not the sandbox from itself."""
    if not path or len(path) > MAX_PATH_LENGTH or "\x00" in path:
        raise BrokerError("invalid_request", "path must be 1 to 1024 characters without NUL")
    if ".." in path.split("/"):
        raise BrokerError("invalid_request", f"path {path!r} climbs out with '..'")
    normal = posixpath.normpath(path)
    if normal in (".", "", "/", "//"):
        raise BrokerError("invalid_request", "path must name a file or directory, not a root")
    return "/" + normal.lstrip("/") if normal.startswith("/") else normal  # normpath keeps a leading "//"


def _inside(name: str) -> bool:
    normal = posixpath.normpath(name)
    return not normal.startswith("/") and normal != ".." and not normal.startswith("../")


@dataclass(frozen=True)
class ArchiveSummary:
    members: int
    bytes: int


def check_archive(data: bytes, max_bytes: int) -> ArchiveSummary:
    """Refuse an upload tar that could write outside its destination, is not a tar at all, or is compressed.

    Only a plain tar is read, header by header, and refused at the first member past MAX_MEMBERS or byte past
    `max_bytes`: nothing is decompressed, so no small upload unpacks to a bomb, and the work is bounded by
    the upload's own size. CPU-bound all the same: callers run it off the event loop.
    """
    count = total = 0
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as archive:
            for member in archive:
                count += 1
                if count > MAX_MEMBERS:
                    raise BrokerError("payload_too_large", f"the archive has over {MAX_MEMBERS} members")
                total += member.size
                if total > max_bytes:
                    raise BrokerError(
                        "payload_too_large",
                        f"the archive unpacks to more than {max_bytes} bytes, the limit",
                    )
                _check_member(member)
    except (tarfile.TarError, EOFError, OSError) as e:
        if _COMPRESSED.match(data):
            raise BrokerError("invalid_request", "the archive is compressed; upload a plain tar") from None
        raise BrokerError("invalid_request", f"not a readable tar archive: {type(e).__name__}") from None
    return ArchiveSummary(count, total)


# gzip, bzip2, xz and zstd magic numbers.
_COMPRESSED = re.compile(rb"\x1f\x8b|BZh|\xfd7zXZ\x00|\x28\xb5\x2f\xfd")


def _check_member(member: tarfile.TarInfo) -> None:
    name = member.name
    if name.startswith("/") or not _inside(name):
        raise BrokerError("invalid_request", f"archive member {name!r} would land outside the destination")
    if member.isdev() or member.isfifo():
        raise BrokerError("invalid_request", f"archive member {name!r} is a device or FIFO")
    if member.issym() or member.islnk():
        target = member.linkname
        resolved = target if member.islnk() else posixpath.join(posixpath.dirname(name), target)
        if target.startswith("/") or not _inside(resolved):
            raise BrokerError("invalid_request", f"archive member {name!r} links outside the destination")


def tar_is_complete(data: bytes) -> bool:
    """Whether a downloaded tar reads to its end with every member's data there (one cut short does not)."""
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as archive:
            for member in archive:
                extracted = archive.extractfile(member) if member.isreg() else None
                if member.isreg() and (extracted is None or len(extracted.read()) != member.size):
                    return False
    except (tarfile.TarError, EOFError, OSError):
        return False
    return True
