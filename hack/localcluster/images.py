"""Local OCI image archives for the real node, built without a container engine, a registry or a pull.

    python -m hack.localcluster images build [--out DIR] [--coredns-binary PATH] [IMAGE ...]

IMAGE is pause, shell, gymsandbox, swe-episode, gym-host or coredns (default: all of them; coredns only with
--coredns-binary).
Each archive is an oci-layout tar that `ctr -n k8s.io images import FILE` takes: index.json names the image
with the `io.containerd.image.name` annotation. An archive's file name holds a hash of its inputs, so a file
that exists is a cache hit. Prints one `NAME=PATH` line per image on stdout; progress goes to stderr.

    localhost/gymsandbox/pause:3.10       Kubernetes' pause.c (from the Go module cache), gcc -static
    localhost/gymsandbox/shell:1          Debian's busybox-static: everything the broker runs in a sandbox
    localhost/gymsandbox/gymsandbox:HASH  the project's Dockerfile, built by buildah (chroot isolation, vfs)
                                          on a debian:bookworm-slim made here with mmdebstrap
    localhost/gymsandbox/coredns:VERSION  the given static coredns binary
    localhost/gymsandbox/swe-episode:HASH the sample episode image: Debian minbase (bash, coreutils, tar,
                                          grep, sed, findutils) with python3 and ps, run as 65532
    localhost/gymsandbox/gym-host:HASH    the sample Gym host (examples/gym-host/): Debian trixie's Python
                                          3.13, nemo-gym (--no-deps) and this project's light install

Runs as root (apt-get, mmdebstrap, buildah). Standard library only, so it runs before the project's
virtualenv exists. The Debian packages it needs are installed with apt-get when missing.
"""

from __future__ import annotations

import argparse
import fcntl
import gzip
import hashlib
import io
import json
import os
import platform
import re
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from hack.localcluster.console import logger
from hack.localcluster.paths import CACHE, ROOT
from hack.localcluster.pins import pin

REGISTRY = "localhost/gymsandbox"
ARCH = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SANDBOX_UID = 65532
# Part of every cache key: bump it when a recipe here changes in a way its hashed inputs do not show.
RECIPE = "2"

Built = tuple[str, Path]  # (image name, archive)

# Debian packages each image needs on this host.
PACKAGES = {
    "pause": ["gcc", "libc6-dev"],
    "shell": ["busybox-static"],
    "gymsandbox": ["buildah", "mmdebstrap", "ca-certificates"],
    "swe-episode": ["mmdebstrap"],
    "gym-host": ["mmdebstrap"],  # and pip in the Python running this script
    "coredns": [],
}

# The shell image's accounts: root and nobody. Like most public images it has no entry for the uid pods run
# as (65532) and sets no HOME, so the node tier sees what such an image gets: a HOME of "/" unless the pod
# sets one.
PASSWD = """\
root:x:0:0:root:/root:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
"""  # noqa: S105 - /etc/passwd: account names, no password
GROUP = """\
root:x:0:
nogroup:x:65534:
"""

