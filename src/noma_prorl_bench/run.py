"""Run one training job: `python -m noma_prorl_bench.run --outdir runs/A1 --steps 400`.

Without installing: `PYTHONPATH=src python -m noma_prorl_bench.run --help`.
Writes OUTDIR/config.json, metrics.jsonl (one line per step, flushed), events.jsonl,
samples.jsonl, checkpoints/ (every --save_every steps and at the end) and, when the run
completes, summary.json. `--outdir OUTDIR --resume` continues a run from its last complete
checkpoint (see docs/reliability.md).

Exit codes: 0 done; 2 bad input (flags, --outdir, model path, checkpoint; nothing written);
3 stopped by the NaN guard (--on_nan stop; non-finite logits while sampling; no update applied
in the whole run); 130 / 143 / 129 / 138 stopped by SIGINT / SIGTERM / SIGHUP / SIGUSR1 after
writing a checkpoint (resumable), or during the warm start (nothing written).
"""

from __future__ import annotations

import json
import sys
from typing import Optional

from noma_prorl_bench.config import ConfigError, RunConfig, build_parser, make_config
from noma_prorl_bench.config.files import with_config_file, with_origin
from noma_prorl_bench.config.shell import command
from noma_prorl_bench.config.specs import RunSpecs

#: key -> the --config file that set it, for this process's run (an error about that value names the file)
CONFIG_ORIGINS: dict[str, str] = {}


def resolve_config(argv: Optional[list[str]], prog: str):
    """(cfg, checkpoint or None) from the command line; exits 2 (argparse-style) on bad flags."""
    parser = build_parser(prog)
    explicit = vars(parser.parse_args(argv))
    CONFIG_ORIGINS.clear()
    try:
        explicit = with_config_file(explicit, CONFIG_ORIGINS)  # --config FILE: its values under the flags given
        if explicit.get("resume"):
            from noma_prorl_bench.io.lock import release_held
            from noma_prorl_bench.io.resume import require_intact_log, resume_config

            cfg, ckpt = resume_config(explicit)  # takes the run lock before it reads the checkpoint
            try:
                require_intact_log(cfg, ckpt)  # metrics.jsonl holds steps 1..k exactly once
            except BaseException:
                release_held(cfg.outdir)
                raise
            return cfg, ckpt
        cfg = make_config(explicit)
        if cfg.task.startswith("jsonl:") and "n_val" not in explicit:  # what the file allows (tasks/jsonl.py)
            from noma_prorl_bench.tasks import jsonl_n_val  # noqa: PLC0415  (imports torch)

            cfg.n_val = jsonl_n_val(RunSpecs.from_config(cfg).task, cfg.n_val)
            print(
                f"{prog}: --n_val {cfg.n_val}: not given, so {cfg.task}'s split holds out a fifth of its distinct "
                f"prompts, at most 256 or the preset's n_val (config.json records it; pass --n_val to choose)",
                file=sys.stderr,
            )
        return cfg, None
    except ConfigError as e:
        parser.error(str(with_origin(e, CONFIG_ORIGINS)))
        raise  # unreachable


def main(argv: Optional[list[str]] = None, prog: str = "python -m noma_prorl_bench.run") -> int:
    cfg, ckpt = resolve_config(argv, prog)  # parse first: --help and flag errors never import torch
    try:
        return _main(cfg, ckpt, prog)
    finally:
        if ckpt is not None:  # the lock --resume took before reading, unless the run took it over
            from noma_prorl_bench.io.lock import release_held

            release_held(cfg.outdir)


