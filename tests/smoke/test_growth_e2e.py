"""Growth end to end: the seed's command shape, every migration mode, no stale optimizer
state during a real run, growth with reference resets (Variant A), Variant B, the transformer.

Every run uses FAST (tests/conftest.py): 4 prompts x 4 samples, 5 warm-start steps, eval every 2.
"""

import os

import pytest
from runhelp import read_jsonl, run_cli  # noqa: E402

from noma_prorl_bench.config import make_config
from noma_prorl_bench.models.lora import adapter_rank
from noma_prorl_bench.run import main
from noma_prorl_bench.training.growth import check_no_stale_state
from noma_prorl_bench.training.trainer import Trainer

pytestmark = pytest.mark.smoke

GROW = ["--enable_growth", "1", "--grow_every", "3", "--rank_step", "4"]


_read, _run = read_jsonl, run_cli


def _growths(events):
    return [e for e in events if e["event"] == "growth"]


def test_seed_growth_command_shows_rank_steps(tmp_path, fast_flags):
    """The seed's `--enable_growth 1 --grow_every 300 --rank_step 4 --steps 1200`, scaled down."""
    metrics, events = _run(tmp_path, fast_flags, *GROW, "--steps", "7")
    g = _growths(events)
    assert [(e["step"], e["old_rank"], e["new_rank"]) for e in g] == [(3, 4, 8), (6, 8, 12)]
    assert all(e["reason"] == "schedule" and e["migration"] == "preserve" for e in g)
    assert all(e["stale_state_problems"] == [] for e in g)
    assert [m["adapter/rank"] for m in metrics] == [4, 4, 4, 8, 8, 8, 12]
    adapters = [e for e in events if e["event"] == "adapters"]
    assert len(adapters) == 1 and adapters[0]["targets"] == ["head"] and adapters[0]["rank"] == 4


@pytest.mark.parametrize("mode", ["preserve", "reset", "naive", "noma_flat"])
def test_each_migration_mode_runs(tmp_path, fast_flags, mode):
    metrics, events = _run(
        tmp_path,
        fast_flags,
        *GROW,
        "--steps",
        "5",
        "--growth_migration",
        mode,
        "--lr_schedule",
        "cosine",
        "--warmup_steps",
        "4",
    )
    (g,) = _growths(events)
    assert (g["step"], g["new_rank"], g["migration"], g["stale_state_problems"]) == (3, 8, mode, [])
    assert g["scheduler_rebuilt"] == (mode == "naive")
    assert len(metrics) == 5 and len({m["optim/lr"] for m in metrics}) == 5  # the schedule still moves


def test_naive_keeps_the_lr_schedule(tmp_path, fast_flags):
    """The LR trajectory does not depend on the migration: naive's rebuilt scheduler keeps its step."""
    flags = [*GROW, "--steps", "6", "--lr_schedule", "cosine", "--warmup_steps", "4"]
    m_pre, _ = _run(tmp_path, fast_flags, *flags, "--growth_migration", "preserve", name="pre")
    m_naive, _ = _run(tmp_path, fast_flags, *flags, "--growth_migration", "naive", name="naive")
    assert [m["optim/lr"] for m in m_naive] == [m["optim/lr"] for m in m_pre]
    assert len({m["optim/lr"] for m in m_pre}) == 6  # the schedule does move


def test_no_stale_state_during_a_real_run(tmp_path):
    values = {
        "outdir": str(tmp_path / "t"),
        "batch_size": 4,
        "group_size": 4,
        "warmstart_steps": 5,
        "n_val": 16,
        "eval_every": 2,
        "quiet": True,
        "steps": 7,
        "enable_growth": 1,
        "grow_every": 2,
        "rank_step": 4,
        "growth_migration": "preserve",
    }
    tr = Trainer.from_config(make_config(values)).start()
    steps_seen = []
    for _ in range(7):
        tr.train_step()
        assert check_no_stale_state(tr.policy, tr.optimizer) == []
        states = [tr.optimizer.state[p] for g in tr.optimizer.param_groups for p in g["params"]]
        assert all(s and s["exp_avg"].shape == s["exp_avg_sq"].shape for s in states)
        steps_seen.append({int(s["step"]) for s in states})
    # preserve keeps Adam's step across growths: E*M = 4 optimizer steps per RL step, never restarted
    assert steps_seen == [{4 * k} for k in range(1, 8)]
    assert adapter_rank(tr.policy) == adapter_rank(tr.ref.model) == 16


