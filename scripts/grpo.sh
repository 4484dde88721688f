#!/usr/bin/env bash
# The main job: GRPO on a tiny generated checkpoint (CPU), checking trainer == rollout log-probs
# bit for bit at every step. Extra args go to rlk-grpo (e.g. --steps 200 --family llama).
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$RLK_ROOT"
exec rlk-grpo "$@"
