#!/usr/bin/env bash
# Builds runwasi's wasmtime containerd shim, containerd-shim-wasmtime-v1 (runtime type
# io.containerd.wasmtime.v1), from crates.io alone: the crate in test/fixtures/wasm-shim (see its
# README.md), `cargo build --release --locked` with the machine's cargo. Prints the folder the
# binary is cached in on stdout, last; progress goes to stderr.
#
# Needs: cargo/rustc (the first on PATH, else ~/.cargo/bin), protoc (Debian's protobuf-compiler:
# containerd's gRPC bindings are generated at build time), libseccomp's development files and gcc.
# A cold build takes 10 to 20 minutes on 2 cores.
#
# Cache: $RCM_CACHE_DIR/wasm-shim-<key>/containerd-shim-wasmtime-v1 (default ~/.cache/rcm), key =
# the first 16 hex digits of the sha256 over the crate's Cargo.lock, Cargo.toml and src/; cargo's
# target folder is $RCM_CACHE_DIR/cargo-target-wasm-shim, kept for incremental rebuilds.
#
# Usage: scripts/stack/build-wasm-shim.sh [--cached-only]
#   --cached-only  print the folder if the binary is cached, else exit 3 (never builds)
set -euo pipefail
CACHE_DIR="${RCM_CACHE_DIR:-$HOME/.cache/rcm}"
CRATE="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../test/fixtures/wasm-shim" && pwd)"
BIN=containerd-shim-wasmtime-v1
log() { echo "[build-wasm-shim] $*" >&2; }
die() { log "error: $*"; exit 1; }

cached_only=""
case "${1:-}" in
  "") ;;
  --cached-only) cached_only=1 ;;
  *) die "unknown argument: $1 (usage: $0 [--cached-only])" ;;
esac

key=$(cd "$CRATE" && find Cargo.lock Cargo.toml src -type f -print0 | LC_ALL=C sort -z \
  | xargs -0 sha256sum | sha256sum | cut -c1-16)
out="$CACHE_DIR/wasm-shim-$key"
if [[ -x $out/$BIN ]]; then
  log "cached: $out/$BIN"
  echo "$out"; exit 0
fi
if [[ -n $cached_only ]]; then
  log "not built yet: $out/$BIN (run scripts/provision.sh, or scripts/stack/build-wasm-shim.sh)"
  exit 3
fi

command -v cargo >/dev/null || PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
command -v cargo >/dev/null || die "cargo not found (on PATH nor in ${CARGO_HOME:-$HOME/.cargo}/bin)"
[[ -n ${PROTOC:-} ]] || command -v protoc >/dev/null \
  || die "protoc not found: containerd-client generates its gRPC bindings with it (apt-get install protobuf-compiler)"
pkg-config --exists libseccomp 2>/dev/null || [[ -e /usr/lib/x86_64-linux-gnu/libseccomp.so ]] \
  || die "libseccomp's development files not found (apt-get install libseccomp-dev pkg-config)"

target="$CACHE_DIR/cargo-target-wasm-shim"
mkdir -p "$target"
buildlog="$target/build-wasm-shim.log"
log "building $BIN from $CRATE with $(command -v cargo) ($(cargo --version)), log: $buildlog"
t=$(date +%s)
CARGO_TARGET_DIR="$target" cargo build --release --locked --manifest-path "$CRATE/Cargo.toml" >"$buildlog" 2>&1 \
  || { tail -40 "$buildlog" >&2; die "cargo build failed after $(( $(date +%s) - t ))s (full log: $buildlog)"; }
log "  $(( $(date +%s) - t ))s: cargo build --release --locked"

rm -rf "$out.tmp"; mkdir -p "$out.tmp"
cp "$target/release/$BIN" "$out.tmp/$BIN"
"$out.tmp/$BIN" -v >/dev/null || die "the built $BIN does not run (-v)"
log "  $("$out.tmp/$BIN" -v | sed -n 's/^ *Version: //p'), $(du -h "$out.tmp/$BIN" | cut -f1)"
rm -rf "$out" && mv "$out.tmp" "$out"
echo "$out"
