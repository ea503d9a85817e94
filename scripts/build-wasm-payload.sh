#!/usr/bin/env bash
# Builds a Wasm runtime payload for a Shim from Debian's archive alone: Debian trixie's crun,
# which is built with its WasmEdge handler, and libwasmedge0, with their library closure, as a
# folder that runs on older glibc hosts too (Debian 12 has 2.36; trixie's crun needs 2.38):
#
#   bin/crun       a wrapper running bin/crun.real through lib/'s own loader on lib/ alone:
#                  what the handler's BinaryName names (${PAYLOAD}/bin/crun)
#   bin/crun.real  trixie's crun
#   lib/           the closure of crun and libwasmedge.so.0 as trixie's loader resolves it,
#                  trixie's ld-linux-x86-64.so.2 and libc included: each library's real file
#                  and, where the package ships one, its soname as a relative link to it
#   PACKAGES       the Debian packages and versions it was made of
#
# With TARBALL, also writes the payload as a .tar.gz (links kept as links) with containerd's
# runc shim added as bin/containerd-shim-runc-v2 (the payload's shim: it drives bin/crun), and
# prints its sha256 for the Shim's `sha256`.
#
# The packages come from trixie's package lists in a private apt folder (the machine's own
# apt sources are untouched), with `apt-get download` and `dpkg -x`; nothing is installed.
# Needs apt and Debian's archive keyring (any Debian or Ubuntu machine); root is not needed.
# amd64 only (the loader's name is x86-64's).
#
# Usage: scripts/build-wasm-payload.sh DEST_DIR [TARBALL]
# Env:   DEBIAN_MIRROR  the Debian archive (default http://deb.debian.org/debian)
#        RUNC_SHIM      the runc shim for TARBALL (default /usr/bin/containerd-shim-runc-v2)
set -euo pipefail

SUITE=trixie
ROOTS=(crun libwasmedge0)
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
RUNC_SHIM="${RUNC_SHIM:-/usr/bin/containerd-shim-runc-v2}"
log() { printf '[build-wasm-payload] %s\n' "$*" >&2; }

[ $# -ge 1 ] && [ $# -le 2 ] || { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
dest="$1"
tarball="${2:-}"
if [ -n "$tarball" ] && [ ! -x "$RUNC_SHIM" ]; then
  log "ERROR: no runc shim at $RUNC_SHIM (set RUNC_SHIM)"
  exit 2
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/rcm-wasm-payload.XXXXXX")"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/archives/partial" "$work/debs" "$work/tree"
printf 'deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] %s %s main\n' "$MIRROR" "$SUITE" > "$work/sources.list"
opts=(-o "Dir::Etc::sourcelist=$work/sources.list" -o "Dir::Etc::sourceparts=-" -o "Dir::State::Lists=$work/lists"
  -o "Dir::State::status=/dev/null" -o "Dir::Cache::Archives=$work/archives" -o "Dir::Cache::pkgcache=" -o "Dir::Cache::srcpkgcache="
  -o "APT::Get::List-Cleanup=0" -o "Debug::NoLocking=1" -o "APT::Sandbox::User=$(id -un)")

log "reading Debian $SUITE's package lists from $MIRROR"
apt-get "${opts[@]}" update -qq >/dev/null
# Every package crun and libwasmedge0 depend on, recursively (virtual names, in <>, are
# provided by a real package of the list); only the libraries the loader needs are kept.
packages=$(apt-cache "${opts[@]}" depends --recurse --no-recommends --no-suggests --no-conflicts \
  --no-breaks --no-replaces --no-enhances "${ROOTS[@]}" | grep -v -e '^ ' -e '^<' | sort -u)
log "downloading $(wc -w <<<"$packages") packages"
# shellcheck disable=SC2086
(cd "$work/debs" && apt-get "${opts[@]}" download $packages >/dev/null 2>&1)
for deb in "$work"/debs/*.deb; do
  dpkg -x "$deb" "$work/tree"
  dpkg-deb --show --showformat='${Package} ${Version}\n' "$deb" >> "$work/versions"
done

libs="$work/tree/usr/lib/x86_64-linux-gnu"
loader="$libs/ld-linux-x86-64.so.2"
closure=$({ "$loader" --list --library-path "$libs" "$work/tree/usr/bin/crun"
  "$loader" --list --library-path "$libs" "$libs/libwasmedge.so.0"; } \
  | awk '/not found/ { print "MISSING " $1; next } $2 == "=>" { print $3; next } $1 ~ /^\// { print $1 }' | sort -u)
if grep -q '^MISSING' <<<"$closure"; then
  log "ERROR: libraries missing from the $SUITE packages: $(grep '^MISSING' <<<"$closure" | tr '\n' ' ')"
  exit 1
fi

rm -rf "$dest" && mkdir -p "$dest/bin" "$dest/lib"
cp "$work/tree/usr/bin/crun" "$dest/bin/crun.real"
for lib in $closure "$libs/libwasmedge.so.0"; do
  # /lib64/ld-linux-x86-64.so.2 is the name in crun's header; trixie's own loader is what runs it.
  [ "$(basename "$lib")" = ld-linux-x86-64.so.2 ] && lib="$loader"
  soname="$(basename "$lib")"
  real="$(readlink -f "$lib")"
  cp "$real" "$dest/lib/$(basename "$real")"
  [ "$(basename "$real")" = "$soname" ] || ln -sfn "$(basename "$real")" "$dest/lib/$soname"
done
cat > "$dest/bin/crun" <<'WRAPPER'
#!/bin/sh
# Debian trixie's crun (with WasmEdge) through trixie's own loader and libraries, from this payload.
d="$(dirname "$(dirname "$0")")"
exec "$d/lib/ld-linux-x86-64.so.2" --library-path "$d/lib" "$d/bin/crun.real" "$@"
WRAPPER
chmod 755 "$dest/bin/crun" "$dest/bin/crun.real"
sort "$work/versions" > "$dest/PACKAGES"

# The folder must be whole by itself: WasmEdge's closure resolves inside lib/ alone, and the
# wrapper's crun has the WasmEdge handler.
if "$dest/lib/ld-linux-x86-64.so.2" --list --library-path "$dest/lib" "$dest/lib/libwasmedge.so.0" | grep -q 'not found'; then
  log "ERROR: the assembled lib/ folder misses libraries of libwasmedge.so.0"
  exit 1
fi
"$dest/bin/crun" --version | grep -q '+WASM:wasmedge' || { log "ERROR: $dest/bin/crun has no WasmEdge handler"; exit 1; }
log "$dest: $(du -sh "$dest" | cut -f1), $(find "$dest/lib" -type f | wc -l) libraries and $(find "$dest/lib" -type l | wc -l) links; $("$dest/bin/crun" --version | head -1)"

if [ -n "$tarball" ]; then
  cp -a "$dest" "$work/payload"
  cp "$RUNC_SHIM" "$work/payload/bin/containerd-shim-runc-v2"
  chmod 755 "$work/payload/bin/containerd-shim-runc-v2"
  tar -C "$work/payload" --owner=0 --group=0 --numeric-owner -czf "$tarball" PACKAGES bin lib
  log "$tarball: $(du -h "$tarball" | cut -f1)"
  sha256sum "$tarball" | cut -d' ' -f1
fi