# The Dockerfile's base, made here instead of pulled. Keyed by this name, not by date: it is rebuilt only
# when the key changes, and buildah's storage is keyed by it too.
BASE_KEY = "bookworm-minbase-v1"
BASE_REF = "docker.io/library/debian:bookworm-slim"
DEBIAN_SOURCES = [Path("/etc/apt/sources.list.d/debian.sources"), Path("/etc/apt/sources.list")]
# What the official slim image leaves out. The filters stay in the image (/etc/dpkg/dpkg.cfg.d), so the
# Dockerfile's own apt-get installs leave those files out too.
SLIM_DPKG_FILTERS = [
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/groff/*",
    "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/locale/*",
    "path-exclude=/usr/share/lintian/*",
]
# Like the official image, apt keeps no downloaded packages, binary caches or translations.
_DROP_DEBS = '"rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb || true";'
SLIM_APT_CONF = f"""\
DPkg::Post-Invoke {{ {_DROP_DEBS} }};
APT::Update::Post-Invoke {{ {_DROP_DEBS} }};
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
Acquire::Languages "none";
"""
HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")

log = logger("images")


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def cache_key(*parts: bytes | Path) -> str:
    """A short hash over byte strings and file contents, for archive names."""
    digest = hashlib.sha256(RECIPE.encode())
    for part in parts:
        data = part.read_bytes() if isinstance(part, Path) else part
        digest.update(len(data).to_bytes(8, "big") + data)
    return digest.hexdigest()[:12]


# ---- the deterministic layer writer and the archive ----------------------------------------------------


def _tree(directory: Path) -> Iterator[Path]:
    """Every path under `directory`, parents first, names sorted; symlinked directories are not entered."""
    for name in sorted(os.listdir(directory)):
        path = directory / name
        yield path
        if path.is_dir() and not path.is_symlink():
            yield from _tree(path)


def layer_tar(rootfs: Path) -> bytes:
    """The tree under `rootfs` as an uncompressed layer: the same tree always gives the same bytes.

    Entries are sorted and owned by 0:0 with mtime 0; modes, symlinks and hard links are kept, setuid and
    setgid bits are dropped. Anything but directories, regular files and symlinks is refused. (With mtime 0,
    .pyc files compiled against the real mtimes go stale: this writer is not for Python trees.)
    """
    buffer = io.BytesIO()
    first_path_of: dict[tuple[int, int], str] = {}
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in _tree(rootfs):
            st = path.lstat()
            info = tarfile.TarInfo(path.relative_to(rootfs).as_posix())
            info.mode = stat.S_IMODE(st.st_mode) & ~(stat.S_ISUID | stat.S_ISGID)
            content = None
            if stat.S_ISDIR(st.st_mode):
                info.type = tarfile.DIRTYPE
            elif stat.S_ISLNK(st.st_mode):
                info.type, info.linkname = tarfile.SYMTYPE, os.readlink(path)
            elif stat.S_ISREG(st.st_mode) and (st.st_dev, st.st_ino) in first_path_of:
                info.type, info.linkname = tarfile.LNKTYPE, first_path_of[st.st_dev, st.st_ino]
            elif stat.S_ISREG(st.st_mode):
                if st.st_nlink > 1:
                    first_path_of[st.st_dev, st.st_ino] = info.name
                info.size, content = st.st_size, path.open("rb")
            else:
                raise ValueError(f"{path}: not a directory, regular file or symlink")
            tar.addfile(info, content)
            if content:
                content.close()
    return buffer.getvalue()


def _write_tar(out: Path, members: Mapping[str, bytes | Path]) -> None:
    """A tar of `members` (name -> bytes or a file) and their parent directories, sorted, with fixed
    metadata. Written beside `out` and renamed, so `out` exists only when complete."""
    parents = {parent.as_posix() for name in members for parent in Path(name).parents} - {"."}
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    with tarfile.open(partial, "w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(parents | set(members)):
            info = tarfile.TarInfo(name)
            content = members.get(name)
            if content is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            elif isinstance(content, Path):
                info.mode, info.size = 0o644, content.stat().st_size
                with content.open("rb") as file:
                    tar.addfile(info, file)
            else:
                info.mode, info.size = 0o644, len(content)
                tar.addfile(info, io.BytesIO(content))
    partial.replace(out)


def drop_older(out: Path) -> None:
    """Remove the archives `out` replaces: same name up to the cache key, another key."""
    for older in out.parent.glob(out.name.rsplit("-", 1)[0] + "-*.oci.tar"):
        if older != out and older.name.count("-") == out.name.count("-"):
            older.unlink()


def _descriptor(media_type: str, data: bytes) -> dict[str, Any]:
    return {"mediaType": media_type, "digest": sha256(data), "size": len(data)}


def _index(manifest: Mapping[str, Any], ref: str) -> bytes:
    """index.json with one manifest, named `ref` for containerd's import and by tag for the OCI layout."""
    annotations = {
        **manifest.get("annotations", {}),
        "io.containerd.image.name": ref,
        "org.opencontainers.image.ref.name": ref.rsplit(":", 1)[1],
    }
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{**manifest, "annotations": annotations}],
    }
    return json.dumps(index, sort_keys=True).encode()


def image_archive(ref: str, layers: list[bytes], config: Mapping[str, Any], out: Path) -> None:
    """Write the OCI archive `out` of an image named `ref`: `layers` are uncompressed tars (base first),
    `config` is the runtime part of the image config (Entrypoint, Cmd, User, Env, WorkingDir, ...)."""
    compressed = [gzip.compress(layer, compresslevel=6, mtime=0) for layer in layers]
    epoch = "1970-01-01T00:00:00Z"
    image_config = {
        "architecture": ARCH,
        "os": "linux",
        "created": epoch,
        "config": dict(config),
        "rootfs": {"type": "layers", "diff_ids": [sha256(layer) for layer in layers]},
        "history": [{"created": epoch, "created_by": "hack/images.py"} for _ in layers],
    }
    config_json = json.dumps(image_config, sort_keys=True).encode()
    manifest: dict[str, Any] = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": _descriptor("application/vnd.oci.image.config.v1+json", config_json),
        "layers": [_descriptor("application/vnd.oci.image.layer.v1.tar+gzip", blob) for blob in compressed],
    }
    manifest_json = json.dumps(manifest, sort_keys=True).encode()
    descriptor = {
        **_descriptor(manifest["mediaType"], manifest_json),
        "platform": {"architecture": ARCH, "os": "linux"},
    }
    members: dict[str, bytes | Path] = {
        "oci-layout": b'{"imageLayoutVersion":"1.0.0"}',
        "index.json": _index(descriptor, ref),
    }
    for blob in [config_json, manifest_json, *compressed]:
        members["blobs/sha256/" + sha256(blob).removeprefix("sha256:")] = blob
    _write_tar(out, members)


def pack_layout(layout: Path, ref: str, out: Path) -> None:
    """Tar an OCI layout directory that holds one image (as `buildah push` writes it), naming it `ref`."""
    (manifest,) = json.loads((layout / "index.json").read_text())["manifests"]
    members: dict[str, bytes | Path] = {
        "oci-layout": (layout / "oci-layout").read_bytes(),
        "index.json": _index(manifest, ref),
    }
    for blob in (layout / "blobs" / "sha256").iterdir():
        members[f"blobs/sha256/{blob.name}"] = blob
    _write_tar(out, members)


def rootfs_image(ref: str, out: Path, config: Mapping[str, Any], fill: Callable[[Path], None]) -> Built:
    """Unless `out` exists: a single-layer image of the tree that `fill` makes in an empty directory."""
    if not out.exists():
        with tempfile.TemporaryDirectory() as tmp:
            rootfs = Path(tmp) / "rootfs"
            rootfs.mkdir()
            fill(rootfs)
            image_archive(ref, [layer_tar(rootfs)], config, out)
        drop_older(out)
    return ref, out


# ---- host tools ------------------------------------------------------------------------------------------


def run(*argv: str | Path, check: bool = True, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(arg) for arg in argv], check=check, text=True, **kwargs)


def ensure_packages(packages: list[str]) -> None:
    """apt-get install those of `packages` that are missing, refreshing the package lists if that fails."""
    query = ["dpkg-query", "--show", "--showformat=${db:Status-Status}"]
    missing = [
        name for name in packages if run(*query, name, check=False, capture_output=True).stdout != "installed"
    ]
    if not missing:
        return
    log(f"apt-get install {' '.join(missing)}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    apt = ["apt-get", "-q", "-y", "-o", "DPkg::Lock::Timeout=600"]
    install = [*apt, "install", "--no-install-recommends", *missing]
    if run(*install, check=False, env=env, stdout=sys.stderr).returncode != 0:
        run(*apt, "update", env=env, stdout=sys.stderr)
        run(*install, env=env, stdout=sys.stderr)


class Buildah:
    """buildah on a vfs storage of its own (under the cache, keyed by the base image it holds)."""

    def __init__(self, store: Path) -> None:
        self.store = store

    def __call__(self, *args: str | Path, **kwargs: Any) -> subprocess.CompletedProcess[str]:
        storage = [f"--root={self.store / 'root'}", f"--runroot={self.store / 'run'}", "--storage-driver=vfs"]
        return run("buildah", *storage, *args, **kwargs)

    def import_base(self) -> None:
        """Make BASE_REF exist in this storage, from the archive that debian_base writes."""
        if self("inspect", "--type", "image", BASE_REF, check=False, capture_output=True).returncode == 0:
            return
        archive = self.store / "base.oci.tar"
        if not archive.exists():
            debian_base(archive)
        image_id = self("pull", "--quiet", f"oci-archive:{archive}", capture_output=True).stdout.strip()
        self("tag", image_id, BASE_REF)


def debian_rootfs(rootfs: Path, suite: str, packages: list[str]) -> None:
    """Debian minbase of `suite` with `packages`, merged /usr, from this host's Debian mirror, slimmed like
    the official slim images."""
    sources: str | Path = next(path for path in DEBIAN_SOURCES if path.is_file())
    if suite != "bookworm":  # this host's sources name bookworm's suites: the other suite from its mirror
        mirror = re.search(r"^URIs:\s*(\S+)|^deb\s+(\S+)", Path(sources).read_text(), re.MULTILINE)
        sources = (mirror.group(1) or mirror.group(2)) if mirror else "http://deb.debian.org/debian"
    log(f"mmdebstrap {suite} minbase {' '.join(packages)} from {sources}")
    options = ["--quiet", "--variant=minbase", "--mode=root", "--format=directory"]
    merged_usr = "--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr"
    filters = [f"--dpkgopt={line}" for line in SLIM_DPKG_FILTERS]
    include = [f"--include={','.join(packages)}"] if packages else []
    run("mmdebstrap", *options, merged_usr, *filters, *include, suite, rootfs, sources, stdout=sys.stderr)
    # The container runtime provides /dev, /etc/hostname and /etc/resolv.conf: drop this host's.
    for path in [*(rootfs / "dev").iterdir(), rootfs / "etc/hostname", rootfs / "etc/resolv.conf"]:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    (rootfs / "etc/apt/apt.conf.d/docker-clean").write_text(SLIM_APT_CONF)
    shutil.rmtree(rootfs / "var/lib/apt/lists", ignore_errors=True)
    (rootfs / "var/lib/apt/lists").mkdir()


def debian_base(out: Path) -> None:
    """debian:bookworm-slim's equivalent (first time only)."""
    with tempfile.TemporaryDirectory() as tmp:
        rootfs = Path(tmp) / "rootfs"
        debian_rootfs(rootfs, "bookworm", [])
        image_archive(BASE_REF, [layer_tar(rootfs)], {"Cmd": ["bash"], "Env": [PATH_ENV]}, out)


# ---- the images ------------------------------------------------------------------------------------------


def build_pause(out_dir: Path) -> Built:
    """Kubernetes' pause.c from the Go module cache (hack/build-binaries.sh downloads it)."""
    k8s = pin("K8S_VERSION")
    source = CACHE / "go" / "mod" / f"k8s.io/kubernetes@{k8s}" / "build" / "pause" / "linux" / "pause.c"
    if not source.is_file():
        raise SystemExit(f"images.py: {source} is missing: run hack/build-binaries.sh first")
    gcc = run("gcc", "--version", capture_output=True).stdout.splitlines()[0]

    def fill(rootfs: Path) -> None:
        flags = ["-Os", "-Wall", "-Werror", "-static", f"-DVERSION=v3.10-gymsandbox-{k8s}"]
        run("gcc", *flags, "-o", rootfs / "pause", source)
        run("strip", rootfs / "pause")

    config = {"Entrypoint": ["/pause"], "User": "65535:65535", "Env": [PATH_ENV]}
    out = out_dir / f"pause-3.10-{cache_key(source, gcc.encode())}.oci.tar"
    return rootfs_image(f"{REGISTRY}/pause:3.10", out, config, fill)


def build_shell(out_dir: Path) -> Built:
    """Debian's busybox-static with every applet linked in /bin, the sandbox user, /tmp and /home."""
    busybox = Path("/bin/busybox")

    def fill(rootfs: Path) -> None:
        for directory in ("bin", "dev", "etc", "home", "proc", "root", "sys", "tmp"):
            (rootfs / directory).mkdir()
            (rootfs / directory).chmod(0o755)
        (rootfs / "root").chmod(0o700)
        (rootfs / "tmp").chmod(0o1777)
        shutil.copyfile(busybox, rootfs / "bin/busybox")
        (rootfs / "bin/busybox").chmod(0o755)
        for applet in run(busybox, "--list", capture_output=True).stdout.split():
            if applet != "busybox":
                (rootfs / "bin" / applet).symlink_to("busybox")
        (rootfs / "etc/passwd").write_text(PASSWD)
        (rootfs / "etc/group").write_text(GROUP)

    config = {
        "Cmd": ["/bin/sh"],
        "User": f"{SANDBOX_UID}:{SANDBOX_UID}",
        "Env": [PATH_ENV],
        "WorkingDir": "/",
    }
    out = out_dir / f"shell-1-{cache_key(busybox, PASSWD.encode(), GROUP.encode())}.oci.tar"
    return rootfs_image(f"{REGISTRY}/shell:1", out, config, fill)


def static_binary_image(ref: str, binary: Path, target: str, out_dir: Path) -> Built:
    """An image of one static `binary` at `target`, its entrypoint, run as the sandbox user."""
    name, tag = ref.rsplit("/", 1)[1].split(":")

    def fill(rootfs: Path) -> None:
        path = rootfs / target.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(binary, path)
        path.chmod(0o755)

    config = {"Entrypoint": [target], "User": f"{SANDBOX_UID}:{SANDBOX_UID}", "Env": [PATH_ENV]}
    out = out_dir / f"{name}-{tag}-{cache_key(binary, target.encode())}.oci.tar"
    return rootfs_image(ref, out, config, fill)


def build_coredns(out_dir: Path, binary: Path) -> Built:
    """The coredns binary at /coredns, tagged with the version it reports."""
    report = run(binary, "-version", capture_output=True).stdout
    version = re.search(r"CoreDNS-(\S+)", report)
    if not version:
        raise SystemExit(f"images.py: `{binary} -version` names no CoreDNS version: {report!r}")
    return static_binary_image(f"{REGISTRY}/coredns:{version.group(1)}", binary, "/coredns", out_dir)


def project_sources() -> tuple[list[str], str]:
    """The files the Dockerfile build reads (tracked or new, not ignored by git) and their hash."""
    ls_files = ["ls-files", "-z", "--cached", "--others", "--exclude-standard", "--"]
    paths = ["pyproject.toml", "README.md", "operator", "Dockerfile", ".dockerignore"]
    listed = run("git", "-C", ROOT, *ls_files, *paths, capture_output=True).stdout
    files = sorted(name for name in listed.split("\0") if name and (ROOT / name).is_file())
    return files, cache_key(*(part for name in files for part in (name.encode(), ROOT / name)))


def build_gymsandbox(out_dir: Path) -> Built:
    """The project's Dockerfile, built by buildah with chroot isolation (no daemon) on the local base."""
    files, key = project_sources()
    ref = f"{REGISTRY}/gymsandbox:{key}"
    out = out_dir / f"gymsandbox-{key}.oci.tar"
    if out.exists():
        return ref, out
    buildah = Buildah(CACHE / "buildah" / BASE_KEY)
    buildah.import_base()
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    with tempfile.TemporaryDirectory() as tmp:
        context, home, layout = Path(tmp) / "context", Path(tmp) / "home", Path(tmp) / "layout"
        for name in files:
            (context / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, context / name)
        # pip in the build trusts this host's CA bundle (behind a TLS-inspecting proxy, only that one has
        # its CA), through root's pip config on a bind mount over /root. The base has /root already:
        # buildah leaves an empty file or directory behind for a mount on a path that does not exist.
        (home / ".config/pip").mkdir(parents=True)
        shutil.copyfile(HOST_CA, home / "ca.crt")
        (home / ".config/pip/pip.conf").write_text("[global]\ncert = /root/ca.crt\n")
        log(f"gymsandbox: buildah build {ref}")
        try:
            # No --layers: on vfs every cached step is a full copy of the root filesystem, which makes a
            # cached rebuild slower than building the two stages from scratch.
            isolation = ["--isolation=chroot", "--pull=never", f"--volume={home}:/root"]
            image = [f"--tag={ref}", f"--build-arg=VERSION={version}", "--identity-label=false"]
            buildah(
                "build", *isolation, *image, f"--file={context / 'Dockerfile'}", context, stdout=sys.stderr
            )
            buildah("push", "--quiet", ref, f"oci:{layout}:{ref}")
            pack_layout(layout, ref, out)
            drop_older(out)
        finally:
            # Keep only the base in the storage: nothing else is reused.
            buildah("rm", "--all", check=False, stdout=subprocess.DEVNULL)
            buildah("rmi", ref, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return ref, out


# The sample images are keyed by their recipe and inputs, not by the day: the Debian packages in them are
# whatever the mirror served when the archive was made (bump RECIPE to remake them).
SWE_EPISODE_PACKAGES = ["python3-minimal", "procps"]
GYM_HOST_PACKAGES = ["python3"]  # trixie: Python 3.13 (nemo-gym needs >= 3.12; bookworm has 3.11)
GYM_HOST = ROOT / "examples" / "gym-host"
GYM_HOST_LIB = "/opt/gym-host/lib"


def build_swe_episode(out_dir: Path) -> Built:
    """What SWE-style tasks need in a sandbox: a shell, coreutils, tar, python3; run as the sandbox user."""

    def fill(rootfs: Path) -> None:
        debian_rootfs(rootfs, "bookworm", SWE_EPISODE_PACKAGES)

    config = {
        "Cmd": ["sleep", "infinity"],
        "User": f"{SANDBOX_UID}:{SANDBOX_UID}",
        "Env": [PATH_ENV],
        "WorkingDir": "/tmp",
    }
    key = cache_key(" ".join(SWE_EPISODE_PACKAGES).encode())
    return rootfs_image(f"{REGISTRY}/swe-episode:{key}", out_dir / f"swe-episode-{key}.oci.tar", config, fill)


def build_gym_host(out_dir: Path) -> Built:
    """examples/gym-host/server.py on trixie's Python, with nemo-gym and this project's light install (its
    wheel with httpx and pydantic, built for that Python by this host's pip) in GYM_HOST_LIB."""
    _, project = project_sources()
    nemo_gym = pin("NEMO_GYM_VERSION")
    key = cache_key(
        project.encode(), nemo_gym.encode(), " ".join(GYM_HOST_PACKAGES).encode(), *GYM_HOST.glob("*")
    )

    def fill(rootfs: Path) -> None:
        debian_rootfs(rootfs, "trixie", GYM_HOST_PACKAGES)
        in_rootfs: list[str | Path] = ["chroot", rootfs, "python3"]  # trixie's libc, not this host's
        version = run(
            *in_rootfs, "-c", "import sys; print(sys.version_info[1])", capture_output=True
        ).stdout.strip()
        target = rootfs / GYM_HOST_LIB.lstrip("/")
        pip: list[str | Path] = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--quiet"]
        quiet = {**os.environ, "PIP_ROOT_USER_ACTION": "ignore"}
        wheel_for: list[str | Path] = [
            "--target", target, "--no-warn-conflicts", "--only-binary=:all:", "--implementation=cp",
            f"--python-version=3.{version}", f"--abi=cp3{version}",
            f"--platform=manylinux_2_17_{platform.machine()}",
        ]  # fmt: skip
        with tempfile.TemporaryDirectory() as wheels:
            run(*pip, "wheel", "--no-deps", "--wheel-dir", wheels, ROOT, stdout=sys.stderr, env=quiet)
            wheel = Path(wheels).glob("gymsandbox-*.whl")
            run(*pip, "install", *wheel_for, *wheel, stdout=sys.stderr, env=quiet)
        # --no-deps: the sandbox seam imports only the standard library. pip checks requires-python against
        # the interpreter it runs on; the target's is 3.13, which nemo-gym's ">=3.12" admits.
        run(*pip, "install", *wheel_for, "--no-deps", "--upgrade", "--ignore-requires-python",
            f"nemo-gym=={nemo_gym}", stdout=sys.stderr, env=quiet)  # fmt: skip
        shutil.copyfile(GYM_HOST / "server.py", rootfs / "opt/gym-host/server.py")
        run(*in_rootfs, "-W", "ignore", "-m", "compileall", "-q", "/opt/gym-host")  # nemo-gym's own warnings

    config = {
        "Cmd": ["python3", "/opt/gym-host/server.py"],
        "User": f"{SANDBOX_UID}:{SANDBOX_UID}",
        "Env": [PATH_ENV, f"PYTHONPATH={GYM_HOST_LIB}", "PYTHONUNBUFFERED=1", "PYTHONDONTWRITEBYTECODE=1"],
        "WorkingDir": "/tmp",
        "ExposedPorts": {"8080/tcp": {}},
    }
    return rootfs_image(f"{REGISTRY}/gym-host:{key}", out_dir / f"gym-host-{key}.oci.tar", config, fill)


def main(argv: list[str]) -> int:
    """`python -m hack.localcluster images ARGV...`."""
    parser = argparse.ArgumentParser(
        prog="python -m hack.localcluster images",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("command", choices=["build"])
    parser.add_argument("images", nargs="*", metavar="IMAGE", help=f"any of {', '.join(PACKAGES)}")
    parser.add_argument("--out", type=Path, default=CACHE / "images", help="where the archives go")
    parser.add_argument("--coredns-binary", type=Path, help="the static coredns binary to wrap")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.images) - set(PACKAGES))
    if unknown:
        parser.error(f"unknown image {', '.join(unknown)} (known: {', '.join(PACKAGES)})")
    wanted = [image for image in PACKAGES if image in (args.images or PACKAGES)]
    if "coredns" in wanted and args.coredns_binary is None:
        if args.images:
            parser.error("coredns needs --coredns-binary PATH")
        log("coredns: skipped (no --coredns-binary PATH given)")
        wanted.remove("coredns")
    builders: dict[str, Callable[[Path], Built]] = {
        "pause": build_pause,
        "shell": build_shell,
        "gymsandbox": build_gymsandbox,
        "swe-episode": build_swe_episode,
        "gym-host": build_gym_host,
        "coredns": lambda out_dir: build_coredns(out_dir, args.coredns_binary.resolve()),
    }
    out_dir = args.out.resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    CACHE.mkdir(parents=True, exist_ok=True)
    # One build at a time: a second caller waits here, then finds the archives cached.
    with (CACHE / ".images.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        ensure_packages(sorted({package for image in wanted for package in PACKAGES[image]}))
        for image in wanted:
            start = time.monotonic()
            ref, path = builders[image](out_dir)
            size = path.stat().st_size / 1e6
            log(f"{image}: {path.name} ({size:.1f} MB) in {time.monotonic() - start:.1f} s")
            print(f"{ref}={path}", flush=True)
    return 0