# long: one flat list of the run's exit paths (each exception -> its one line and exit code)
def _main(cfg: RunConfig, ckpt, prog: str) -> int:
    from noma_prorl_bench.engines.local import build_trainer, run
    from noma_prorl_bench.io.checkpoint import CheckpointError
    from noma_prorl_bench.io.lock import RunLocked, lock_error
    from noma_prorl_bench.io.run_dir import check_inputs, check_outdir, run_dir_links
    from noma_prorl_bench.io.safe_files import RunDirRefused
    from noma_prorl_bench.training.guards import NonFiniteError, SetupStopped

    # the run directory's checks (lock, links, ownership, the checkpoint's digests; its log and identity were
    # checked by resolve_config) come before anything is built: the task, the model, the memory estimate
    err = (
        lock_error(cfg.outdir)
        or (run_dir_links(cfg.outdir) if ckpt else check_outdir(cfg))
        or (
            f"argument --resume: {ckpt.digest_error} (delete that checkpoint directory to resume from an older one)"
            if ckpt is not None and ckpt.digest_error
            else None
        )
        or check_inputs(cfg)
    )
    if err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        return 2
    if cfg.engine != "local":
        return main_ray(cfg, prog, ckpt)
    try:
        try:
            trainer, buffers = build_trainer(cfg, ckpt)  # nothing is written before this succeeds
        except CheckpointError as e:
            print(f"{prog}: error: argument --resume: {e}", file=sys.stderr)
            return 2
        except ConfigError as e:  # names its flag, e.g. --model (weights, tokenizer), and the file that set it
            print(f"{prog}: error: {with_origin(e, CONFIG_ORIGINS)}", file=sys.stderr)
            return 2
        except (ValueError, OSError) as e:  # e.g. an HF model directory that does not load
            print(f"{prog}: error: cannot set up the run: {e}", file=sys.stderr)
            return 2
        summary = run(cfg, ckpt, trainer, buffers)
    except (RunLocked, RunDirRefused) as e:  # another run took the outdir meanwhile; a symlinked run file
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    except NonFiniteError as e:
        print(_nonfinite_message(e, cfg, prog), file=sys.stderr)
        return 3
    except SetupStopped as e:  # during the warm start: nothing written yet
        print(_setup_stopped_message(e, cfg, ckpt, prog), file=sys.stderr)
        return 128 + e.signum
    except KeyboardInterrupt:
        print(
            f"{prog}: aborted. `{command(prog, '--outdir', cfg.outdir, '--resume')}` continues from the last "
            "complete checkpoint (if any)",
            file=sys.stderr,
        )
        return 130
    except Exception as e:  # disk full, file-size limit, a path gone read-only
        os_err = os_error(e)
        if os_err is None:
            raise
        print(write_failed(os_err, cfg, prog), file=sys.stderr)
        return 1
    if not summary["complete"]:
        print(_stopped_message(summary, cfg, prog), file=sys.stderr)
        return summary["exit_code"]
    if not cfg.quiet:
        print(json.dumps(summary), file=sys.stderr)
        if summary.get("validation"):
            from noma_prorl_bench.training.result import result_line

            print(result_line(summary["validation"]))  # stdout: the run's result in one line
    return 0


def os_error(e: BaseException) -> Optional[OSError]:
    """e as an OSError: itself, or an I/O error that a library reports as its own type
    (safetensors: "I/O error: No space left on device (os error 28)"); else None."""
    import re

    if isinstance(e, OSError):
        return e
    m = re.search(r"\(os error (\d+)\)", str(e))
    return OSError(int(m.group(1)), str(e).split(": ")[-1].split(" (os error")[0]) if m else None


def write_failed(e: OSError, cfg: RunConfig, prog: str) -> str:
    """One line for a failed write; removes this process's half-written checkpoint to free space."""
    import errno
    import glob
    import os
    import shutil

    for tmp in glob.glob(os.path.join(cfg.outdir, "checkpoints", f".tmp_step_*_{os.getpid()}")):
        shutil.rmtree(tmp, ignore_errors=True)
    from noma_prorl_bench.io.checkpoint import list_checkpoints

    full = e.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)
    ckpts = list_checkpoints(cfg.outdir) if os.path.isdir(cfg.outdir) else []
    kept = (
        f"the last complete checkpoint (step {ckpts[-1][0]}) is kept. {'Free some space' if full else 'Fix it'}, "
        f"then: {command(prog, '--outdir', cfg.outdir, '--resume')}"
        if ckpts
        else f"no checkpoint was written yet: {'free some space' if full else 'fix it'} and add --overwrite to "
        "start over"
    )
    return (
        f"{prog}: error: {'disk full' if full else 'cannot write'} ({e.strerror or e}) writing "
        f"{e.filename or cfg.outdir}; {kept}"
    )


def _nonfinite_message(e, cfg: RunConfig, prog: str) -> str:
    """The one line of a run stopped by non-finite values (both engines): the learner's NaN guard
    under --on_nan stop, or logits that cannot be sampled from."""
    from noma_prorl_bench.rollout.nonfinite import NonFiniteLogits

    why = "" if isinstance(e, NonFiniteLogits) else " (--on_nan stop)"
    return f"{prog}: stopped{why}: {e}. Outputs up to that step are in {cfg.outdir}"


