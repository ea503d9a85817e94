#!/usr/bin/env bash
# The jsii targets, as far as Debian 12's toolchains build them offline (CI reaches only npm
# and the Debian archive). Run after `npx projen compile` (it reads .jsii).
#
#  - all four targets: the code (jsii-pacmak --code-only), which catches an API that a
#    language cannot express;
#  - Python: the sdist and the wheel, with Debian's python3-build and setuptools (no build
#    isolation: jsii-pacmak's own Python build pins newer setuptools, build and twine from PyPI);
#  - Go: gofmt parses the generated module (compiling it needs the jsii runtime, cdk8s and
#    constructs Go modules from the Go module proxy);
#  - Java and .NET: code only. Maven needs the jsii runtime, cdk8s and constructs jars and its
#    plugins from Maven Central; Debian 12 packages no .NET SDK, and the packages come from
#    nuget.org. The release workflow builds all four, with network access.
#
# Usage: scripts/jsii-targets.sh [OUTDIR]      (default dist/jsii-offline)
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-dist/jsii-offline}"
rm -rf "$out"
log() { printf '[jsii-targets] %s\n' "$*" >&2; }

npx jsii-pacmak --code-only --outdir "$out/code" --target python --target java --target dotnet --target go
for lang in python java dotnet go; do
  n=$(find "$out/code/$lang" -type f | wc -l)
  [ "$n" -gt 0 ] || { log "no $lang code generated"; exit 1; }
  log "$lang: $n files generated"
done

# Debian's interpreter and build tools, whatever python3 comes first on PATH.
/usr/bin/python3 -m build --no-isolation --skip-dependency-check --outdir "$out/python" "$out/code/python" >&2
ls "$out/python"/*.whl "$out/python"/*.tar.gz >/dev/null
log "python: $(cd "$out/python" && ls)"

# gofmt parses every file (exit status 2 on a syntax error); pacmak formats only when it builds.
gofmt -e -l "$out/code/go" >/dev/null
log "go: $(find "$out/code/go" -name '*.go' | wc -l) files parse (not compiled: no module proxy)"
log "java, dotnet: code generated, not compiled (Maven Central, nuget.org and a .NET SDK are out of reach)"
