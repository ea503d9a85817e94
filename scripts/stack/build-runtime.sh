#!/usr/bin/env bash
# Builds the node and control-plane parts beside Kubernetes from the Go module proxy and prints
# the folder they are cached in: etcd and etcdctl, containerd v2 with ctr and the runc shim, runc
# (cgo, libseccomp), crictl and the CNI plugins the test nodes use (loopback, bridge, host-local).
# Versions by env: ETCD (3.6.14), CONTAINERD (2.4.2), RUNC (1.4.3), CRICTL (1.37.0), CNI (1.10.0).
#
# Go: the one first on PATH (1.26 here), never a downloaded toolchain (GOTOOLCHAIN=local).
# Cache: $RCM_CACHE_DIR/stack-runtime-<versions> (default ~/.cache/rcm); Go's caches under ~/.cache/go-*.
set -euo pipefail
ETCD=${ETCD:-3.6.14} CONTAINERD=${CONTAINERD:-2.4.2} RUNC=${RUNC:-1.4.3} CRICTL=${CRICTL:-1.37.0} CNI=${CNI:-1.10.0}
CACHE_DIR="${RCM_CACHE_DIR:-$HOME/.cache/rcm}"
out="$CACHE_DIR/stack-runtime-c$CONTAINERD-e$ETCD-r$RUNC-k$CRICTL-n$CNI"
done_all=1
for b in etcd etcdctl containerd ctr containerd-shim-runc-v2 runc crictl loopback bridge host-local; do [[ -x $out/$b ]] || done_all=""; done
if [[ -n $done_all ]]; then echo "$out"; exit 0; fi
export GOTOOLCHAIN=local GOFLAGS=-mod=mod
export GOMODCACHE="${GOMODCACHE:-$HOME/.cache/go-mod}" GOCACHE="${GOCACHE:-$HOME/.cache/go-build}" GOBIN="$out.tmp"
echo "[build-runtime] with $(command -v go) ($(go version))" >&2
rm -rf "$out.tmp"; mkdir -p "$out.tmp"
step() { local t; t=$(date +%s); "$@" >&2; echo "[build-runtime]   $(( $(date +%s) - t ))s: ${*: -1}" >&2; }
# etcd: server/go.mod replaces its sibling modules, so `go install` refuses it; a wrapper module builds it.
w=$(mktemp -d "${TMPDIR:-/tmp}/rcm-etcd.XXXXXX")
( cd "$w" && go mod init local/etcd >/dev/null 2>&1 \
  && { go get -tool "go.etcd.io/etcd/server/v3@v$ETCD" "go.etcd.io/etcd/etcdctl/v3@v$ETCD" >get.log 2>&1 || { tail -30 get.log >&2; false; }; } \
  && step env CGO_ENABLED=0 go build -trimpath -o "$out.tmp/etcd" go.etcd.io/etcd/server/v3 \
  && step env CGO_ENABLED=0 go build -trimpath -o "$out.tmp/etcdctl" go.etcd.io/etcd/etcdctl/v3 )
rm -rf "$w"
P=github.com/containerd/containerd/v2
LD="-X $P/version.Version=v$CONTAINERD -X $P/version.Package=$P"
step env CGO_ENABLED=0 go install -tags urfave_cli_no_docs -ldflags "$LD" "$P/cmd/containerd@v$CONTAINERD" "$P/cmd/ctr@v$CONTAINERD"
step env CGO_ENABLED=0 go install -tags "urfave_cli_no_docs no_grpc" -ldflags "$LD" "$P/cmd/containerd-shim-runc-v2@v$CONTAINERD"
step env CGO_ENABLED=1 go install -tags "seccomp urfave_cli_no_docs" "github.com/opencontainers/runc@v$RUNC"
step env CGO_ENABLED=0 go install "sigs.k8s.io/cri-tools/cmd/crictl@v$CRICTL"
step env CGO_ENABLED=0 go install "github.com/containernetworking/plugins/plugins/main/bridge@v$CNI" \
  "github.com/containernetworking/plugins/plugins/main/loopback@v$CNI" "github.com/containernetworking/plugins/plugins/ipam/host-local@v$CNI"
rm -rf "$out" && mv "$out.tmp" "$out"
echo "$out"
