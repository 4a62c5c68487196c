#!/usr/bin/env bash
# Build the server's container image (deploy/Containerfile) and run it:
# `init` on a fresh volume, then `serve` detached with its ports published,
# and check from the host that the about page answers on the reference
# site's TCP port, that the admin commands work inside the container
# (`exec ... status`, `invite`), and that the server stops on SIGTERM. CI
# runs it after deploy/check-deb.sh (which builds the release binary); by
# hand, as root or with sudo:
#   deploy/check-container.sh
# The image gets target/release/beebot-server as it is (built here only
# when missing): rebuild it first when the sources changed.
# No registry is needed: the base image is a minimal Debian made with
# debootstrap (the host's release), kept as target/container/base-SUITE.tar
# so that later runs only import it. Installs podman, runc and debootstrap
# from Debian when missing and fails when it cannot. Env: BEEBOT_BASE_SUITE
# (default the host's Debian release), BEEBOT_DEBIAN_MIRROR.
set -euo pipefail
cd "$(dirname "$0")/.."

fail() {
    echo "check-container: $*" >&2
    exit 1
}
t0=$(date +%s)
t_step=$t0
# step NAME: print the time the previous step took, then NAME.
step() {
    local now
    now=$(date +%s)
    echo "   ($((now - t_step)) s)"
    t_step=$now
    echo "== $*"
}

sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo

