#!/usr/bin/env bash
# The main job (CPU, ~2.5 min): SFT a tiny generated checkpoint on additions (cached), then GRPO with a
# correctness reward -- rlk and the stock contrast -- checking trainer == rollout log-probs bit for bit at
# every step; held-out accuracy before and after. Extra args go to rlk-grpo (e.g. --steps 200 --family llama).
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$RLK_ROOT"
exec rlk-grpo "$@"
