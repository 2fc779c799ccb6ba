# The gymsandbox image: one image for both processes (`gymsandbox operator ...`, `gymsandbox broker ...`).
# Built only from Debian packages and PyPI: `make image` (hack/image.sh). Where there is no container engine,
# tests/unit/test_dockerfile.py lints this file with hadolint instead.
#
# The Helm chart runs it as uid/gid 65532 (values.yaml securityContext) with a read-only root filesystem
# and an emptyDir at /tmp, so nothing here may need to write outside /tmp at run time.

# ---- builder: a virtualenv with the project and its dependencies ----------------------------------------
FROM debian:bookworm-slim AS builder

# Debian keeps only the current version of each package in bookworm, so pinning exact versions
# (DL3008) breaks the build at the next security update; the base image tag is what pins the release.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv python3-pip \
    && rm -rf /var/lib/apt/lists/*

# The venv gets no pip or setuptools of its own (about 25 MB): Debian's pip installs into it from outside.
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
RUN python3 -m venv --without-pip /opt/gymsandbox

WORKDIR /src
# Only what the build needs: pyproject.toml names README.md as the package's readme.
COPY pyproject.toml README.md ./
COPY operator/ operator/
# The dependencies are bounded in pyproject.toml; `.` is this project, not a PyPI package, and its `operator`
# extra is what the operator and the broker need. pip compiles the byte code here, since the root
# filesystem is read-only at run time.
RUN python3 -m pip --python /opt/gymsandbox/bin/python install --no-cache-dir ".[operator]" \
    && /opt/gymsandbox/bin/gymsandbox version

# ---- runtime: the Python runtime from Debian plus the virtualenv --------------------------------------
FROM debian:bookworm-slim

ARG VERSION=unknown
LABEL org.opencontainers.image.title="gymsandbox" \
      org.opencontainers.image.description="Kubernetes operator and episode broker for isolated RL / agent-evaluation environments (GymHost, EpisodeSandbox)" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="docker.io/library/debian:bookworm-slim"

# Same reasoning as in the builder: bookworm does not keep old package versions to pin to.
# The venv's interpreter is a symlink to /usr/bin/python3, the same Debian python3 as in the builder.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 65532 gymsandbox \
    && useradd --system --no-log-init --uid 65532 --gid 65532 --home-dir /tmp --no-create-home \
        --shell /usr/sbin/nologin gymsandbox

COPY --from=builder /opt/gymsandbox /opt/gymsandbox

# Byte code was compiled at install time; nothing is written beside the sources at run time.
ENV PATH="/opt/gymsandbox/bin:${PATH}" \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp
# Fails the build if the runtime lacks a library the venv needs (the CLI imports every component).
RUN ["/opt/gymsandbox/bin/gymsandbox", "version"]

# The operator's liveness endpoint (chart: operator.healthPort) and the broker (chart: broker.port).
EXPOSE 8080 8443

USER 65532:65532
ENTRYPOINT ["/opt/gymsandbox/bin/gymsandbox"]
CMD ["--help"]
