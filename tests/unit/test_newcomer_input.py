"""What a newcomer types: TRL and verl setting names get ours (flags and --config keys, still refused),
unknown names get a close match or nothing (never an unrelated flag), floats that are 0 or subnormal in
float32 are refused for every float flag, a warmup longer than the run is refused, and the memory
refusal names the flag that drives the estimate and says what to do."""

import contextlib
import io
import json
import typing
from dataclasses import fields

import numpy as np
import pytest

from noma_prorl_bench.config import ConfigError, RunConfig, make_config
from noma_prorl_bench.config.files import load_config_file
from noma_prorl_bench.config.foreign import FOREIGN_NAMES
from noma_prorl_bench.config.parser import build_parser
from noma_prorl_bench.config.specs import RunSpecs
from noma_prorl_bench.config.specs.base import FLOAT32_TINY, POSITIVE_FLOATS
from noma_prorl_bench.io import preflight

pytestmark = pytest.mark.unit
FIELDS = {f.name for f in fields(RunConfig)}
HINTS = typing.get_type_hints(RunConfig)


def parse_error(*argv):
    """The parser's error line for `argv` (after --outdir x), or the parsed namespace if it was accepted."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return vars(build_parser().parse_args(["--outdir", "x", *argv]))
    except SystemExit as e:
        assert e.code == 2
        return [ln for ln in err.getvalue().splitlines() if "error:" in ln][0]


def test_every_foreign_name_maps_to_an_existing_flag_with_another_name():
    assert len(FOREIGN_NAMES) >= 60
    for name, (flag, whose, note) in FOREIGN_NAMES.items():
        assert flag in FIELDS, (name, flag)
        assert name not in FIELDS, name  # our own name never reaches the table
        assert whose in ("TRL's", "verl's", "TRL's and verl's", "OpenRLHF's"), name


def test_every_foreign_flag_is_refused_with_ours():
    for name, (flag, _, _) in FOREIGN_NAMES.items():
        got = parse_error(f"--{name}", "1")
        if isinstance(got, dict):  # argparse took it as an abbreviation of ours
            assert set(got) == {"outdir", flag}, (name, got)
        elif f"argument --{flag}:" not in got:  # (or did, and refused the value "1")
            assert f"ours is --{flag}" in got and "did you mean" not in got, (name, got)


def test_every_foreign_config_key_is_refused_with_ours(tmp_path):
    path = tmp_path / "c.json"
    for name, (flag, _, _) in FOREIGN_NAMES.items():
        path.write_text(json.dumps({name: 1}))
        with pytest.raises(ConfigError, match=f"unknown key '{name}'.*ours is {flag}"):
            load_config_file(str(path))


@pytest.mark.parametrize(
    "argv, ours",
    [
        (["--learning_rate", "1e-6"], "ours is --lr"),
        (["--learning-rate", "1e-6"], "ours is --lr"),
        (["--kl_coef", "0.1"], "ours is --beta"),
        (["--num_generations", "8"], "ours is --group_size"),
        (["--epsilon", "0.2"], "ours is --clip_eps"),
        (["--actor_rollout_ref.actor.optim.lr=1e-6"], "ours is --lr"),
        (["--actor_rollout_ref.rollout.n", "8"], "ours is --group_size"),
        (["--n", "8"], "ours is --group_size"),  # argparse: ambiguous prefix
        (["--actor_rollout_ref.actor.ppo_epochs", "2"], "ours is --ppo_epochs: our names are flat"),
        (["--algorithm.kl_ctrl.kl_coef", "0.001"], "ours is --beta"),
        (["--critic.optim.lr=1e-5"], "ours is --critic_lr"),  # verl's critic, not the policy's --lr
        (["--critic_learning_rate", "1e-5"], "ours is --critic_lr"),
        (["--cliprange", "0.2"], "ours is --clip_eps"),  # TRL's policy clip, not a prefix of --cliprange_value
        (["--value_clip", "0.2"], "ours is --cliprange_value"),
        (["--stpes", "3"], "did you mean --steps?"),  # a misspelling still gets difflib
        (["--kl_estimatr", "k3"], "did you mean --kl_estimator?"),
    ],
)
def test_foreign_and_misspelt_flags(argv, ours):
    line = parse_error(*argv)
    assert ours in line and argv[0].split("=")[0] in line, line


@pytest.mark.parametrize(
    "name", ["--max_prompt_length", "--logging_steps", "--top_p", "--whiten_rewards", "--learnin_rate"]
)
def test_a_name_we_have_no_match_for_gets_no_unrelated_suggestion(name):
    line = parse_error(name, "1")
    assert line.endswith(f"argument {name}: unrecognized flag"), line  # not prompt_field, clip_eps, variant ...


def test_a_nested_verl_config_is_named_as_such(tmp_path):
    (tmp_path / "v.json").write_text(json.dumps({"actor_rollout_ref": {"actor": {"optim": {"lr": 1e-6}}}}))
    with pytest.raises(ConfigError, match="actor_rollout_ref is a verl config section; ours are flat"):
        load_config_file(str(tmp_path / "v.json"))


# ------------------------------------------------------------------ floats and bounds
FLOATS = sorted(n for n in FIELDS if HINTS[n] is float)


def test_the_tiny_constant_is_float32s_smallest_normal():
    assert FLOAT32_TINY == float(np.finfo(np.float32).tiny)
    assert set(POSITIVE_FLOATS) <= set(FLOATS)


@pytest.mark.parametrize("value", [1e-45, 3.5e-46, -1e-40])
def test_every_float_flag_refuses_values_that_are_0_or_subnormal_in_float32(value):
    assert 0 < abs(value) < np.finfo(np.float32).tiny and len(FLOATS) >= 20
    for name in FLOATS:
        with pytest.raises(ConfigError, match="smallest normal") as e:
            RunSpecs.from_config(RunConfig(outdir="x", **{name: value}))  # every spec checks its floats
        assert e.value.flag == name


@pytest.mark.parametrize(
    "flag, value",
    [
        ("lr", "3.5e-46"),
        ("temperature", "1e-45"),
        ("warmstart_lr", "1e-40"),
        ("beta", "1e-45"),
        ("weight_decay", "1e-39"),
    ],
)
def test_subnormal_floats_are_refused_naming_the_flag_and_what_is_allowed(flag, value):
    with pytest.raises(ConfigError, match="float32's smallest normal") as e:
        make_config({"outdir": "x", flag: float(value)})
    assert e.value.flag == flag and (">= 1.175e-38" if flag in POSITIVE_FLOATS else "0 or >=") in str(e.value)


def test_the_smallest_normal_and_zero_stay_accepted():
    assert make_config({"outdir": "x", "lr": FLOAT32_TINY, "temperature": FLOAT32_TINY}).lr == FLOAT32_TINY
    assert make_config({"outdir": "x", "beta": 0.0, "weight_decay": 0.0, "max_grad_norm": 0.0}).beta == 0.0


def test_a_warmup_longer_than_the_runs_optimizer_steps_is_refused():
    horizon = 10 * 2 * 3  # steps x ppo_epochs x minibatches
    base = {"outdir": "x", "steps": 10, "ppo_epochs": 2, "minibatches": 3}
    assert make_config({**base, "warmup_steps": horizon}).warmup_steps == horizon
    with pytest.raises(ConfigError, match=f"must be <= the run's {horizon} .*got {horizon + 1}") as e:
        make_config({**base, "warmup_steps": horizon + 1})
    assert e.value.flag == "warmup_steps"
    with pytest.raises(ConfigError, match="never reaches --lr"):
        make_config({"outdir": "x", "warmup_steps": 10**11})


# ------------------------------------------------------------------ the memory refusal
def test_the_memory_refusal_names_max_rank_when_the_adapters_drive_it(monkeypatch):
    monkeypatch.setattr(preflight, "machine_bytes", lambda: 24 * 2**30)
    cfg = make_config({"outdir": "x", "enable_growth": 1, "grow_every": 10, "max_rank": 10**8})
    err = preflight.memory_error(cfg)
    assert err.startswith("argument --max_rank: this run needs about"), err
    assert err.endswith("; lower --max_rank") and "--hidden" not in err, err


def test_the_memory_refusal_says_what_to_do(monkeypatch):
    monkeypatch.setattr(preflight, "machine_bytes", lambda: 2**28)
    err = preflight.memory_error(make_config({"outdir": "x", "batch_size": 4096}))
    assert err.startswith("argument --batch_size:") and err.endswith("or set --micro_batch (rows per forward/backward)")
    err = preflight.memory_error(make_config({"outdir": "x", "hidden": 20000}))
    assert err.startswith("argument --hidden:") and err.endswith("; lower --hidden"), err


@pytest.mark.parametrize(
    "field,value,hint",
    [
        ("opt_reset", "bogus", "keep, hard, soft, asym"),
        ("kl_estimator", "k1", "did you mean k3?"),
        ("dtype", "fp8", ""),
    ],
)
def test_python_api_refuses_a_value_outside_a_choice_field(field, value, hint):
    """make_config (and a config.json read back through it) checks choice fields as argparse does."""
    with pytest.raises(ConfigError, match=f"argument --{field}: invalid choice: '{value}'") as e:
        make_config({"outdir": "/tmp/unused", field: value})
    assert hint in str(e.value) and "\n" not in str(e.value)