echo "== tools"
missing=()
command -v podman >/dev/null || missing+=(podman)
command -v runc >/dev/null || missing+=(runc)
command -v debootstrap >/dev/null || [ -x /usr/sbin/debootstrap ] || missing+=(debootstrap)
command -v curl >/dev/null || missing+=(curl)
if [ ${#missing[@]} -gt 0 ]; then
    echo "apt-get install ${missing[*]}"
    { $sudo apt-get update -qq && $sudo env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -qq "${missing[@]}" >/dev/null; } \
        || fail "cannot install ${missing[*]} (Debian packages): the image cannot be checked"
fi

# The engine's settings for this check: runc, which also runs on hosts with
# hybrid cgroups (crun refuses them), and limits a sandbox lets a container
# have (rootful podman otherwise raises nofile/nproc past the host's hard
# limits, and a host without CAP_SYS_RESOURCE refuses). nofile is the
# systemd unit's LimitNOFILE.
mkdir -p target/container
conf=$PWD/target/container/containers.conf
cat >"$conf" <<'EOF'
# Written by deploy/check-container.sh.
[containers]
default_ulimits = ["nofile=8192:8192", "nproc=4096:4096"]
[engine]
runtime = "runc"
EOF
podman() {
    $sudo env CONTAINERS_CONF="$conf" podman "$@"
}

version=$(cargo pkgid -p beebot-server | sed 's/.*[@#]//')
[ -n "$version" ] || fail "cannot read the workspace version"
binary=target/release/beebot-server
if [ ! -x "$binary" ]; then
    step "cargo build --release --locked -p beebot-server (no $binary yet)"
    cargo build --release --locked -p beebot-server
fi
said=$("$binary" --version) || fail "$binary does not run"
[ "$said" = "beebot-server $version" ] \
    || fail "$binary says '$said', want 'beebot-server $version': rebuild it"

# The base: a minimal Debian of the host's release (the binary needs its
# glibc), without apt's package lists and caches.
suite=${BEEBOT_BASE_SUITE:-$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")}
mirror=${BEEBOT_DEBIAN_MIRROR:-http://deb.debian.org/debian}
base=localhost/beebot-base:$suite
tarball=target/container/base-$suite.tar
if podman image exists "$base"; then
    step "base $base: already imported"
else
    if [ ! -f "$tarball" ]; then
        step "debootstrap --variant=minbase $suite ($mirror) -> $tarball"
        rootfs=$(mktemp -d)
        debootstrap=$(command -v debootstrap || echo /usr/sbin/debootstrap)
        $sudo "$debootstrap" --variant=minbase "$suite" "$rootfs" "$mirror" \
            >target/container/debootstrap.log 2>&1 \
            || { tail -n 20 target/container/debootstrap.log >&2; $sudo rm -rf "$rootfs"; fail "debootstrap failed (log: target/container/debootstrap.log)"; }
        $sudo tar -C "$rootfs" -c --exclude='./var/cache/apt/*' \
            --exclude='./var/lib/apt/lists/*' . >"$tarball.part"
        $sudo rm -rf "$rootfs"
        mv "$tarball.part" "$tarball"
    fi
    step "podman import $tarball $base"
    podman import "$tarball" "$base" >/dev/null
fi

image=localhost/beebot-server:check
old=$(podman image inspect --format '{{.Id}}' "$image" 2>/dev/null || true)
step "podman build -f deploy/Containerfile --build-arg BASE=$base -t $image ."
podman build -f deploy/Containerfile --build-arg BASE="$base" -t "$image" .
new=$(podman image inspect --format '{{.Id}}' "$image")
if [ -n "$old" ] && [ "$old" != "$new" ]; then
    podman rmi "$old" >/dev/null 2>&1 || true
fi

ctr=beebot-check-$$
vol=beebot-check-$$
cleanup() {
    podman rm -f -t 0 "$ctr" >/dev/null 2>&1 || true
    podman volume rm -f "$vol" >/dev/null 2>&1 || true
}
trap cleanup EXIT

step "the image: user, binary, version"
said=$(podman run --rm "$image" --version) || fail "the image's binary does not run"
[ "$said" = "beebot-server $version" ] || fail "the image's binary says '$said'"
who=$(podman run --rm --entrypoint /usr/bin/id "$image" -un)
[ "$who" = beebot-server ] || fail "the image runs as '$who', want beebot-server"
podman run --rm --entrypoint /bin/sh "$image" -c 'test -f /usr/share/doc/beebot-server/server.example.toml' \
    || fail "the image has no example config"

step "init on volume $vol"
podman volume create "$vol" >/dev/null
contact=https://grid.example.edu/crawler
podman run --rm -v "$vol:/var/lib/beebot-server" "$image" init \
    --public-addr grid.example.edu:4433 --contact "$contact" \
    || fail "init failed in the container"

step "serve, detached, 4433/udp and 4481/tcp published on 127.0.0.1"
podman run -d --name "$ctr" -v "$vol:/var/lib/beebot-server" \
    -p 127.0.0.1::4433/udp -p 127.0.0.1::4481/tcp "$image" >/dev/null
about_port=$(podman port "$ctr" 4481/tcp | sed 's/.*://' | head -n 1)
[ -n "$about_port" ] || fail "4481/tcp is not published"
podman port "$ctr" 4433/udp | grep -q . || fail "4433/udp is not published"
url=http://127.0.0.1:$about_port/about
logs() { podman logs "$ctr" 2>&1 | tail -n 30 >&2; }
page=""
for _ in $(seq 1 100); do
    page=$(curl -fsS --max-time 2 "$url" 2>/dev/null) && break
    [ "$(podman inspect --format '{{.State.Running}}' "$ctr")" = true ] \
        || { logs; fail "the server stopped"; }
    sleep 0.2
done
[ -n "$page" ] || { logs; fail "no about page at $url (the container's 4481/tcp) within 20 s"; }
grep -qF "$contact" <<<"$page" || fail "the about page at $url does not name the contact $contact"
echo "ok: $url answers ($(wc -c <<<"$page") bytes, names $contact)"

step "admin commands inside the container (admin API on its loopback)"
status=$(podman exec "$ctr" beebot-server status) || { logs; fail "'exec beebot-server status' failed"; }
echo "$status" | head -n 5
invite=$(podman exec "$ctr" beebot-server invite --uses 1 | tail -n 1) \
    || { logs; fail "'exec beebot-server invite' failed"; }
[ -n "$invite" ] || fail "invite printed no code"
echo "ok: status and invite work (invite ${invite:0:12}...)"

step "stop (SIGTERM, 20 s grace)"
podman stop -t 20 "$ctr" >/dev/null
code=$(podman inspect --format '{{.State.ExitCode}}' "$ctr")
[ "$code" = 0 ] || { logs; fail "serve exited with $code on SIGTERM, want 0"; }
echo "ok: serve stopped on SIGTERM with exit code 0"

now=$(date +%s)
echo "   ($((now - t_step)) s)"
echo "ok: $image ($said) builds from $base and serves; $((now - t0)) s in all"
