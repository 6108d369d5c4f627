"""Text tasks (keyword_inclusion, arithmetic): deterministic sampling, held-out validation
disjoint from training, rewards graded by the shared reward functions, module doctests."""

import doctest

import numpy as np
import pytest

from noma_prorl_bench.tasks import text
from noma_prorl_bench.tasks.text import (
    KEYWORDS,
    TRAIN_KEYWORDS,
    VAL_KEYWORDS,
    ArithmeticTask,
    KeywordInclusionTask,
    make_text_task,
)


@pytest.mark.unit
def test_module_doctests_pass():
    result = doctest.testmod(text)
    assert result.attempted >= 4 and result.failed == 0


@pytest.mark.unit
def test_keyword_split_is_disjoint_and_fixed():
    assert len(KEYWORDS) == len(set(KEYWORDS)) >= 100
    assert set(TRAIN_KEYWORDS).isdisjoint(VAL_KEYWORDS)
    assert set(TRAIN_KEYWORDS) | set(VAL_KEYWORDS) == set(KEYWORDS)
    assert len(VAL_KEYWORDS) == 22 and len(TRAIN_KEYWORDS) == 88
    assert all(k.isascii() and k.isalpha() and k.islower() for k in KEYWORDS)


@pytest.mark.unit
@pytest.mark.parametrize("n_keywords", [1, 3])
def test_keyword_sampling_is_deterministic_and_uses_train_keywords(n_keywords):
    task = KeywordInclusionTask(n_keywords=n_keywords, n_val=32)
    a = task.sample(np.random.default_rng(7), 50)
    b = task.sample(np.random.default_rng(7), 50)
    assert a == b and len(a) == 50
    assert a != task.sample(np.random.default_rng(8), 50)
    for ex in a:
        kws = ex.answer.split(", ")
        assert len(kws) == len(set(kws)) == n_keywords and set(kws) <= set(TRAIN_KEYWORDS)
        assert ex.prompt.endswith(ex.answer + ".\n")
        assert ("words:" in ex.prompt) == (n_keywords > 1)
    val = task.validation_set()
    assert len(val) == 32 and len({e.prompt for e in val}) == 32  # no repeated validation prompt
    assert all(set(e.answer.split(", ")) <= set(VAL_KEYWORDS) for e in val)
    assert val == KeywordInclusionTask(n_keywords=n_keywords, n_val=32).validation_set()


@pytest.mark.unit
def test_keyword_reward_is_all_or_nothing_case_insensitive():
    task = KeywordInclusionTask()
    assert task.reward("The Red APPLE fell.", "apple, red") == 1.0
    assert task.reward("The apple fell.", "apple, red") == 0.0
    assert task.reward("", "apple") == 0.0
    assert task.max_new_tokens == 64


@pytest.mark.unit
def test_arithmetic_examples_are_correct_and_held_out():
    task = ArithmeticTask(max_operand=20, n_val=40)
    train = task.sample(np.random.default_rng(0), 200)
    assert train == task.sample(np.random.default_rng(0), 200)
    val_prompts = {e.prompt for e in task.validation_set()}
    assert len(val_prompts) == 40 and val_prompts.isdisjoint(e.prompt for e in train)
    for ex in train:
        expr = ex.prompt.split("Compute ")[1].split(".")[0]  # e.g. "12 - 7"
        a, op, b = expr.split()
        assert int(ex.answer) == (int(a) + int(b) if op == "+" else int(a) - int(b)) >= 0
        assert ex.prompt.endswith("<think>")


@pytest.mark.unit
def test_arithmetic_reward_needs_the_r1_zero_format():
    task = ArithmeticTask()
    assert task.reward("7 plus 5 is 12 </think> <answer>12</answer>", "12") == 1.0
    assert task.reward("7 plus 5 is 12 </think> <answer>13</answer>", "12") == 0.0
    assert task.reward("<answer>12</answer>", "12") == 0.0  # no "</think> <answer>"
    r1 = ArithmeticTask(template="r1_zero", n_val=4).validation_set()[0]
    assert r1.prompt.startswith("A conversation between User and Assistant") and "User: What is" in r1.prompt


@pytest.mark.unit
def test_small_pool_and_bad_arguments():
    tiny = ArithmeticTask(max_operand=2, n_val=8)  # 9 pairs x 2 ops -> fewer than 18 prompts
    assert len(tiny.sample(np.random.default_rng(0), 30)) == 30  # repeats allowed once exhausted
    with pytest.raises(ValueError, match="excluded"):
        ArithmeticTask(max_operand=0, n_val=4).sample(np.random.default_rng(0), 1)  # only "0 + 0", "0 - 0"
    with pytest.raises(ValueError, match="template"):
        ArithmeticTask(template="nope")
    with pytest.raises(ValueError, match="n_keywords"):
        KeywordInclusionTask(n_keywords=0)
    with pytest.raises(ValueError, match="unknown text task"):
        make_text_task("nope")
    assert make_text_task("arithmetic", n_val=5).name == "arithmetic"
    assert len(make_text_task("keyword_inclusion", n_val=5).validation_set()) == 5


@pytest.mark.unit
@pytest.mark.parametrize(
    "task",
    [KeywordInclusionTask(n_keywords=2, n_val=8), ArithmeticTask(n_val=8), ArithmeticTask(template="r1_zero", n_val=8)],
    ids=["kw2", "arith", "arith_r1"],
)
def test_demonstrations_earn_full_reward(task):
    examples = task.sample(np.random.default_rng(3), 40) + task.validation_set()
    assert all(task.reward(task.demonstration(e), e.answer) == 1.0 for e in examples)
