"""Coverage of the report's paired interval (`stats.paired_interval`) under the shapes per-seed
differences take (benchmarks/studies/interval_coverage.py draws them; docs/statistics.md has its 4 000-
study table): at 10 pairs >= 0.94 under normal and t3 differences, >= 0.92 under shifted-
exponential ones and one outlying seed in ten, >= 0.89 under lognormal ones; the Student t
interval alone falls short under skew, so the test can fail."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "studies"))
import interval_coverage  # noqa: E402

pytestmark = pytest.mark.slow

STUDIES = 1500
#: the bars at 10 pairs; the table (4 000 studies) meets each with >= 3 SE to spare
TARGET = {"normal": 0.94, "t3": 0.94, "shifted exp": 0.92, "outlier 1/10": 0.92, "lognormal": 0.89}


@pytest.mark.parametrize("shape", list(TARGET))
def test_paired_interval_meets_its_coverage_at_ten_pairs(shape):
    # 1 500 studies: Monte-Carlo SE sqrt(c (1 - c) / 1500) = 0.0056 at c = 0.95, 0.0077 at 0.91.
    # The bar less 0.015 (2-2.7 SE) keeps a seeded draw from failing on noise alone while still
    # failing a method 0.03 short of it, as the t interval is under skew (checked below)
    r = interval_coverage.coverage(shape, 10, STUDIES, seed=1)
    assert r["cover"] >= TARGET[shape] - 0.015, r
    assert r["width"] >= r["width_t"]  # never narrower than t
    if shape in ("shifted exp", "lognormal"):
        assert r["cover_t"] < TARGET[shape] - 0.015, r  # what the t interval alone gives


def test_paired_interval_at_eight_pairs_under_skew():
    # n = 8 (the quick suite's pairs): table 0.94 shifted exp, 0.90 lognormal
    for shape, bar in (("shifted exp", 0.92), ("lognormal", 0.88)):
        r = interval_coverage.coverage(shape, 8, STUDIES, seed=2)
        assert r["cover"] >= bar - 0.015 and r["cover"] > r["cover_t"], r
