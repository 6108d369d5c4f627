"""--task rg:NAME (tasks/reasoning_gym.py): prompts deterministic in the seed, validation disjoint
from training, score_answer on known right and wrong answers, the answer extraction, the format
part, and the config checks. Needs reasoning-gym (the `real` extra); skipped without it."""

import json

import numpy as np
import pytest

pytest.importorskip("reasoning_gym", reason="needs the real extra: pip install 'reasoning-gym==0.1.25'")

from noma_prorl_bench.config import ConfigError, make_config  # noqa: E402
from noma_prorl_bench.config.specs import RunSpecs  # noqa: E402
from noma_prorl_bench.tasks import make_task, part_metrics  # noqa: E402
from noma_prorl_bench.tasks.reasoning_gym import (  # noqa: E402
    INSTRUCTION,
    ReasoningGymTask,
    extract_answer,
    format_ok,
)

pytestmark = [pytest.mark.unit, pytest.mark.real]
KW = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}


def task(n_val=50, **kw):
    return ReasoningGymTask("basic_arithmetic", n_val=n_val, task_kwargs=KW, **kw)


def test_prompts_deterministic_by_seed_and_differ_across_seeds():
    t1, t2 = task(), task()
    a = [e.prompt for e in t1.sample(np.random.default_rng(3), 20)]
    b = [e.prompt for e in t2.sample(np.random.default_rng(3), 20)]
    c = [e.prompt for e in t1.sample(np.random.default_rng(4), 20)]
    assert a == b  # same seed -> same prompts (fresh task objects)
    assert a != c  # another seed -> another sequence
    assert [e.prompt for e in t1.validation_set()] == [e.prompt for e in t2.validation_set()]
    assert all(p.endswith(INSTRUCTION) for p in a)


def test_validation_distinct_and_disjoint_from_training():
    t = task(n_val=200)
    val = {e.prompt for e in t.validation_set()}
    assert len(val) == 200  # 200 distinct questions
    train = {e.prompt for e in t.sample(np.random.default_rng(0), 2000)}
    assert not (val & train)  # a validation question is never trained on
    assert len(train) > 300  # and training is not a handful of repeats


def test_score_answer_right_wrong_and_extraction():
    t = task()
    ex = t.validation_set()[0]
    gold = json.loads(ex.answer)["answer"]
    wrong = str(int(gold) + 1)
    assert t.reward(f"<answer>{gold}</answer>", ex.answer) == 1.0
    assert t.reward(f"<answer>{wrong}</answer>", ex.answer) == 0.0
    assert t.reward(f"The result is {gold}.", ex.answer) == 1.0  # lenient: last number
    assert t.reward(f"{gold} ... no wait, {wrong}", ex.answer) == 0.0  # the LAST number counts
    strict = task(extraction="tag")
    assert strict.reward(f"The result is {gold}.", ex.answer) == 0.0  # tag mode: no tag, no credit
    assert strict.reward(f"so <answer> {gold} </answer>", ex.answer) == 1.0


def test_extract_answer_rules():
    assert extract_answer("x <answer>a</answer> y <answer> b </answer>", "7") == "b"  # last tag, stripped
    assert extract_answer("1,234 then -5.5 apples", "3") == "-5.5"  # last number, commas removed
    assert extract_answer("first\n\n  second line  \n", "abc") == "second line"  # non-numeric: last line
    assert extract_answer("no digits here", "3") is None
    assert extract_answer("12", "3", mode="tag") is None


def test_format_part_is_separate_and_weighted():
    assert format_ok("<answer>3</answer>") == 1.0
    assert format_ok("<answer></answer>") == 0.0  # empty inside
    assert format_ok("<answer>3</answer><answer>4</answer>") == 0.0  # two tags
    t = task(format_weight=0.5)
    ex = t.validation_set()[0]
    gold = json.loads(ex.answer)["answer"]
    assert t.reward(f"<answer>{gold}</answer>", ex.answer) == 1.5  # 1 + 0.5 * 1
    assert t.reward(f"it is {gold}", ex.answer) == 1.0  # correct, no format
    m = part_metrics(t, [f"<answer>{gold}</answer>", "nothing"], [ex.answer, ex.answer])
    assert m == {"reward/correct": 0.5, "reward/format": 0.5, "reward/answer_form": 0.5, "reward/correct_in_form": 0.5}


def test_answer_form_parts_split_correctness():
    t = task()
    ex = t.validation_set()[0]
    gold = int(json.loads(ex.answer)["answer"])
    texts = [
        f"The answer is {gold}.",  # form, correct
        f"The answer is {gold + 1}.",  # form, wrong
        f"First {gold} then we add 3 and",  # no form; lenient reads 3: wrong
        f"{gold + 1} minus one is {gold} apples",
    ]  # no form (words after); lenient reads gold: correct
    parts = [t.reward_parts(s, ex.answer) for s in texts]
    assert [p["answer_form"] for p in parts] == [1.0, 1.0, 0.0, 0.0]
    assert [p["correct"] for p in parts] == [1.0, 0.0, 0.0, 1.0]
    assert [p["correct_in_form"] for p in parts] == [1.0, 0.0, 0.0, 0.0]
    m = part_metrics(t, texts, [ex.answer] * 4)
    assert m["reward/correct"] == 0.5 and m["reward/answer_form"] == 0.5
    assert m["reward/correct_in_form"] / m["reward/answer_form"] == 0.5  # correct given the form


def test_make_task_passes_task_kwargs_through_config():
    cfg = make_config(
        {
            "outdir": "x",
            "model": "hf:/nonexistent",
            "task": "rg:basic_arithmetic",
            "task_kwargs": json.dumps(KW),
            "n_val": 20,
            "format_reward": 0.2,
        }
    )
    t = make_task(cfg.task, n_val=cfg.n_val, spec=RunSpecs.from_config(cfg).task)
    assert t.task_kwargs == KW and t.format_weight == 0.2 and len(t.validation_set()) == 20
    meta = json.loads(t.validation_set()[0].answer)["metadata"]
    assert meta["num_terms"] == 2  # difficulty reached the generator


@pytest.mark.parametrize(
    "flags,flag",
    [
        ({"task": "rg:basic_arithmetic", "model": "gru"}, "task"),
        ({"task": "nope"}, "task"),
        ({"task_kwargs": '{"a": 1}'}, "task_kwargs"),  # rg-only flag on a toy task
        ({"task": "rg:basic_arithmetic", "model": "hf:/x", "task_kwargs": "[1]"}, "task_kwargs"),
        ({"task": "rg:basic_arithmetic", "model": "hf:/x", "task_kwargs": "{bad"}, "task_kwargs"),
        ({"task": "rg:basic_arithmetic", "model": "hf:/x", "format_reward": -1.0}, "format_reward"),
    ],
)
def test_config_rejects_bad_rg_flags(flags, flag):
    with pytest.raises(ConfigError) as e:
        make_config({"outdir": "x", **flags})
    assert e.value.flag == flag


def test_unknown_dataset_is_a_value_error():
    with pytest.raises(ValueError, match="not registered"):
        ReasoningGymTask("no_such_dataset", n_val=4)
