"""Bad input everywhere: each invalid command line exits 2 with a message naming the flag, and
writes nothing (the output directory is never created). In-process through run.main."""

import os

import pytest

from noma_prorl_bench.run import main

pytestmark = pytest.mark.smoke

# (extra flags, the flag the message must name); every line also gets a fresh --outdir
BAD = [
    (["--steps", "x"], "--steps"),  # type
    (["--steps", "1.5"], "--steps"),
    (["--steps", "0"], "--steps"),  # range
    (["--steps", "-5"], "--steps"),
    (["--batch_size", "0"], "--batch_size"),
    (["--group_size", "1"], "--group_size"),
    (["--minibatches", "100"], "--minibatches"),  # > batch_size * group_size
    (["--ppo_epochs", "0"], "--ppo_epochs"),
    (["--eval_every", "0"], "--eval_every"),
    (["--threads", "0"], "--threads"),
    (["--seed", "-1"], "--seed"),
    (["--lr", "0"], "--lr"),
    (["--lr", "-1e-3"], "--lr"),
    (["--lr", "nan"], "--lr"),  # not finite
    (["--beta", "inf"], "--beta"),
    (["--beta", "-0.1"], "--beta"),
    (["--warmstart_lr", "0"], "--warmstart_lr"),
    (["--temperature", "0"], "--temperature"),
    (["--weight_decay", "-1"], "--weight_decay"),
    (["--max_grad_norm", "-1"], "--max_grad_norm"),
    (["--clip_eps", "1.5"], "--clip_eps"),
    (["--eps_low", "1.2"], "--eps_low"),
    (["--dual_clip_c", "0.5"], "--dual_clip_c"),
    (["--tis_cap", "0.5"], "--tis_cap"),
    (["--soft_factor", "2"], "--soft_factor"),
    (["--ref_mix_alpha", "0"], "--ref_mix_alpha"),
    (["--reset_kl_min_gap", "-2"], "--reset_kl_min_gap"),
    (["--plots", "2"], "--plots"),
    (["--loss", "ppo2"], "--loss"),  # choices
    (["--adv", "vtrace"], "--adv"),
    (["--dtype", "float16"], "--dtype"),
    (["--device", "tpu"], "--device"),
    (["--on_nan", "ignore"], "--on_nan"),
    (["--model", "lstm"], "--model"),
    (["--model", "hf:/nonexistent/model/dir"], "--model"),  # checked before anything runs
    (["--model", "transformer", "--n_heads", "3"], "--n_heads"),  # combinations
    (["--task", "arithmetic"], "--task"),
    (["--variant", "B", "--reset_every", "5"], "--reset_every"),
    (["--variant", "B", "--ref_compute", "ring"], "--ref_compute"),
    (["--kl_in", "reward", "--variant", "B"], "--kl_in"),
    (["--kl_in", "reward", "--kl_estimator", "full"], "--kl_estimator"),
    (["--k2_mode", "ref_over_old"], "--k2_mode"),
    (["--target_kl", "0.1", "--beta", "0"], "--beta"),
    (["--grow_every", "5"], "--grow_every"),  # growth flag without --enable_growth 1
    (["--enable_growth", "1"], "--grow_every"),  # schedule growth needs --grow_every
    (["--save_every", "-1"], "--save_every"),  # reliability flags
    (["--keep_checkpoints", "0"], "--keep_checkpoints"),
    (["--resume", "--overwrite"], "--resume"),
    (["--resume"], "--resume"),  # nothing to resume
    (["--bogus_flag", "1"], "--bogus_flag"),  # unknown flag
    # sizes the machine cannot hold, refused before anything runs
    (["--batch_size", "100000000"], "--batch_size"),
    (["--n_val", "1000000000"], "--n_val"),
    (["--hidden", "200000"], "--hidden"),
    (["--n_val", "0"], "--n_val"),
    (["--hidden", "0"], "--hidden"),
    (["--model", "transformer", "--d_model", "30", "--n_heads", "4"], "--n_heads"),
    (["--max_new_tokens", "-1"], "--max_new_tokens"),
    (["--warmstart_steps", "-2"], "--warmstart_steps"),
    (["--kl_horizon", "0"], "--kl_horizon"),
    # names: misspelt flags and values (with a "did you mean")
    (["--stepz", "3"], "--stepz"),
    (["--kl_estimator", "k4"], "--kl_estimator"),
    (["--engine", "ray"], "--engine"),
    (["--report_to", "wandbb"], "--report_to"),  # (wandb is a sink now)
    (["--report_to", "csv,tensorbord"], "--report_to"),
    (["--preset", "prorl"], "--preset"),
    (["--opt_reset", "medium"], "--opt_reset"),
    (["--lr_schedule", "cosine2"], "--lr_schedule"),
    (["--task", "reverse"], "--task"),
    # contradictions
    (["--engine", "ray_async", "--report_to", "csv"], "--report_to"),
    (["--max_staleness", "2"], "--max_staleness"),  # a Ray flag with --engine local
    (["--weight_sync", "nccl"], "--weight_sync"),
    (["--engine", "ray_colocated", "--device", "cuda"], "--device"),
    (["--tis_cap", "0.9"], "--tis_cap"),
    (["--compile_decode", "max-autotune"], "--compile_decode"),  # choices: off, default, reduce-overhead
    (["--compile_decode", "default"], "--compile_decode"),  # the default model is the GRU
    (["--model", "hf:/x", "--compile_decode", "reduce-overhead"], "--compile_decode"),
    (["--kl_in", "reward", "--ref_compute", "naive_epoch"], "--kl_in"),
    # growth without (usable) adapters
    (["--lora_alpha", "2"], "--lora_alpha"),  # adapter flag without --enable_growth 1
    (["--enable_growth", "1", "--grow_every", "2", "--adapter_targets", "none"], "--adapter_targets"),
    (["--enable_growth", "1", "--grow_every", "2", "--max_rank", "2", "--initial_rank", "4"], "--max_rank"),
    (["--enable_growth", "1", "--grow_every", "2", "--rank_step", "0"], "--rank_step"),
    # moving anchors: the EMA reference, Elastic Reset, the KL log-ratio clamp
    (["--ref_update", "emma"], "--ref_update"),
    (["--ref_update", "ema", "--ref_ema_tau", "1"], "--ref_ema_tau"),  # tau in (0, 1)
    (["--ref_update", "ema", "--ref_ema_tau", "0"], "--ref_ema_tau"),
    (["--ref_update", "ema", "--ref_ema_every", "0"], "--ref_ema_every"),  # period >= 1
    (["--ref_ema_every", "5"], "--ref_ema_every"),  # an EMA flag without --ref_update ema
    (["--ref_update", "ema", "--reset_every", "5"], "--reset_every"),  # two rules for one reference
    (["--variant", "B", "--ref_update", "ema"], "--ref_update"),
    (["--reset_to", "elastic"], "--reset_to"),  # no trigger: it would never reset
    (["--reset_to", "elastic", "--reset_every", "5", "--ref_update", "polyak"], "--ref_update"),
    (["--reset_to", "elastic", "--reset_every", "5", "--elastic_decay", "1"], "--elastic_decay"),
    (["--elastic_decay", "0.9"], "--elastic_decay"),  # without --reset_to elastic
    (["--variant", "B", "--reset_to", "elastic", "--reset_every", "5"], "--reset_every"),
    (["--kl_clip", "-1"], "--kl_clip"),
    (["--kl_clip", "inf"], "--kl_clip"),
    (["--kl_clip", "nan"], "--kl_clip"),
    # paths
    (["--outdir", "/proc/noma_bad/x"], "--outdir"),
    (["--model", "hf:/etc"], "--model"),
]


