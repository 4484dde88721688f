"""The README's main command runs end to end and reports zero mismatches."""

import subprocess
import sys


def test_demo_runs_and_reports_bitwise_equality(tmp_path):
    r = subprocess.run([sys.executable, "-m", "rlk_models.cli.demo", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "OK -- every configuration bitwise equal" in r.stdout
    assert "packed batch" in r.stdout and "per-token log-probs" in r.stdout
