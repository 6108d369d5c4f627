"""--grad_parts_every through a run: its keys every K steps, every other value bit for bit."""

import pytest
from runhelp import run_cli, stable

GRAD_KEYS = {"grad/pg_norm", "grad/kl_norm", "grad/kl_over_pg", "grad/cos_pg_kl"}


@pytest.mark.parametrize("extra", [[], ["--micro_batch", "16", "--minibatches", "2"]])
def test_the_flag_adds_its_keys_every_k_steps_and_changes_no_other_value(tmp_path, extra):
    base = ["--steps", "6", "--batch_size", "4", "--group_size", "8", "--eval_every", "3", "--n_val", "16"]
    base += ["--seed", "1", *extra]
    a, _ = run_cli(tmp_path, base, name="a")
    b, _ = run_cli(tmp_path, base, "--grad_parts_every", "2", name="b")
    a, b = stable(a), stable(b)
    assert len(a) == len(b) == 6
    for x, y in zip(a, b):
        assert {k: v for k, v in y.items() if k not in GRAD_KEYS} == x  # every other value, bit for bit
    measured = [y for y in b if GRAD_KEYS & set(y)]
    assert [y["step"] for y in measured] == [2, 4, 6]
    for y in measured:
        assert set(y) >= GRAD_KEYS and y["grad/pg_norm"] > 0 and y["grad/kl_norm"] > 0
        assert -1.0 <= y["grad/cos_pg_kl"] <= 1.0
        assert y["grad/kl_over_pg"] == pytest.approx(y["grad/kl_norm"] / y["grad/pg_norm"])
