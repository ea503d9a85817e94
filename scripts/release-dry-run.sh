#!/usr/bin/env bash
# Release dry run: what projen's release job does before publishing, offline (the npm registry
# and the Debian archive only), so that the first real release is one command away.
#
#  1. `npx projen bump`: the version from the commits since the latest release tag
#     (commit-and-tag-version; feat: minor, fix: patch, anything else patch; 0.x until a major
#     is chosen). With no release tag yet, the first release is the version in package.json,
#     0.0.0 (projen's rule), whatever the commits say.
#  2. Built with that version, as the release builds them: the library (jsii), its bundles
#     (the programs' RCM_VERSION), the npm tarball (`npx projen package:js`), the Python wheel
#     (jsii-pacmak's code, built with Debian's python3-build as scripts/jsii-targets.sh does:
#     `npx projen package:python` builds in a venv from PyPI), and the two images as OCI
#     tarballs (`npx projen images`: the Dockerfile's contents without a Docker engine; the
#     release builds images/Dockerfile with buildx).
#  3. Checked (scripts/release-dry-run-check.ts): every artifact carries the version; the npm
#     tarball installs into a fresh cdk8s app that synthesizes; the images run their programs
#     and the installer's --help prints the version.
#  4. `npx projen unbump`, then the library is compiled again at the unbumped version, and the
#     tracked files must be as they were before (as projen's release task checks with git diff).
#
# Needs root (a containerd runs the images) and `npx projen compile` having run once.
# Usage: scripts/release-dry-run.sh       Output: dist/release-dry-run/
set -euo pipefail
cd "$(dirname "$0")/.."
log() { printf '[release-dry-run] %s\n' "$*" >&2; }
out=dist/release-dry-run
start=$(date +%s)

before=$(git status --porcelain=v1 --untracked-files=no; git diff)
restore() {
  local status=$?
  log "unbump"
  npx projen unbump >/dev/null
  rm -f dist/version.txt dist/releasetag.txt dist/changelog.md
  # lib/ and .jsii as the rest of CI expects them (the unbumped version).
  npx projen compile >/dev/null && npx projen post-compile >/dev/null || status=1
  if [ "$(git status --porcelain=v1 --untracked-files=no; git diff)" != "$before" ]; then
    log "FAILED: the dry run left tracked files changed:"
    git status --short --untracked-files=no >&2
    status=1
  fi
  log "took $(( $(date +%s) - start ))s"
  exit "$status"
}
trap restore EXIT

rm -rf "$out" dist/js dist/python
mkdir -p "$out"
npx projen bump
version=$(cat dist/version.txt)
log "bumped to $version (tag $(cat dist/releasetag.txt)); changelog:"
sed 's/^/    /' dist/changelog.md >&2
[ "$(node -p 'require("./package.json").version')" = "$version" ] || { log "package.json does not carry $version"; exit 1; }

# The release's build, at the bumped version (its tests ran before this script in CI).
npx projen compile
npx projen post-compile
npx projen package:js
tgz=$(ls dist/js/*.tgz)
log "npm: $tgz"

npx jsii-pacmak --code-only --outdir "$out/pacmak" --target python
/usr/bin/python3 -m build --no-isolation --skip-dependency-check --wheel --outdir "$out/python" "$out/pacmak/python" >/dev/null
whl=$(ls "$out"/python/*.whl)
log "python: $whl"

npx ts-node --transpile-only -P tsconfig.json test/support/product-images.ts "$out/images" >&2

npx ts-node --transpile-only -P tsconfig.json scripts/release-dry-run-check.ts "$version" "$tgz" "$whl" "$out/images"
