#!/usr/bin/env bash
# Builds CRI-O (crio) at version V (default 1.34.0) from the Go module proxy and caches Debian
# bookworm's conmon beside it, then prints the folder: $RCM_CACHE_DIR/crio-V (default ~/.cache/rcm).
# Idempotent: a second run only checks.
#
# `go install github.com/cri-o/cri-o/cmd/crio@vV` fails: the proxy refuses CRI-O's version list,
# which `go install` asks for to look up deprecations (v1.34.0 itself is served when asked by
# version). A wrapper module builds it, started from CRI-O's own go.sum: two of its requirements
# are unknown to the checksum database. cgo and libseccomp (Debian's libseccomp-dev, pkg-config,
# gcc) for the seccomp tag; the other tags leave out what needs C libraries the machine lacks
# (gpgme, btrfs, devicemapper). About 10 minutes on 2 cores.
#
# conmon (CRI-O's container monitor, C): Debian bookworm's conmon and the library it needs that a
# minimal bookworm root lacks (libglib2.0-0), fetched with `apt-get download` and unpacked with
# `dpkg -x` into the cache folder (usr/bin/conmon, usr/lib/x86_64-linux-gnu/libglib-2.0.so.0*),
# never installed on this machine. pinns (CRI-O's namespace pinning helper, C) is not built here:
# the test nodes use a shell stand-in (test/support/crio-node.ts says why).
#
# Go: the one first on PATH (/usr/local/go, 1.26 on these machines), never a downloaded toolchain
# (GOTOOLCHAIN=local). Go's caches under ~/.cache/go-*.
set -euo pipefail
V=${1:-1.34.0}
CACHE_DIR="${RCM_CACHE_DIR:-$HOME/.cache/rcm}"
out="$CACHE_DIR/crio-$V"
CONMON_DEBS=(conmon libglib2.0-0)
if [[ -x $out/crio && -x $out/usr/bin/conmon ]]; then echo "$out"; exit 0; fi
export GOTOOLCHAIN=local GOFLAGS=-mod=mod
export GOMODCACHE="${GOMODCACHE:-$HOME/.cache/go-mod}" GOCACHE="${GOCACHE:-$HOME/.cache/go-build}"
rm -rf "$out.tmp"; mkdir -p "$out.tmp"
if [[ -x $out/crio ]]; then
  cp -a "$out/crio" "$out.tmp/crio"
else
  echo "[build-crio] $V with $(command -v go) ($(go version))" >&2
  work=$(mktemp -d "${TMPDIR:-/tmp}/rcm-crio-$V.XXXXXX"); cd "$work"
  go mod init local/criobuild >/dev/null 2>&1
  dir=$(go mod download -json "github.com/cri-o/cri-o@v$V" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
  cp "$dir/go.sum" go.sum && chmod u+w go.sum
  t=$(date +%s)
  # the tool directive keeps the requirements although nothing imports a main package
  go get -tool "github.com/cri-o/cri-o/cmd/crio@v$V" >"$work/get.log" 2>&1 || { tail -30 "$work/get.log" >&2; exit 1; }
  CGO_ENABLED=1 go build -trimpath \
    -tags "containers_image_openpgp exclude_graphdriver_btrfs exclude_graphdriver_devicemapper seccomp" \
    -o "$out.tmp/crio" github.com/cri-o/cri-o/cmd/crio >&2
  echo "[build-crio] built crio v$V in $(( $(date +%s) - t ))s" >&2
  cd / && rm -rf "$work"
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/rcm-conmon.XXXXXX")
(cd "$work" && apt-get download "${CONMON_DEBS[@]}" >"$work/download.log" 2>&1) || { tail -20 "$work/download.log" >&2; exit 1; }
for deb in "$work"/*.deb; do dpkg -x "$deb" "$out.tmp"; done
rm -rf "$work"
rm -rf "$out" && mv "$out.tmp" "$out"
echo "[build-crio] crio v$V and conmon $(ls "$out"/usr/share/doc/conmon/changelog.Debian.gz >/dev/null 2>&1 && zcat "$out"/usr/share/doc/conmon/changelog.Debian.gz | sed -n '1s/.*(\(.*\)).*/\1/p') cached in $out" >&2
echo "$out"
