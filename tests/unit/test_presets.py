"""Unit tests for presets.py: fields, types, the documented values per source, merge order."""

from __future__ import annotations

import dataclasses
import typing

import pytest

from noma_prorl_bench.config import RunConfig
from noma_prorl_bench.config.presets import (
    PRESETS,
    RESET_FIELDS,
    SWITCH_FIELDS,
    apply_preset,
    describe_all,
    describe_preset,
)


@pytest.mark.unit
def test_the_four_presets_exist_and_set_every_switch():
    assert set(PRESETS) == {"prorl_v1", "prorl_v2", "trl_sync", "noma_soft"}
    for name, values in PRESETS.items():
        assert set(SWITCH_FIELDS) <= set(values) <= set(RESET_FIELDS), name


@pytest.mark.unit
def test_preset_fields_are_runconfig_fields_with_matching_types_and_choices():
    hints = typing.get_type_hints(RunConfig)
    defaults = RunConfig()
    names = {f.name for f in dataclasses.fields(RunConfig)}
    assert set(RESET_FIELDS) <= names
    for name, values in PRESETS.items():
        for key, value in values.items():
            tp = hints[key]
            if typing.get_origin(tp) is typing.Literal:
                assert value in typing.get_args(tp), (name, key)
            else:
                assert type(value) is type(getattr(defaults, key)), (name, key)
        for key in ("reset_opt_step", "reset_lr_schedule", "reset_kl_coef"):
            assert values[key] in (0, 1)
        assert 0.0 < values.get("ref_mix_alpha", 0.6) <= 1.0
        assert 0.0 <= values.get("soft_factor", 0.2) <= 1.0


@pytest.mark.unit
def test_presets_encode_their_sources():
    v1, v2, trl, soft = (PRESETS[n] for n in ("prorl_v1", "prorl_v2", "trl_sync", "noma_soft"))
    # v1: stall -> reference <- the online policy as it is (no restore), everything optimizer-side fresh
    assert v1["reset_on_stall"] > 0 and v1["reset_every"] == 0 and v1["reset_to"] == "current"
    assert (v1["opt_reset"], v1["reset_opt_step"], v1["reset_lr_schedule"], v1["reset_kl_coef"]) == ("hard", 1, 1, 1)
    # v2: periodic within 200-500 steps (+ stall), current policy, optimizer kept
    assert 200 <= v2["reset_every"] <= 500 and v2["reset_on_stall"] > 0 and v2["reset_to"] == "current"
    assert (v2["opt_reset"], v2["reset_opt_step"], v2["reset_lr_schedule"]) == ("keep", 0, 0)
    # TRL: Polyak 0.6 every 512, optimizer untouched
    assert (trl["ref_update"], trl["ref_mix_alpha"], trl["reset_every"], trl["opt_reset"]) == (
        "polyak",
        0.6,
        512,
        "keep",
    )
    # soft washout: moments * 0.2 at each periodic reset
    assert (soft["opt_reset"], soft["soft_factor"], soft["reset_every"]) == ("soft", 0.2, v2["reset_every"])


@pytest.mark.unit
def test_apply_preset_explicit_wins_and_inputs_untouched():
    preset = dict(PRESETS["prorl_v1"])
    merged = apply_preset(preset, {"opt_reset": "asym", "soft_factor": 0.5, "lr": 1e-3})
    assert merged["opt_reset"] == "asym" and merged["soft_factor"] == 0.5 and merged["lr"] == 1e-3
    assert merged["reset_to"] == "current"
    assert preset == PRESETS["prorl_v1"]
    with pytest.raises(KeyError):
        apply_preset({"not_a_field": 1}, {})


@pytest.mark.unit
def test_describe_preset_lists_every_setting_and_a_source():
    for name, values in PRESETS.items():
        line = describe_preset(name)
        assert "\n" not in line and line.startswith(name + ":") and "Source:" in line
        for key, value in values.items():
            assert f"{key}={value}" in line
    assert "arXiv:2505.24864" in describe_preset("prorl_v1")
    assert "0.6" in describe_preset("trl_sync") and "512" in describe_preset("trl_sync")
    assert len(describe_all().splitlines()) == 5  # 4 reset presets + the smollm2_demo run preset
    with pytest.raises(KeyError):
        describe_preset("prorl_v3")


def test_smollm2_demo_run_preset_sets_valid_fields_and_flags_win():
    from noma_prorl_bench.config import make_config
    from noma_prorl_bench.config.presets import RUN_PRESETS

    cfg = make_config({"outdir": "x", "preset": "smollm2_demo", "steps": 3})
    assert cfg.steps == 3  # explicit flag wins
    for key, value in RUN_PRESETS["smollm2_demo"].items():
        if key != "steps":
            assert getattr(cfg, key) == value, key
    assert cfg.task == "rg:basic_arithmetic" and cfg.enable_growth == 1 and cfg.max_rank == cfg.initial_rank


def test_smollm2_demo_full_fine_tune_drops_the_presets_adapter_fields():
    """`--preset smollm2_demo --enable_growth 0 --lr 1e-5` (the documented full fine-tune) is valid:
    the preset's growth-only values (rank 8, targets, alpha) go with its adapters; a growth flag
    the user gives explicitly still errors."""
    import pytest

    from noma_prorl_bench.config import GROWTH_FLAGS, ConfigError, RunConfig, make_config

    cfg = make_config({"outdir": "x", "preset": "smollm2_demo", "enable_growth": 0, "lr": 1e-5})
    assert cfg.enable_growth == 0 and cfg.lr == 1e-5 and cfg.task == "rg:basic_arithmetic"
    for name in GROWTH_FLAGS:
        assert getattr(cfg, name) == getattr(RunConfig(), name), name
    with pytest.raises(ConfigError, match="only applies with --enable_growth 1"):
        make_config({"outdir": "x", "preset": "smollm2_demo", "enable_growth": 0, "initial_rank": 16})
