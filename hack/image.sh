#!/usr/bin/env bash
# `make image`: build the gymsandbox image from the Dockerfile with the first container engine that answers:
# docker, then podman, then buildah. Extra arguments go to the engine's build command.
#   IMAGE   the tag to build (default gymsandbox/gymsandbox:<version in pyproject.toml>)
# With no engine it says so and exits 1; tests/unit/test_dockerfile.py lints the Dockerfile instead.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! version=$(python3 -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')
then
  echo "image.sh: cannot read the version from pyproject.toml (needs python3 >= 3.11 on PATH)" >&2
  exit 1
fi
image=${IMAGE:-gymsandbox/gymsandbox:$version}

engine=""
for candidate in docker podman buildah; do
  command -v "$candidate" >/dev/null 2>&1 || continue
  # A docker or podman client without a reachable daemon/service is no engine: ask it before building.
  if [[ $candidate == buildah ]]; then
    probe=(buildah version)
  else
    probe=("$candidate" info)
  fi
  if "${probe[@]}" >/dev/null 2>&1; then
    engine=$candidate
    break
  fi
  echo "image.sh: $candidate is on PATH but '${probe[*]}' fails (is its daemon running?); trying the next" >&2
done

if [[ -z $engine ]]; then
  echo "image.sh: no container engine (docker, podman or buildah) on PATH;" \
    "the Dockerfile is linted by tests/unit/test_dockerfile.py instead;" \
    "python -m hack.localcluster images build gymsandbox builds it without one (root, Debian)" >&2
  exit 1
fi

echo "image.sh: building $image with $engine"
"$engine" build --build-arg "VERSION=$version" --tag "$image" --file Dockerfile "$@" .
echo "image.sh: built $image"
