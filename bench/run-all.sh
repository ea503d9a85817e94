#!/usr/bin/env bash
# Runs every benchmark; each prints its figures beside a baseline measured in the same run.
set -euo pipefail
cd "$(dirname "$0")/.."
for bench in bench/*.bench.ts; do
  echo "== $bench"
  npx ts-node --transpile-only -P tsconfig.json "$bench"
done
