#!/usr/bin/env bash
# Builds kube-apiserver and kube-scheduler v1.20.2 from Debian bookworm's source package `kubernetes`
# (1.20.5+really1.20.2-1.1+deb12u1: the full upstream tree with vendor/) for the live Kubernetes tests
# (tests/k8s_fixtures.py, marker `k8s`; docs/live-kubernetes.md "Tests against a real control plane").
#
#   sudo tools/build_k8s_control_plane.sh        # about 6 min on 2 cores the first time; instant afterwards
#
# Needs root (it adds a deb-src line and installs golang-go, rsync, etcd-server, dpkg-dev and
# golang-github-modern-go-reflect2-dev). Builds once into ${WATTSCHED_K8S_CACHE:-/var/cache/wattsched/k8s-1.20.2}
# (binaries in bin/, Go build cache in go-build/, about 1.3 GB; build.log beside them) and reuses the binaries
# when they are there. Prints one line; exits non-zero when it could not build.
set -uo pipefail

VERSION=1.20.5+really1.20.2-1.1+deb12u1
GIT_VERSION=v1.20.2
CACHE="${WATTSCHED_K8S_CACHE:-/var/cache/wattsched/k8s-1.20.2}"
BIN="$CACHE/bin"
SOURCES=/etc/apt/sources.list.d/wattsched-k8s-src.list
PKGS=(golang-go rsync etcd-server golang-github-modern-go-reflect2-dev dpkg-dev)
REFLECT2=/usr/share/gocode/src/github.com/modern-go/reflect2
me="build_k8s_control_plane"

built() { [ -x "$BIN/kube-apiserver" ] && [ -x "$BIN/kube-scheduler" ]; }
fail() {
  echo "$me: $1; live Kubernetes tests will skip (log: $CACHE/build.log)"
  exit 1
}

if built; then
  echo "$me: kube-apiserver and kube-scheduler $GIT_VERSION already built in $BIN; nothing to build"
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null || ! command -v dpkg-query >/dev/null; then
  echo "$me: not built (needs root and apt-get); live Kubernetes tests will skip"
  exit 1
fi
mkdir -p "$CACHE" || fail "cannot create $CACHE"
exec 9>"$CACHE/.lock"
flock 9 # one build at a time; a second caller waits, then finds the binaries
if built; then
  echo "$me: kube-apiserver and kube-scheduler $GIT_VERSION already built in $BIN; nothing to build"
  exit 0
fi
log="$CACHE/build.log"
: >"$log"
start=$(date +%s)

# 1. Packages (Go 1.19, etcd 3.4, reflect2 1.0.2 source) and the deb-src line for `apt-get source`.
missing=()
for pkg in "${PKGS[@]}"; do
  status="$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)"
  if [[ "$status" != *"ok installed"* ]]; then missing+=("$pkg"); fi