def _setup_stopped_message(e, cfg: RunConfig, ckpt, prog: str) -> str:
    if ckpt is not None:
        again = command(prog, "--outdir", cfg.outdir, "--resume")
        return (
            f"{prog}: interrupted by {e.name} during the set-up (warm start); {cfg.outdir} is unchanged: "
            f"`{again}` continues from its checkpoint at step {ckpt.step}"
        )
    return (
        f"{prog}: interrupted by {e.name} during the set-up (warm start); there is no checkpoint yet and nothing "
        "was written: run the same command to start over"
    )


def _stopped_message(summary: dict, cfg: RunConfig, prog: str) -> str:
    again = f"Continue with: {command(prog, '--outdir', cfg.outdir, '--resume')}"
    if summary.get("no_updates"):
        return f"{prog}: error: {summary['reason']}; the run is not complete (summary.json says so)"
    if not summary.get("abandoned"):
        return (
            f"{prog}: interrupted by {summary['signal']} after step {summary['step']}; checkpoint written to "
            f"{summary['checkpoint']}. {again}"
        )
    if summary["checkpoint"] is None:
        return (
            f"{prog}: interrupted by {summary['signal']}; the running step was abandoned and there is no "
            f"checkpoint yet (--save_every N writes them): add --overwrite to start over"
        )
    return (
        f"{prog}: interrupted by {summary['signal']}; the running step was abandoned, the last checkpoint "
        f"({summary['checkpoint']}, step {summary['step']}) is kept. {again}"
    )


def main_ray(cfg: RunConfig, prog: str, ckpt=None) -> int:
    """--engine ray_colocated | ray_async. Exit codes: 0 done; 1 an actor died, hung past
    --actor_timeout or raised (outputs flushed, Ray shut down); 3 the NaN guard stopped the
    learner (--on_nan stop) or a generator's logits became non-finite; 130 / 143 / 129 / 138
    stopped by SIGINT / SIGTERM / SIGHUP / SIGUSR1 (cleaned up; --resume continues from the last
    --save_every checkpoint; during the set-up, Ray's start and the warm start, nothing is written,
    as in the local engine)."""
    from noma_prorl_bench.engines import EngineError, EngineStopped, run_engine
    from noma_prorl_bench.io.lock import RunLocked
    from noma_prorl_bench.io.safe_files import RunDirRefused
    from noma_prorl_bench.rollout.nonfinite import NonFiniteError
    from noma_prorl_bench.training.guards import SetupStopped

    try:
        summary = run_engine(cfg, ckpt)  # takes the run lock once its set-up is done
    except (RunLocked, RunDirRefused) as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    except NonFiniteError as e:  # a generator's logits, the learner's NaN guard: as local
        print(_nonfinite_message(e, cfg, prog), file=sys.stderr)
        return 3
    except SetupStopped as e:  # Ray's start, the actors, the warm start: nothing written
        print(_setup_stopped_message(e, cfg, ckpt, prog), file=sys.stderr)
        return 128 + e.signum
    except EngineError as e:
        print(f"{prog}: error: {e}\nOutputs up to the last finished step are in {cfg.outdir}", file=sys.stderr)
        return 1
    except EngineStopped as e:
        from noma_prorl_bench.io.checkpoint import list_checkpoints

        ckpts = list_checkpoints(cfg.outdir)
        again = (
            f"`{command(prog, '--outdir', cfg.outdir, '--resume')}` continues from its checkpoint at step "
            f"{ckpts[-1][0]}"
            if ckpts
            else "no checkpoint was written yet (--save_every N writes them)"
        )
        print(f"{prog}: {e}; outputs up to the last finished step are in {cfg.outdir}; {again}", file=sys.stderr)
        return 128 + e.signum
    if not cfg.quiet:
        print(json.dumps(summary), file=sys.stderr)
    return 0


if __name__ == "__main__":
    from noma_prorl_bench.config.code_specs import drop_script_dir

    drop_script_dir()  # `python -m` put the current directory on the import path
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # Ctrl-C while torch imports, before the run's own handling
        print(
            "python -m noma_prorl_bench.run: interrupted (SIGINT) before the run started; nothing written",
            file=sys.stderr,
        )
        sys.exit(130)
