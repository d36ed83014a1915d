#!/usr/bin/env bash
# Builds every image of the compose stack without any registry:
#   payouts/base:bookworm   Debian bookworm minbase + ca-certificates, curl, PostgreSQL 15,
#                           made with debootstrap from Debian's packages (once; reused)
#   payouts/postgres:15     PostgreSQL on that base, creating lockdb and paydb
#   payouts/<service>:local each service from this checkout's release binaries, FROM scratch:
#                           the stripped binary, its shared libraries, busybox, user 10001
#                           (at most SERVICE_IMAGE_MAX_BYTES, checked below)
#   payouts/etcd:3.4        etcd from Debian's etcd-server package, for compose.etcd.yaml
#   payouts/prometheus:2.42 Prometheus from Debian's prometheus package (and its web UI)
# Re-running is cheap: the base is reused, cargo and docker reuse what did not change.
#   deploy/build-images.sh              everything
#   deploy/build-images.sh --base-only  only the debootstrap base (CI fetches it while compiling)
set -euo pipefail
base_only=false
case "${1:-}" in
    --base-only) base_only=true ;;
    "") ;;
    *) echo "usage: deploy/build-images.sh [--base-only]" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/.."

BASE=payouts/base:bookworm
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
SERVICES="lock-server:8081 payment-resource:8082 rail-proxy:8083 payout-executor:8084 rail-stub:8085"

if ! docker image inspect "$BASE" >/dev/null 2>&1; then
    if ! command -v debootstrap >/dev/null 2>&1; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
    fi
    rootfs=$(mktemp -d /tmp/payouts-rootfs.XXXXXX)
    trap 'rm -rf "$rootfs"' EXIT
    echo "debootstrap bookworm into $rootfs (from $MIRROR) ..."
    debootstrap --variant=minbase --include=ca-certificates,curl,postgresql-15 bookworm "$rootfs" "$MIRROR" >/dev/null
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    tar -C "$rootfs" -c . | docker import --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' - "$BASE" >/dev/null
    echo "imported $BASE"
fi
if $base_only; then
    exit 0
fi

# The services' binaries: this checkout's release build, or, with PREBUILT_BIN_DIR set, the
# binaries already in that directory (CI passes its one debug build: nothing is compiled
# twice; the harness honours the same variable).
if [ -n "${PREBUILT_BIN_DIR:-}" ]; then
    bin_dir=$PREBUILT_BIN_DIR
    echo "service binaries from $bin_dir (PREBUILT_BIN_DIR)"
else
    bin_dir=target/release
    echo "cargo build --release (services) ..."
    cargo build --release --quiet -p lock-server -p payment-resource -p rail-proxy -p rail-stub -p payout-executor
fi
mkdir -p target/docker-bin
# Service images are FROM scratch (deploy/Dockerfile): stripped binaries (the release
# profile keeps debug info for perf), and a static busybox for their health checks.
for entry in $SERVICES; do
    if [ ! -x "$bin_dir/${entry%%:*}" ]; then
        echo "deploy/build-images.sh: $bin_dir/${entry%%:*} is missing" >&2; exit 1
    fi
    strip -o "target/docker-bin/${entry%%:*}" "$bin_dir/${entry%%:*}"
done
if [ ! -x /bin/busybox ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq busybox-static >/dev/null
fi
cp -p /bin/busybox target/docker-bin/busybox

# The classic builder: this machine has no buildx, and no registry to fetch it from.
export DOCKER_BUILDKIT=0
docker build --quiet -f deploy/postgres.Dockerfile --build-arg BASE="$BASE" -t payouts/postgres:15 . >/dev/null
echo "built payouts/postgres:15"
if ! command -v etcd >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server >/dev/null
fi
cp -p "$(command -v etcd)" target/docker-bin/etcd
docker build --quiet -f deploy/etcd.Dockerfile --build-arg BASE="$BASE" -t payouts/etcd:3.4 . >/dev/null
echo "built payouts/etcd:3.4"
if ! command -v prometheus >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus >/dev/null
fi
cp -p "$(command -v prometheus)" target/docker-bin/prometheus
tar -C /usr/share/prometheus -cf target/docker-bin/prometheus-web.tar web
docker build --quiet -f deploy/prometheus.Dockerfile --build-arg BASE="$BASE" -t payouts/prometheus:2.42 . >/dev/null
echo "built payouts/prometheus:2.42"
for entry in $SERVICES; do
    name=${entry%%:*}
    port=${entry##*:}
    docker build --quiet -f deploy/Dockerfile --target service \
        --build-arg BUILDER="$BASE" --build-arg BINARIES=prebuilt \
        --build-arg SERVICE="$name" --build-arg PORT="$port" -t "payouts/$name:local" . >/dev/null
    echo "built payouts/$name:local"
done

# Small, non-root service images (issue 14): refuse to hand on an image that grew.
SERVICE_IMAGE_MAX_BYTES=$((50 * 1000 * 1000))
for entry in $SERVICES; do
    image="payouts/${entry%%:*}:local"
    size=$(docker image inspect --format '{{.Size}}' "$image")
    user=$(docker image inspect --format '{{.Config.User}}' "$image")
    echo "$image: $((size / 1000 / 1000)) MB, user $user"
    if [ "$size" -gt "$SERVICE_IMAGE_MAX_BYTES" ]; then
        echo "$image is $size bytes, over $SERVICE_IMAGE_MAX_BYTES" >&2; exit 1
    fi
    if [ -z "$user" ] || [ "$user" = 0 ] || [ "$user" = root ]; then
        echo "$image runs as root" >&2; exit 1
    fi
done