done
# apt refuses two entries for one suite with different Signed-By: use the keyring the system's own Debian entries
# name (bookworm images' debian.sources do), or none when they name none (a classic sources.list).
keyring=/usr/share/keyrings/debian-archive-keyring.gpg opts=""
if grep -qsi "signed-by.*$keyring" /etc/apt/sources.list /etc/apt/sources.list.d/*.sources \
  /etc/apt/sources.list.d/*.list 2>/dev/null; then opts="[signed-by=$keyring] "; fi
cat >"$SOURCES" <<EOF
# Written by wattsched's tools/build_k8s_control_plane.sh (apt-get source kubernetes, live Kubernetes tests).
deb-src ${opts}http://deb.debian.org/debian bookworm main
deb-src ${opts}http://deb.debian.org/debian bookworm-updates main
deb-src ${opts}http://deb.debian.org/debian-security bookworm-security main
EOF
# Keep etcd-server's system service from starting on install (the tests start their own etcd).
policy=/usr/sbin/policy-rc.d
if [ "${#missing[@]}" -gt 0 ] && [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy"
  trap 'rm -f /usr/sbin/policy-rc.d' EXIT
fi
{
  apt-get update &&
    if [ "${#missing[@]}" -gt 0 ]; then
      DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
    fi
} >>"$log" 2>&1 || fail "apt-get could not install ${missing[*]:-nothing} ($(tail -n 1 "$log"))"

# 2. The source package, unpacked in $CACHE/src (removed after the build; the binaries stay).
rm -rf "$CACHE/src" && mkdir -p "$CACHE/src" || fail "cannot create $CACHE/src"
(cd "$CACHE/src" && apt-get source "kubernetes=$VERSION") >>"$log" 2>&1 ||
  fail "apt-get source kubernetes=$VERSION failed ($(tail -n 1 "$log"))"
tree="$(find "$CACHE/src" -mindepth 1 -maxdepth 1 -type d -name 'kubernetes-*' | head -n 1)"
[ -n "$tree" ] && [ -d "$tree/vendor" ] && [ -d "$tree/cmd/kube-apiserver" ] ||
  fail "unexpected source tree in $CACHE/src"

# 3. The vendored reflect2 v1.0.1 crashes kube-apiserver on its first JSON reply under Go >= 1.18
#    (unsafe map iteration); Debian's 1.0.2 source is API-compatible.
[ -d "$REFLECT2" ] || fail "$REFLECT2 missing"
rsync -a --delete --exclude '*_test.go' --exclude '.git*' "$REFLECT2/" "$tree/vendor/github.com/modern-go/reflect2/" \
  >>"$log" 2>&1 || fail "could not replace vendor/github.com/modern-go/reflect2"

# 4. Build with upstream's `make WHAT=...`, as Debian's rules do for kubectl: GOPATH mode (hack/lib/init.sh sets
#    GO111MODULE=off, vendor/ supplies every import, its k8s.io/* entries link to staging/), and the generated
#    files the tarball lacks (pkg/generated/openapi/zz_generated.openapi.go) made first by the code generators.
#    A plain `go build -mod=vendor ./cmd/kube-apiserver` stops twice under Go 1.19: "updates to go.mod needed,
#    disabled by -mod=vendor" (1.20's go.mod says go 1.15), then "undefined: openapi.GetOpenAPIDefinitions".
#    hack/lib/golang.sh puts GOCACHE at _output/local/go/cache: linked to $CACHE/go-build, which outlives the tree.
#    Static, -s -w, the version stamped by hack/lib/version.sh from KUBE_GIT_* (the tarball has no .git).
out="$tree/_output"
mkdir -p "$out/local/go" "$CACHE/go-build" && rm -rf "$out/local/go/cache" &&
  ln -s "$CACHE/go-build" "$out/local/go/cache" || fail "cannot link the Go build cache"
(
  cd "$tree" &&
    env -u GOFLAGS -u GOPATH -u GO111MODULE HOME="$CACHE" CGO_ENABLED=0 GOPROXY=off \
      KUBE_GIT_VERSION="$GIT_VERSION" KUBE_GIT_COMMIT=faecb196815e248d3ecfb03c680a4507229c2a56 \
      KUBE_GIT_TREE_STATE=clean KUBE_BUILD_PLATFORMS=linux/amd64 \
      make WHAT="cmd/kube-apiserver cmd/kube-scheduler"
) >>"$log" 2>&1 || fail "make WHAT=cmd/kube-apiserver failed ($(tail -n 1 "$log"))"
rm -rf "$BIN.tmp" && mkdir -p "$BIN.tmp" &&
  cp "$out/bin/kube-apiserver" "$out/bin/kube-scheduler" "$BIN.tmp/" || fail "no binaries in $out/bin"
"$BIN.tmp/kube-apiserver" --version >>"$log" 2>&1 || fail "the built kube-apiserver does not run"
rm -rf "$BIN" && mv "$BIN.tmp" "$BIN" || fail "cannot move the binaries to $BIN"
rm -rf "$CACHE/src"
echo "$me: built kube-apiserver and kube-scheduler $GIT_VERSION in $BIN in $(($(date +%s) - start)) s"
exit 0
