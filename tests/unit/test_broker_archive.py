"""Upload safety: paths and tar members that could escape the destination are refused before any write."""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import tarfile
from collections.abc import Callable

import pytest

from gymsandbox.broker.archive import MAX_MEMBERS, check_archive, sandbox_path
from gymsandbox.broker.errors import BrokerError


def tar_of(*members: tuple[str, bytes | str, str]) -> bytes:
    """Members as (name, content or link target, kind) with kind one of file, dir, symlink, hardlink, fifo."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, payload, kind in members:
            info = tarfile.TarInfo(name)
            if kind == "file":
                data = payload if isinstance(payload, bytes) else payload.encode()
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
                continue
            info.type = {
                "dir": tarfile.DIRTYPE,
                "symlink": tarfile.SYMTYPE,
                "hardlink": tarfile.LNKTYPE,
                "fifo": tarfile.FIFOTYPE,
            }[kind]
            if kind in ("symlink", "hardlink"):
                info.linkname = str(payload)
            archive.addfile(info)
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("path", "normal"),
    [
        ("a.txt", "a.txt"),
        ("dir/a.txt", "dir/a.txt"),
        ("./dir//a.txt", "dir/a.txt"),
        ("dir/./a", "dir/a"),
        ("/tmp/a.txt", "/tmp/a.txt"),
        ("//tmp/./x/", "/tmp/x"),
    ],
)
def test_paths_are_accepted_and_normalised(path: str, normal: str) -> None:
    assert sandbox_path(path) == normal


@pytest.mark.parametrize(
    "path",
    ["", "/", "//", "/./", "../up", "a/../../up", "a/..", "/tmp/../etc", "nul\x00byte", ".", "x" * 2000],
)
def test_unsafe_paths_are_refused(path: str) -> None:
    with pytest.raises(BrokerError) as refused:
        sandbox_path(path)
    assert refused.value.code == "invalid_request"


def test_an_ordinary_tree_passes_and_is_counted() -> None:
    data = tar_of(("d", "", "dir"), ("d/a.txt", "hello", "file"), ("d/link", "a.txt", "symlink"))
    summary = check_archive(data, max_bytes=1024)
    assert (summary.members, summary.bytes) == (3, 5)


@pytest.mark.parametrize(
    "members",
    [
        [("/etc/passwd", "x", "file")],
        [("../up.txt", "x", "file")],
        [("a/../../up.txt", "x", "file")],
        [("escape", "/etc", "symlink")],
        [("escape", "../../etc", "symlink")],
        [("d/escape", "../..", "symlink")],
        [("hard", "/etc/shadow", "hardlink")],
        [("pipe", "", "fifo")],
    ],
    ids=[
        "absolute",
        "dot-dot",
        "nested-dot-dot",
        "symlink-absolute",
        "symlink-up",
        "symlink-up-nested",
        "hardlink-absolute",
        "fifo",
    ],
)
def test_members_that_escape_or_are_special_are_refused(members: list[tuple[str, str, str]]) -> None:
    with pytest.raises(BrokerError) as refused:
        check_archive(tar_of(*members), max_bytes=1024)
    assert refused.value.code == "invalid_request"


def test_an_archive_that_unpacks_too_large_is_refused() -> None:
    with pytest.raises(BrokerError) as refused:
        check_archive(tar_of(("big", b"x" * 2048, "file")), max_bytes=1024)
    assert refused.value.code == "payload_too_large"


@pytest.mark.parametrize("data", [b"", b"not a tar", b"\x00" * 10])
def test_garbage_is_not_an_archive(data: bytes) -> None:
    with pytest.raises(BrokerError) as refused:
        check_archive(data, max_bytes=1024)
    assert refused.value.code == "invalid_request"


@pytest.mark.parametrize("compress", [gzip.compress, bz2.compress, lzma.compress])
def test_a_compressed_archive_is_refused_unread(compress: Callable[[bytes], bytes]) -> None:
    """Nothing is decompressed: a small upload cannot unpack to a bomb."""
    with pytest.raises(BrokerError, match="the archive is compressed; upload a plain tar") as refused:
        check_archive(compress(tar_of(("a", b"x", "file"))), max_bytes=1024)
    assert refused.value.code == "invalid_request"


def test_a_plain_tar_whose_first_name_looks_like_a_magic_number_is_still_read() -> None:
    assert check_archive(tar_of(("BZh-notes.txt", b"x", "file")), max_bytes=1024).members == 1


def test_reading_stops_at_the_first_member_past_the_limits() -> None:
    too_many = tar_of(*[(f"f{i}", b"", "file") for i in range(MAX_MEMBERS + 1)])
    with pytest.raises(BrokerError, match=f"over {MAX_MEMBERS} members"):
        check_archive(too_many, max_bytes=1024)
    with pytest.raises(BrokerError, match="more than 1024 bytes, the limit"):
        check_archive(tar_of(("big", b"x" * 2048, "file"), ("bad", "/etc", "symlink")), max_bytes=1024)
