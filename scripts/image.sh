#!/usr/bin/env bash
# Build the Agent-Reach image on a machine that reaches no image registry: a base image is made from Debian's
# packages (debootstrap of bookworm, minimal, plus python3.11), imported with `docker import`, and the Dockerfile
# builds FROM it (build arg BASE). With a registry at hand, `docker build -t agent-reach .` (python:3.11-slim) does
# the same job. Containers here use the host's network only (dockerd --bridge=none; builds with --network host).
#
#   scripts/image.sh            build agent-reach:dev (and the base agent-reach-base:bookworm once)
#   IMAGE=name:tag scripts/image.sh
set -euo pipefail
cd "$(dirname "$0")/.."

IMAGE=${IMAGE:-agent-reach:dev}
BASE_IMAGE=${BASE_IMAGE:-agent-reach-base:bookworm}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
ROOTFS_DIR=${ROOTFS_DIR:-/var/tmp/agent-reach-rootfs}
EXTRAS=${EXTRAS:-}
# The base outlives a daemon's image store here: saved once, loaded by later runs (CI on a fresh daemon).
CACHE_DIR=${REACH_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/agent-reach/images}

need() { command -v "$1" >/dev/null || missing+=("$2"); }
missing=()
need docker docker.io
need dockerd docker.io
need debootstrap debootstrap
if ((${#missing[@]})); then
  [ "$(id -u)" = 0 ] || { echo "image.sh: needs ${missing[*]} (apt-get install ${missing[*]})" >&2; exit 2; }
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# The daemon: started here when none answers, with no bridge (the default bridge sits on a private range).
if ! docker info >/dev/null 2>&1; then
  [ "$(id -u)" = 0 ] || { echo "image.sh: no docker daemon answers, and only root may start one" >&2; exit 2; }
  mkdir -p /var/tmp/agent-reach-dockerd
  nohup dockerd --bridge=none --iptables=false --ip6tables=false \
    >/var/tmp/agent-reach-dockerd/dockerd.log 2>&1 &
  for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || { echo "image.sh: dockerd did not start (see /var/tmp/agent-reach-dockerd/dockerd.log)" >&2; exit 4; }
fi

# The base: bookworm's minimal system with python3.11 and venv, imported as an image (once), saved in CACHE_DIR.
base_tar="$CACHE_DIR/${BASE_IMAGE//[:\/]/_}.tar"
if ! docker image inspect "$BASE_IMAGE" >/dev/null 2>&1 && [ -s "$base_tar" ]; then
  docker load -q -i "$base_tar" >/dev/null || rm -f "$base_tar"
fi
if ! docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
  echo "image.sh: making $BASE_IMAGE from Debian's packages"
  rm -rf "$ROOTFS_DIR"
  debootstrap --variant=minbase --include=python3.11,python3.11-venv,python3-venv,ca-certificates \
    bookworm "$ROOTFS_DIR" "$MIRROR" >/dev/null
  chroot "$ROOTFS_DIR" sh -c 'apt-get clean && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /usr/share/doc/* /usr/share/man/*'
  # python3 names python3.11 there (Debian's python3 package), as in python:3.11-slim
  tar -C "$ROOTFS_DIR" -c . | docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' --change 'CMD ["python3"]' - "$BASE_IMAGE" >/dev/null
  rm -rf "$ROOTFS_DIR"
fi
if [ ! -s "$base_tar" ]; then
  mkdir -p "$CACHE_DIR" && docker save -o "$base_tar.part" "$BASE_IMAGE" && mv "$base_tar.part" "$base_tar"
fi

# CAs this machine added to its trust store (an egress proxy's) are handed to the builder stage's pip only.
extra_ca=$(cat /usr/local/share/ca-certificates/*.crt 2>/dev/null || true)
docker build --network host --build-arg BASE="$BASE_IMAGE" --build-arg EXTRAS="$EXTRAS" \
  --build-arg EXTRA_CA="$extra_ca" -t "$IMAGE" .
echo "image.sh: built $IMAGE ($(docker image inspect -f '{{.Size}}' "$IMAGE" | awk '{printf "%.0f MiB", $1/1048576}'))"
