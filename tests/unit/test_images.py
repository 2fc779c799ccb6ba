"""hack/localcluster/images.py without a container engine: the deterministic layer writer and the OCI archive
it writes.

The archives go to containerd (`ctr images import`), which checks every digest and size; these tests hold
the same facts on tiny images built from temporary trees, and that equal inputs give equal bytes.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import stat
import tarfile
from pathlib import Path
from typing import Any

import pytest
from hack.localcluster import images

ROOT = Path(__file__).resolve().parents[2]
REF = "localhost/gymsandbox/tiny:1"
CONFIG = {"Entrypoint": ["/bin/tool"], "User": "65532:65532", "Env": ["PATH=/bin"]}


def make_tree(root: Path, mtime: int = 1_700_000_000) -> Path:
    """A small root filesystem with each kind of entry a layer keeps, every mtime set to `mtime`."""
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "tool").write_bytes(b"#!/bin/sh\necho tool\n")
    (root / "bin" / "tool").chmod(0o755)
    (root / "bin" / "sh").symlink_to("tool")
    os.link(root / "bin" / "tool", root / "bin" / "tool-again")
    (root / "etc").mkdir()
    (root / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    (root / "etc" / "passwd").chmod(0o644)
    (root / "sbin").symlink_to("bin")
    (root / "tmp").mkdir()
    (root / "tmp").chmod(0o1777)
    (root / "usr" / "bin").mkdir(parents=True)
    (root / "usr" / "bin" / "su").write_bytes(b"setuid\n")
    (root / "usr" / "bin" / "su").chmod(0o6755)
    for path in [root, *root.rglob("*")]:
        os.utime(path, (mtime, mtime), follow_symlinks=False)
    return root


def members(layer: bytes) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
        return {info.name: info for info in tar.getmembers()}


def digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def read_archive(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as tar:
        return {
            info.name: tar.extractfile(info).read()  # type: ignore[union-attr]
            for info in tar.getmembers()
            if info.isfile()
        }


def test_layer_entries_are_sorted_parents_first_and_owned_by_root_at_mtime_zero(tmp_path: Path) -> None:
    layer = members(images.layer_tar(make_tree(tmp_path / "root")))
    assert list(layer) == [
        "bin",
        "bin/sh",
        "bin/tool",
        "bin/tool-again",
        "etc",
        "etc/passwd",
        "sbin",
        "tmp",
        "usr",
        "usr/bin",
        "usr/bin/su",
    ]
    for info in layer.values():
        assert (info.uid, info.gid, info.uname, info.gname, info.mtime) == (0, 0, "", "", 0)


def test_layer_keeps_modes_symlinks_and_hard_links_and_drops_setuid(tmp_path: Path) -> None:
    layer = members(images.layer_tar(make_tree(tmp_path / "root")))
    assert layer["bin/tool"].isfile()
    assert layer["bin/tool"].mode == 0o755
    assert layer["etc/passwd"].mode == 0o644
    assert layer["tmp"].isdir()
    assert layer["tmp"].mode == 0o1777
    assert (layer["bin/sh"].issym(), layer["bin/sh"].linkname) == (True, "tool")
    assert (layer["sbin"].issym(), layer["sbin"].linkname) == (True, "bin")
    assert (layer["bin/tool-again"].islnk(), layer["bin/tool-again"].linkname) == (True, "bin/tool")
    assert layer["usr/bin/su"].mode == 0o755
    assert not layer["usr/bin/su"].mode & (stat.S_ISUID | stat.S_ISGID)


def test_layer_of_the_same_tree_is_byte_identical_whatever_the_mtimes(tmp_path: Path) -> None:
    first = images.layer_tar(make_tree(tmp_path / "a", mtime=1_000))
    second = images.layer_tar(make_tree(tmp_path / "b", mtime=2_000_000_000))
    assert first == second
    (tmp_path / "b" / "etc" / "passwd").write_text("changed\n")
    assert images.layer_tar(tmp_path / "b") != first


def test_layer_refuses_what_a_layer_must_not_hold(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    os.mkfifo(root / "fifo")
    with pytest.raises(ValueError, match="not a directory, regular file or symlink"):
        images.layer_tar(root)


def check_archive(blobs: dict[str, bytes], ref: str) -> dict[str, Any]:
    """Assert what containerd checks on import; returns the image config."""
    assert json.loads(blobs["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    index = json.loads(blobs["index.json"])
    (entry,) = index["manifests"]
    assert entry["annotations"]["io.containerd.image.name"] == ref
    assert entry["annotations"]["org.opencontainers.image.ref.name"] == ref.rsplit(":", 1)[1]

    def blob(descriptor: dict[str, Any]) -> bytes:
        data = blobs["blobs/sha256/" + descriptor["digest"].removeprefix("sha256:")]
        assert (digest(data), len(data)) == (descriptor["digest"], descriptor["size"])
        return data

    manifest = json.loads(blob(entry))
    assert manifest["mediaType"] == entry["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    config = json.loads(blob(manifest["config"]))
    layers = [blob(layer) for layer in manifest["layers"]]
    assert config["rootfs"]["diff_ids"] == [digest(gzip.decompress(layer)) for layer in layers]
    referenced = {entry["digest"], manifest["config"]["digest"], *(d["digest"] for d in manifest["layers"])}
    stored = {"sha256:" + name.removeprefix("blobs/sha256/") for name in blobs if name.startswith("blobs/")}
    assert stored == referenced
    return dict(config)


def test_image_archive_digests_and_sizes_match_the_blobs(tmp_path: Path) -> None:
    rootfs = make_tree(tmp_path / "root")
    out = tmp_path / "tiny.oci.tar"
    images.image_archive(REF, [images.layer_tar(rootfs)], CONFIG, out)
    blobs = read_archive(out)
    config = check_archive(blobs, REF)
    assert config["config"] == CONFIG
    assert (config["os"], config["architecture"]) == ("linux", images.ARCH)
    assert not out.with_name(out.name + ".partial").exists()


def test_image_archive_of_the_same_inputs_is_byte_identical(tmp_path: Path) -> None:
    first, second = tmp_path / "first.oci.tar", tmp_path / "second.oci.tar"
    images.image_archive(REF, [images.layer_tar(make_tree(tmp_path / "a", mtime=5))], CONFIG, first)
    images.image_archive(REF, [images.layer_tar(make_tree(tmp_path / "b", mtime=9))], CONFIG, second)
    assert first.read_bytes() == second.read_bytes()
    with tarfile.open(first) as tar:
        assert all((info.mtime, info.uid, info.gid) == (0, 0, 0) for info in tar.getmembers())


def test_pack_layout_names_an_oci_layout_for_containerd(tmp_path: Path) -> None:
    built = tmp_path / "built.oci.tar"
    images.image_archive("localhost/other:9", [images.layer_tar(make_tree(tmp_path / "root"))], CONFIG, built)
    layout = tmp_path / "layout"
    for name, data in read_archive(built).items():
        (layout / name).parent.mkdir(parents=True, exist_ok=True)
        (layout / name).write_bytes(data)
    out = tmp_path / "packed.oci.tar"
    images.pack_layout(layout, REF, out)
    check_archive(read_archive(out), REF)


def test_static_binary_image_runs_the_binary_as_the_sandbox_user(tmp_path: Path) -> None:
    binary = tmp_path / "tool"
    binary.write_bytes(b"\x7fELF not really")
    ref, out = images.static_binary_image("localhost/gymsandbox/tool:1.2", binary, "/tool", tmp_path / "out")
    assert ref == "localhost/gymsandbox/tool:1.2"
    assert out.name.startswith("tool-1.2-")
    blobs = read_archive(out)
    config = check_archive(blobs, ref)
    assert config["config"]["Entrypoint"] == ["/tool"]
    assert config["config"]["User"] == "65532:65532"
    (layer_name,) = [name for name in blobs if name.startswith("blobs/") and blobs[name][:2] == b"\x1f\x8b"]
    (tool,) = members(gzip.decompress(blobs[layer_name])).values()
    assert (tool.name, tool.mode, tool.size) == ("tool", 0o755, binary.stat().st_size)


def test_an_archive_that_exists_is_a_cache_hit(tmp_path: Path) -> None:
    out = tmp_path / "cached.oci.tar"
    out.write_bytes(b"already built")

    def fill(rootfs: Path) -> None:
        raise AssertionError("a cached image must not be rebuilt")

    assert images.rootfs_image(REF, out, CONFIG, fill) == (REF, out)
    assert out.read_bytes() == b"already built"


def test_coredns_requested_without_its_binary_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        images.main(["build", "coredns"])
    assert exit_info.value.code == 2
    assert "coredns needs --coredns-binary PATH" in capsys.readouterr().err


def test_a_new_archive_replaces_the_older_ones_of_the_same_image_only(tmp_path: Path) -> None:
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    older, other = out_dir / "tool-1.2-000000000000.oci.tar", out_dir / "tool-1.3-000000000000.oci.tar"
    older.write_bytes(b"old")
    other.write_bytes(b"another version")
    binary = tmp_path / "tool"
    binary.write_bytes(b"new")
    _, out = images.static_binary_image("localhost/gymsandbox/tool:1.2", binary, "/tool", out_dir)
    assert sorted(out_dir.iterdir()) == sorted([out, other])
