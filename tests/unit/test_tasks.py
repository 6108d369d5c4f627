"""Toy tasks: deterministic by seed, held-out validation, rewards in [0, 1]."""

import numpy as np
import pytest

from noma_prorl_bench.tasks import TOY_TASKS, make_task
from noma_prorl_bench.tasks.base import CharTokenizer
from noma_prorl_bench.tasks.toy import positional_match

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("name", sorted(TOY_TASKS))
def test_deterministic_and_held_out(name):
    t = make_task(name, n_val=32)
    a = t.sample(np.random.default_rng(5), 50)
    b = t.sample(np.random.default_rng(5), 50)
    assert a == b
    val = {e.prompt for e in t.validation_set()}
    assert len(t.validation_set()) == 32
    assert not val & {e.prompt for e in t.sample(np.random.default_rng(1), 500)}
    for e in a:
        assert t.reward(e.answer, e.answer) == 1.0
        assert 0.0 <= t.reward("", e.answer) <= 1.0


def test_positional_match_arithmetic():
    # "4311" vs "4321": positions 0,1,3 right -> 3/4; "43" vs "4321": 2 hits / max(2,4) = 0.5
    assert positional_match("4311", "4321") == 0.75
    assert positional_match("43", "4321") == 0.5
    assert positional_match("432100", "4321") == 4 / 6


def test_char_tokenizer_roundtrip():
    tok = CharTokenizer()
    ids = tok.encode_prompts(["12", "345"], P=5)
    assert ids.tolist() == [[0, 1, 5, 6, 2], [1, 7, 8, 9, 2]]
    assert tok.decode(tok.encode_answer("4321")) == "4321"
