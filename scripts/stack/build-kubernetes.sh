#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kubectl at version V
# (e.g. 1.37.2) from the Go module proxy and prints the folder they are cached in.
#
# `go install k8s.io/kubernetes/cmd/kubelet@vV` is refused: k8s.io/kubernetes' go.mod replaces each
# staging module (k8s.io/api, ...) with ./staging/... . A wrapper module requires it and replaces
# each staging module with its v0.X.Y release instead. Without the -X version flags the binaries say
# v0.0.0 and the kubelet's version skew checks fail.
#
# Go: the one first on PATH (/usr/local/go, 1.26 on these machines; Debian's 1.19 is too old for
# 1.34+), never a downloaded toolchain (GOTOOLCHAIN=local).
# Cache: $RCM_CACHE_DIR/kubernetes-V (default ~/.cache/rcm); Go's caches under ~/.cache/go-*.
set -euo pipefail
V=${1:?version, e.g. 1.37.2}
CACHE_DIR="${RCM_CACHE_DIR:-$HOME/.cache/rcm}"
out="$CACHE_DIR/kubernetes-$V"
bins=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl)
ok=1; for b in "${bins[@]}"; do [[ -x $out/$b ]] || ok=""; done
if [[ -n $ok ]]; then echo "$out"; exit 0; fi
export GOTOOLCHAIN=local GOFLAGS=-mod=mod
export GOMODCACHE="${GOMODCACHE:-$HOME/.cache/go-mod}" GOCACHE="${GOCACHE:-$HOME/.cache/go-build}"
echo "[build-kubernetes] $V with $(command -v go) ($(go version))" >&2
minor=${V#1.}; minor=${minor%%.*}; staging=0.${V#1.}
work=$(mktemp -d "${TMPDIR:-/tmp}/rcm-k8s-$V.XXXXXX"); cd "$work"
go mod init local/k8sbuild >/dev/null 2>&1
gomod=$(go mod download -json "k8s.io/kubernetes@v$V" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
godebug=$(sed -n 's/^godebug default=\(.*\)$/\1/p; s/^\s*default=\(go[0-9.]*\)$/\1/p' "$gomod" | head -1)
[[ -n $godebug ]] && go mod edit -godebug=default="$godebug"
for m in $(sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => \./staging/.*#\1#p' "$gomod"); do go mod edit -replace="$m=$m@v$staging"; done
pkgs=(); for b in "${bins[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$b"); done
t=$(date +%s)
# tool directives keep the requirements although nothing imports a main package
for p in "${pkgs[@]}"; do go get -tool "$p@v$V" >>"$work/get.log" 2>&1 || { tail -30 "$work/get.log" >&2; exit 1; }; done
ld=""; for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ld="$ld -X $p.gitVersion=v$V -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"; done
rm -rf "$out.tmp"; mkdir -p "$out.tmp"
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w $ld" -o "$out.tmp/" "${pkgs[@]}" >&2
rm -rf "$out" && mv "$out.tmp" "$out"
echo "[build-kubernetes] built ${bins[*]} v$V in $(( $(date +%s) - t ))s" >&2
cd / && rm -rf "$work"
echo "$out"
