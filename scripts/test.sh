#!/usr/bin/env bash
# The test suite. Extra args go to pytest (e.g. scripts/test.sh tests/ops -k attention).
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$RLK_ROOT"
exec python -m pytest "$@"
