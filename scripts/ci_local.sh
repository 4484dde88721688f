#!/usr/bin/env bash
# CI as the project's CI runs it, on this machine: a clean clone of HEAD in a temporary folder, .ci/run there (it
# builds its own .venv, about 3.5 GB), then the clone removed whatever the outcome, also when this script is
# interrupted -- clones left behind filled the disk that CI runs on once (session 32: "[Errno 28] No space left on
# device" in pip).
#
#   bash scripts/ci_local.sh            # the whole suite, as CI runs it (~35 min on 2 cores)
set -uo pipefail
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dir=$(mktemp -d "${TMPDIR:-/tmp}/rlk-ci.XXXXXX")
child=
trap 'rm -rf "$dir"' EXIT
trap '[ -n "$child" ] && kill -- -"$child" 2>/dev/null; exit 143' TERM INT
git clone -q "$src" "$dir/repo" || exit 1
cd "$dir/repo" || exit 1
start=$(date +%s)
setsid bash .ci/run &  # its own process group, so an interrupt ends its pytest too
child=$!
wait "$child"
rc=$?
echo "[rlk] CI on a clean clone of $(git rev-parse --short HEAD): exit $rc after $(( $(date +%s) - start )) s"
exit $rc