def _run(argv):
    try:
        return main(argv)
    except SystemExit as e:
        return e.code


@pytest.mark.parametrize("extra,flag", BAD, ids=[" ".join(x) for x, _ in BAD])
def test_bad_command_line_exits_2_names_the_flag_writes_nothing(tmp_path, fast_flags, capsys, extra, flag):
    outdir = tmp_path / "run"
    assert _run(["--outdir", str(outdir), *fast_flags, *extra]) == 2
    err = capsys.readouterr().err
    assert flag in _error_line(err), err  # in the message, not just the usage
    assert "Traceback" not in err
    assert not outdir.exists()


def _error_line(err):
    return "\n".join(line for line in err.splitlines() if "error:" in line)


def test_table_is_large_enough():
    assert len(BAD) >= 70 and len({tuple(x) for x, _ in BAD}) == len(BAD)


# --resume against a finished 4-step run (checkpoints at steps 2 and 4): changed or corrupt checkpoints
RESUME_BAD = [
    (["--lr", "0.5"], "--lr", None),  # a field that changes the trajectory
    (["--variant", "B"], "--variant", None),
    (["--seed", "3"], "--seed", None),
    (["--steps", "2"], "--steps", None),  # before the last checkpoint
    ([], "--resume", "tensors"),  # every checkpoint's tensors truncated
    ([], "--resume", "state"),  # every checkpoint's state.json garbled
    ([], "--resume", "marker"),  # no complete checkpoint left
]


def _snapshot(d):
    return {str(p.relative_to(d)): (p.stat().st_size, p.stat().st_mtime_ns) for p in d.rglob("*")}


@pytest.mark.parametrize("extra,flag,corrupt", RESUME_BAD, ids=[f"{' '.join(x)}{c or ''}" for x, _, c in RESUME_BAD])
def test_bad_resume_exits_2_names_the_flag_writes_nothing(tmp_path, fast_flags, capsys, extra, flag, corrupt):
    out = tmp_path / "run"
    assert _run(["--outdir", str(out), *fast_flags, "--steps", "4", "--save_every", "2"]) == 0
    for ck in (out / "checkpoints").iterdir():
        if corrupt == "tensors":
            (ck / "tensors.safetensors").write_bytes((ck / "tensors.safetensors").read_bytes()[:100])
        elif corrupt == "state":
            (ck / "state.json").write_text("{not json")
        elif corrupt == "marker":
            (ck / "COMPLETE").unlink()
    capsys.readouterr()
    before = _snapshot(out)
    assert _run(["--outdir", str(out), "--resume", *extra]) == 2
    err = capsys.readouterr().err
    assert flag in _error_line(err) and "Traceback" not in err, err
    assert _snapshot(out) == before


def test_missing_outdir(fast_flags, capsys):
    assert _run(list(fast_flags)) == 2
    assert "--outdir" in _error_line(capsys.readouterr().err)


@pytest.mark.parametrize("where", ["is_a_file", "under_a_file"])
def test_unusable_outdir(tmp_path, fast_flags, capsys, where):
    f = tmp_path / "file"
    f.write_text("x")
    outdir = f if where == "is_a_file" else f / "sub"
    assert _run(["--outdir", str(outdir), *fast_flags]) == 2
    assert "--outdir" in _error_line(capsys.readouterr().err)
    assert f.read_text() == "x" and sorted(os.listdir(tmp_path)) == ["file"]


def test_non_empty_outdir_needs_overwrite(tmp_path, fast_flags, capsys):
    (tmp_path / "keep.txt").write_text("mine")
    assert _run(["--outdir", str(tmp_path), *fast_flags]) == 2
    assert "--overwrite" in capsys.readouterr().err and sorted(os.listdir(tmp_path)) == ["keep.txt"]
