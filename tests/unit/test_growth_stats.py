"""benchmarks/studies/growth_stats.py (the growth reports' paired statistics) on hand-worked examples, and the
``--from_summary`` rebuilds of docs/growth/{rl,xor} against their committed summaries."""

from __future__ import annotations

import json
import math
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "studies"))
import growth_stats  # noqa: E402

from noma_prorl_bench.analysis import stats  # noqa: E402

pytestmark = pytest.mark.unit
T975_DF3 = 3.182446305284263  # t(0.975, 3): the printed tables' 3.182


def test_compare_hand_worked():
    # arm - base = d = [1, 2, 3, -1]; mean 5/4 = 1.25
    # deviations -0.25, 0.75, 1.75, -2.25; squares 0.0625 + 0.5625 + 3.0625 + 5.0625 = 8.75
    # sd = sqrt(8.75 / 3) = 1.70783; se = sd / sqrt(4) = 0.85391; half width = 3.18245 * se = 2.71754
    c = growth_stats.compare("a - b", "m", [2.0, 4.0, 3.0, 0.0], [1.0, 2.0, 0.0, 1.0], lower_is_better=False)
    half = T975_DF3 * math.sqrt(8.75 / 3) / 2
    assert c["n_pairs"] == 4 and c["diff"] == pytest.approx(1.25, abs=1e-12)
    assert c["ci95"] == pytest.approx([1.25 - half, 1.25 + half], abs=1e-9)
    assert c["ci95"] == pytest.approx([-1.46754, 3.96754], abs=1e-5)
    # exact sign flips of (1, 2, 3, -1), 16 patterns: |sum| >= |5| for +-(1+2+3+1) = +-7 and
    # +-(-1+2+3+1) = +-(1+2+3-1) = +-5: 6 of 16
    assert c["p"] == pytest.approx(6 / 16, abs=1e-12)
    assert c["arm_mean"] == pytest.approx(2.25) and c["base_mean"] == pytest.approx(1.0)


def test_compare_constant_difference():
    c = growth_stats.compare("a - b", "m", [3.0, 4.0, 5.0], [1.0, 2.0, 3.0], lower_is_better=True)
    assert c["ci95"] == [2.0, 2.0]
    assert c["p"] == pytest.approx(2 / 8)  # only all-plus and all-minus reach |mean| = 2


def test_finish_holm_verdict_mde80():
    # 8 pairs all +1 (lower is better): exact p = 2 / 256; 8 pairs of mean 0: p = 1
    up = growth_stats.compare("x - y", "loss", [2.0] * 8, [1.0] * 8, lower_is_better=True)
    zero = growth_stats.compare("x - z", "loss", [1.0, -1.0] * 4, [0.0] * 8, lower_is_better=True)
    down = growth_stats.compare(
        "x - w", "reward", [1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5], [0.0] * 8, lower_is_better=False
    )
    comps = growth_stats.finish([up, zero, down])
    # Holm over (1/128, 1, 1/128): the two smallest get 3 * 1/128 then max(that, 2 * 1/128)
    assert [c["p_holm"] for c in comps] == pytest.approx([3 / 128, 1.0, 3 / 128])
    assert [c["verdict"] for c in comps] == ["worse", "no detectable difference", "better"]
    assert up["mde80"] == 0.0  # sd 0
    # the t formula (t(1 - 0.05 / (2 * 3), 7) + t(0.8, 7)) sd / sqrt(8), sd the sample sd of d (mean 2.75)
    xs = [1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5]
    sd = math.sqrt(sum((x - 2.75) ** 2 for x in xs) / 7)
    from scipy import stats as sps

    q = sps.t.ppf(1 - 0.05 / 6, 7) + sps.t.ppf(0.8, 7)
    # the sign-flip test's simulated 80% power point (stats.mde80), near the t formula's
    assert down["mde80"] == stats.mde80(sd, 8, 3)
    assert down["mde80"] == pytest.approx(q * sd / math.sqrt(8), rel=0.1)


def test_mde80_infinite_when_sign_flips_cannot_reach_alpha():
    c = growth_stats.finish([growth_stats.compare("a - b", "m", [1.0, 2.0, 4.0], [0.0] * 3, False)])[0]
    assert math.isinf(c["mde80"]) and c["verdict"] == "no detectable difference"


@pytest.mark.parametrize("folder", ["rl", "xor"])
def test_from_summary_reproduces_committed(folder, tmp_path):
    import growth_rl_report
    import growth_xor_report

    shutil.copy(ROOT / "docs" / "growth" / folder / "summary.json", tmp_path / "summary.json")
    before = json.loads((tmp_path / "summary.json").read_text())
    if folder == "rl":
        assert growth_rl_report.main(["--from_summary", str(tmp_path / "summary.json")]) == 0
    else:
        assert growth_xor_report.main(["--from_summary", str(tmp_path / "summary.json")]) == 0
        assert (tmp_path / "growth_xor_ci.png").stat().st_size > 10_000
    after = json.loads((tmp_path / "summary.json").read_text())
    assert after["meta"] == before["meta"]
    assert len(after["comparisons"]) == len(before["comparisons"]) > 0
    for a, b in zip(after["comparisons"], before["comparisons"]):
        assert (a["name"], a["metric"], a["verdict"]) == (b["name"], b["metric"], b["verdict"])
        assert a["ci95"] == pytest.approx(b["ci95"], rel=1e-9) and a["p_holm"] == pytest.approx(b["p_holm"])
    assert "Student t CI" in (tmp_path / "report.md").read_text()