@pytest.mark.parametrize(
    "flags",
    [
        ["--grow_on", "reset", "--reset_every", "2"],  # grow right after each reset
        ["--grow_every", "2", "--reset_every", "3"],  # resets copy a grown policy
        ["--grow_every", "2", "--reset_every", "3", "--reset_to", "best"],  # best snapshot grown too
        ["--grow_every", "2", "--reset_every", "3", "--ref_update", "polyak"],
        [
            "--grow_every",
            "2",
            "--reset_every",
            "3",
            "--ref_compute",
            "ring",
            "--growth_migration",
            "naive",
            "--opt_reset",
            "hard",
        ],
    ],
)
def test_growth_with_reference_resets(tmp_path, fast_flags, flags):
    metrics, events = _run(tmp_path, fast_flags, "--enable_growth", "1", "--steps", "7", *flags)
    resets = [e["step"] for e in events if e["event"] == "ref_reset"]
    grows = [e["step"] for e in _growths(events)]
    if "reset" in flags:
        assert resets == [2, 4, 6] and grows == [2, 4, 6]
        assert all(e["reason"] == "reset" for e in _growths(events))
    else:
        assert resets == [3, 6] and grows == [2, 4, 6]
    assert metrics[-1]["adapter/rank"] == 16


def test_variant_b_with_growth(tmp_path, fast_flags):
    metrics, events = _run(tmp_path, fast_flags, *GROW, "--steps", "4", "--variant", "B")
    assert [e["new_rank"] for e in _growths(events)] == [8] and metrics[-1]["count/ref_fwd"] == 0


@pytest.mark.skipif(
    not os.path.exists(
        os.path.join(os.path.dirname(__file__), "..", "..", "src", "noma_prorl_bench", "models", "transformer.py")
    ),
    reason="models/transformer.py not there yet",
)
def test_transformer_growth(tmp_path, fast_flags):
    metrics, events = _run(
        tmp_path,
        fast_flags,
        *GROW,
        "--steps",
        "4",
        "--model",
        "transformer",
        "--adapter_targets",
        "q_proj,v_proj,head",
        "--reset_every",
        "4",
    )
    (a,) = [e for e in events if e["event"] == "adapters"]
    assert a["targets"] == [
        "blocks.0.attn.q_proj",
        "blocks.0.attn.v_proj",
        "blocks.1.attn.q_proj",
        "blocks.1.attn.v_proj",
        "head",
    ]
    (g,) = _growths(events)
    assert (g["step"], g["new_rank"], g["stale_state_problems"]) == (3, 8, [])
    assert [e["step"] for e in events if e["event"] == "ref_reset"] == [4]


def test_growth_flags_without_enable_growth_exit_2(tmp_path, fast_flags, capsys):
    with pytest.raises(SystemExit) as e:
        main(["--outdir", str(tmp_path / "x"), *fast_flags, "--grow_every", "3"])
    assert e.value.code == 2 and "--enable_growth 1" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize(
    "flags",
    [
        [
            "--grow_on",
            "stall",
            "--grow_patience",
            "1",
            "--eval_every",
            "1",
            "--growth_migration",
            "naive",
            "--lr_schedule",
            "cosine",
        ],
        ["--grow_on", "reset", "--reset_every", "3", "--reset_to", "best", "--growth_migration", "reset"],
        # preserve: the checkpoint at step 5 holds young Adam cohorts (growths at 2 and 4)
        ["--grow_every", "2", "--growth_migration", "preserve"],
    ],
)
def test_resume_across_growth_is_exact(tmp_path, fast_flags, flags):
    """A checkpoint after growths, the run killed later, resumed: the same metrics and events."""
    import shutil

    common = [*fast_flags, "--enable_growth", "1", *flags, "--steps", "8"]
    full, d = tmp_path / "full", tmp_path / "killed"
    assert main(["--outdir", str(full), *common]) == 0
    assert main(["--outdir", str(d), *common, "--save_every", "5", "--keep_checkpoints", "2"]) == 0
    shutil.rmtree(d / "checkpoints" / "step_000008")
    assert main(["--outdir", str(d), "--resume"]) == 0
    volatile = ("time/", "perf/")
    stable = [
        [{k: v for k, v in m.items() if not k.startswith(volatile)} for m in _read(x / "metrics.jsonl")]
        for x in (full, d)
    ]
    assert stable[0] == stable[1]
    grows = [[(e["step"], e["new_rank"]) for e in _growths(_read(x / "events.jsonl"))] for x in (full, d)]
    assert grows[0] == grows[1] and grows[0]
