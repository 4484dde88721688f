#!/usr/bin/env bash
# The main job on its embedded default (CPU, a tiny generated checkpoint). Extra args go to rlk-demo.
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$RLK_ROOT"
exec rlk-demo "$@"
