"""tasks/jsonl.py: the rewards by name, the SHA-256 split rule, and the Task protocol checks."""

import hashlib
import json
import random

import numpy as np
import pytest

from noma_prorl_bench.config import ConfigError
from noma_prorl_bench.tasks import Example, make_task
from noma_prorl_bench.tasks.custom import check_protocol, is_factory_spec
from noma_prorl_bench.tasks.jsonl import JsonlTask, reward_by_name, split

pytestmark = pytest.mark.unit


def test_rewards_by_name():
    exact, num, rx = reward_by_name("exact"), reward_by_name("numeric", tol=0.05), reward_by_name("regex")
    assert (exact(" 42\n", "42"), exact("42.0", "42")) == (1.0, 0.0)
    assert (num("so 1,234.03", "1234"), num("1234.1", "1234"), num("no number", "1")) == (1.0, 0.0, 0.0)
    assert (rx("cat", "c[a-z]t"), rx("cats", "c[a-z]t")) == (1.0, 0.0)
    verifier = reward_by_name("noma_prorl_bench.tasks.rewards:keyword_inclusion_reward_fn")  # returns a dict
    assert (verifier("a red apple", "apple, red"), verifier("a red car", "apple, red")) == (1.0, 0.0)
    with pytest.raises(ValueError, match="--reward_fn must be one of"):
        reward_by_name("fuzzy")


def test_split_is_the_lowest_sha256_prompts_whatever_the_line_order():
    ex = [Example(f"p{i % 30}", str(i)) for i in range(60)]  # 30 distinct prompts, each twice
    train, val = split(ex, 5)
    want = sorted({e.prompt for e in ex}, key=lambda p: hashlib.sha256(p.encode()).hexdigest())[:5]
    assert [e.prompt for e in val] == want and [e.answer for e in val] == [str(int(p[1:])) for p in want]
    assert not {e.prompt for e in train} & set(want) and len(train) == 50
    shuffled = list(ex)
    random.Random(0).shuffle(shuffled)
    assert {e.prompt for e in split(shuffled, 5)[1]} == set(want)
    with pytest.raises(ValueError, match="leaves no training prompt"):
        split(ex, 30)


def test_jsonl_task_samples_only_training_lines(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"q{i}", "answer": f"a{i}"}) + "\n" for i in range(20)))
    t = JsonlTask(str(path), n_val=4)
    val = {e.prompt for e in t.validation_set()}
    drawn = t.sample(np.random.default_rng(1), 200)
    assert len(val) == 4 and not val & {e.prompt for e in drawn} and len({e.prompt for e in drawn}) == 16
    assert all(e.answer == "a" + e.prompt[1:] for e in drawn) and t.max_new_tokens == 4
    assert [e.prompt for e in t.sample(np.random.default_rng(1), 5)] == [e.prompt for e in drawn[:5]]


def test_factory_specs_and_protocol_check():
    assert is_factory_spec("my.mod:make") and not is_factory_spec("rg:chain_sum") and not is_factory_spec("jsonl:x")
    assert not is_factory_spec("reverse_digits")
    with pytest.raises(ConfigError, match="lacks sample, validation_set, reward"):
        check_protocol(type("T", (), {"name": "t", "max_new_tokens": 3})(), "m:f")
    t = make_task("noma_prorl_bench.tasks.toy:Parity", n_val=10)  # a class is a factory too
    assert t.name == "parity" and len(t.validation_set()) == 10
