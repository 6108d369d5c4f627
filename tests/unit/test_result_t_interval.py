"""The run summary's t interval (training/result.py): scipy.stats' t quantile without loading scipy.stats."""

from __future__ import annotations

import math
import subprocess
import sys

from noma_prorl_bench.training.result import ci


def test_t_interval_is_the_scipy_stats_t_interval_bit_for_bit():
    from scipy import stats as sps

    xs = [0.1, 0.5, 0.9, 0.3, 0.25]
    n = len(xs)
    mean = sum(xs) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
    half = float(sps.t.ppf(0.975, n - 1)) * sd / math.sqrt(n)
    out = ci(xs)
    assert out["ci95"] == [max(0.0, mean - half), min(1.0, mean + half)]
    assert out["ci95"][0] > 0.0 and out["ci95"][1] < 1.0  # the cut to [0, 1] left it as it is


def test_t_interval_leaves_scipy_stats_unloaded():
    code = (
        "import sys; from noma_prorl_bench.training.result import ci; ci([0.1, 0.5, 0.9]); "
        "print('scipy.stats' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
