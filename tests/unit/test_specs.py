"""The spec tree (config/specs/) and the choice lists (config/choices.py).

Each flag is owned by one spec (its default, help, choices and checks); the flat RunConfig is
generated from the tree; specs built from a config hold its values, share their sub-specs and check
themselves; the stages take their spec and never the config; only the run's entries import
RunConfig. Each choice list is written once and is what the parser offers, what docs/flags.md lists
and what the implementing module uses.
"""

from __future__ import annotations

import ast
import dataclasses
import math
import re
from pathlib import Path

import pytest

from noma_prorl_bench.config import ConfigError, RunConfig, build_parser, generate, make_config
from noma_prorl_bench.config import choices as ch
from noma_prorl_bench.config.fields import field_docs, kl_metric_key
from noma_prorl_bench.config.specs import SPECS, KLSpec, ResetSpec, RunSpecs, owner
from noma_prorl_bench.config.specs.base import owned_fields

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "noma_prorl_bench"


def test_every_flag_has_exactly_one_owning_spec_with_its_help():
    owned = [f.name for cls in SPECS for f in owned_fields(cls)]
    assert len(owned) == len(set(owned)), sorted(n for n in owned if owned.count(n) > 1)
    assert owned == [f.name for f in dataclasses.fields(RunConfig)]  # RunConfig is the tree, in order
    docs = field_docs()
    assert [n for n in owned if not docs.get(n)] == []
    assert owner("soft_factor") is ResetSpec and owner("kl_estimator") is KLSpec


def test_runconfig_is_generated_from_the_tree():
    assert (SRC / "config" / "run_config.py").read_text() == generate.render()
    assert generate.main(["--check"]) == 0


def test_specs_built_from_a_config_hold_its_values_and_share_sub_specs():
    cfg = make_config(
        {
            "outdir": "x",
            "loss": "gspo",
            "kl_estimator": "simple",
            "reset_every": 3,
            "enable_growth": 1,
            "grow_every": 2,
            "lr": 3e-4,
            "eval_samples": 2,
            "temperature": 0.7,
        }
    )
    specs = RunSpecs.from_config(cfg)
    seen = {}

    def walk(spec):
        for f in dataclasses.fields(spec):
            v = getattr(spec, f.name)
            if "spec" in f.metadata:
                walk(v)
            else:
                assert v == getattr(cfg, f.name), (type(spec).__name__, f.name)
        seen.setdefault(type(spec), spec)
        assert seen[type(spec)] is spec  # one instance per spec class in a tree
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(spec, dataclasses.fields(spec)[0].name, None)

    for name in ("run", "task", "model", "warm_start", "rollout", "reference", "objective", "optimizer"):
        walk(getattr(specs, name))
    for name in ("critic", "resets", "growth", "evaluation", "engine", "checkpoints"):
        walk(getattr(specs, name))
    assert specs.objective.shape is specs.rollout.shape is specs.reference.shape
    assert specs.critic.optimizer is specs.optimizer and specs.critic.resets is specs.resets
    assert (specs.objective.eps_lo, specs.objective.eps_hi) == (3e-4, 4e-4)  # GSPO's, resolved
    assert (cfg.eps_lo, cfg.eps_hi, cfg.loss_agg_resolved) == (3e-4, 4e-4, "seq-mean-token-mean")
    kl = specs.objective.kl
    assert (kl.estimator, kl.placement, kl.reward_form, kl.anchor, kl.metric_key) == (
        "k1",
        "loss",
        "token",
        "ref",
        "kl/k1",
    )
    assert (specs.reference.mode, specs.reference.rows) == ("cached", cfg.batch_size * cfg.group_size)
    b = RunSpecs.from_config(make_config({"outdir": "x", "variant": "B", "kl_estimator": "k2"}))
    assert b.reference.mode == "none" and (b.objective.kl.estimator, b.objective.kl.anchor) == ("k2", "old")
    assert specs.optimizer.lr == 3e-4 and specs.resets.reset_every == 3 and specs.growth.grow_every == 2
    assert specs.optimizer.horizon == cfg.steps * cfg.ppo_epochs * cfg.minibatches
    assert specs.critic.critic_lr_resolved == 3e-4 and cfg.critic_lr_resolved == 3e-4


@pytest.mark.parametrize(
    "kwargs, flag, text",
    [
        ({"soft_factor": 2.0}, "soft_factor", "must be in [0, 1]"),
        ({"reset_kl_above": math.nan}, "reset_kl_above", "finite"),
        ({"stall_min_delta": math.inf}, "stall_min_delta", "finite"),
        ({"reset_every": 1.5}, "reset_every", "integer"),
        ({"opt_reset": "wipe"}, "opt_reset", "invalid choice"),
        ({"reset_opt_step": 2}, "reset_opt_step", "choose from 0, 1"),
    ],
)
def test_a_spec_made_in_python_checks_itself_as_the_command_line_does(kwargs, flag, text):
    with pytest.raises(ConfigError) as e:
        ResetSpec(**kwargs)
    assert e.value.flag == flag and text in str(e.value)
    cli = {k: (int(v) if k == "reset_every" else v) for k, v in kwargs.items()}
    if flag != "reset_every":
        with pytest.raises(ConfigError) as e2:
            make_config({"outdir": "x", **cli})
        assert e2.value.flag == flag


def test_the_kl_metric_key_is_derived_from_the_estimator():
    assert [kl_metric_key(e) for e in ch.KL_ESTIMATOR_CHOICES] == [
        "kl/k1" if e == "simple" else f"kl/{e}" for e in ch.KL_ESTIMATOR_CHOICES
    ]
    for e in ch.KL_ESTIMATOR_CHOICES:
        spec = RunSpecs.from_config(make_config({"outdir": "x", "kl_estimator": e})).objective.kl
        assert spec.metric_key == kl_metric_key(e)


def test_validate_holds_only_the_rules_that_span_two_specs():
    text = (SRC / "config" / "validate.py").read_text()
    assert len(text.splitlines()) <= 200
    # the per-flag rules are the specs': no range or choice check on a lone flag here
    assert "must be a positive integer" not in text and "invalid choice" not in text


def _params_and_attrs(path: Path) -> tuple[set[str], set[str]]:
    tree = ast.parse(path.read_text())
    params = {
        a.arg
        for n in ast.walk(tree)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
        for a in [*n.args.args, *n.args.kwonlyargs]
    }
    attrs = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    return params, attrs


@pytest.mark.parametrize(
    "rel",
    [
        "training/learner.py",
        "training/reset_loop.py",
        "training/growth_loop.py",
        "training/resets.py",
        "training/warmstart.py",
        "rollout/collector.py",
        "rollout/reference.py",
        "algorithms/kl_term.py",
        "algorithms/objective.py",
        "io/memory.py",
        "io/memory_shape.py",
        "tasks/__init__.py",
        "tasks/jsonl.py",
        "tasks/reasoning_gym.py",
        "tasks/custom.py",
        "training/setup.py",
    ],
)
def test_stages_take_their_spec_not_the_config(rel):
    params, attrs = _params_and_attrs(SRC / rel)
    assert "cfg" not in params and "cfg" not in attrs and "RunConfig" not in (SRC / rel).read_text()


def test_trainer_reads_the_config_only_in_from_config():
    tree = ast.parse((SRC / "training" / "trainer.py").read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Trainer")
    for fn in cls.body:
        if isinstance(fn, ast.FunctionDef) and fn.name != "from_config":
            reads = [
                n.attr
                for n in ast.walk(fn)
                if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "cfg"
            ]
            self_cfg = [
                n.lineno
                for n in ast.walk(fn)
                if isinstance(n, ast.Attribute) and n.attr == "cfg" and isinstance(n.ctx, ast.Load)
            ]
            assert reads == [] and self_cfg == [], (fn.name, reads, self_cfg)


#: the run's entries: the CLI and run entry (run.py, cli.py, engines/, io's run-directory, resume
#: and pre-flight checks), the suite, the Trainer's from_config, and config/ itself
ENTRIES = {
    "__init__.py",
    "run.py",
    "cli.py",
    "suite/planning.py",
    "engines/local.py",
    "io/run_dir.py",
    "io/resume.py",
    "io/preflight.py",
    "training/trainer.py",
}


def test_only_the_entries_import_runconfig():
    """Outside config/ and the entries, no module imports RunConfig or names it in code (an import,
    a `config.RunConfig` attribute, an annotation): analysis/ included."""
    importers = set()
    for p in SRC.rglob("*.py"):
        rel = p.relative_to(SRC).as_posix()
        if rel.startswith("config/"):
            continue
        for n in ast.walk(ast.parse(p.read_text())):
            if (
                isinstance(n, ast.ImportFrom)
                and any(a.name == "RunConfig" for a in n.names)
                or isinstance(n, ast.Attribute)
                and n.attr == "RunConfig"
                or isinstance(n, ast.Name)
                and n.id == "RunConfig"
            ):
                importers.add(rel)
    assert importers <= ENTRIES, importers - ENTRIES


# ------------------------------------------------------------------------ choice lists
def _flags_md_values(flag: str) -> list[str]:
    text = (ROOT / "docs" / "flags.md").read_text()
    m = re.search(rf"^\| `--{flag}` \| [^|]* \| ([^|]*) \|", text, re.M)
    assert m, flag
    return [v.strip() for v in m.group(1).split(",")]


@pytest.mark.parametrize("flag", sorted(ch.CHOICES))
def test_each_choice_list_is_the_parsers_and_the_docs(flag):
    values = list(ch.CHOICES[flag])
    action = next(a for a in build_parser()._actions if f"--{flag}" in a.option_strings)
    assert list(action.choices or []) == values
    assert _flags_md_values(flag) == values


def test_implementing_modules_use_the_one_choice_list():
    from noma_prorl_bench.algorithms import advantages, critic, losses
    from noma_prorl_bench.config import REF_CODES
    from noma_prorl_bench.models import static_decode
    from noma_prorl_bench.rollout import reference
    from noma_prorl_bench.training import critic as training_critic
    from noma_prorl_bench.training import growth, optim_state

    assert set(advantages.ADVANTAGES) | {critic.NAME} == set(ch.ADVS) and set(losses.LOSSES) == set(ch.LOSS_NAMES)
    assert losses.AGGREGATIONS is ch.AGGREGATIONS and ch.CHOICES["loss_agg"] == ("auto", *ch.AGGREGATIONS)
    assert reference.REF_MODES == (*ch.REF_COMPUTES, "none") and tuple(REF_CODES) == ch.REF_COMPUTES
    assert reference.REF_UPDATES is ch.REF_UPDATES
    assert optim_state.OPT_RESETS is ch.OPT_RESETS and optim_state.LR_SCHEDULES is ch.LR_SCHEDULES
    assert growth.MODES is ch.GROWTH_MIGRATIONS and static_decode.COMPILE_MODES is ch.COMPILE_DECODES
    assert training_critic.CRITIC_RESETS is ch.CRITIC_RESETS


def test_no_module_spells_a_choice_list_again():
    """No tuple or list literal of two or more strings outside config/ equals a choice list (or its
    tail): the values are imported, not written again."""
    lists = {tuple(v) for v in ch.CHOICES.values()} | {ch.AGGREGATIONS, ch.REPORT_TO, ch.REPORT_TO[1:]}
    bad = []
    for p in SRC.rglob("*.py"):
        rel = p.relative_to(SRC).as_posix()
        if rel == "config/choices.py":
            continue
        for n in ast.walk(ast.parse(p.read_text())):
            if (
                isinstance(n, (ast.Tuple, ast.List))
                and len(n.elts) >= 2
                and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in n.elts)
            ):
                values = tuple(e.value for e in n.elts)
                if values in lists:
                    bad.append(f"{rel}:{n.lineno}")
    assert bad == []


def test_report_to_names_are_the_validators_and_the_docs():
    """--report_to takes a comma list, so it has no parser `choices`: its one list is
    choices.REPORT_TO, which the validator uses and docs/flags.md names in full."""
    from noma_prorl_bench.config.specs import run

    assert run.REPORT_TO is ch.REPORT_TO
    row = next(line for line in (ROOT / "docs" / "flags.md").read_text().splitlines() if "`--report_to`" in line)
    assert all(re.search(rf"\b{name}\b", row) for name in ch.REPORT_TO)
    for name in ch.REPORT_TO:
        make_config({"outdir": "x", "report_to": name})
    with pytest.raises(ConfigError, match="report_to"):
        make_config({"outdir": "x", "report_to": "csv,mlflow"})


# ------------------------------------------------------------------------ names
def _top_level_names(tree: ast.Module) -> list[tuple[str, ast.stmt]]:
    out: list[tuple[str, ast.stmt]] = []
    for n in tree.body:
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.append((n.name, n))
        elif isinstance(n, ast.Assign):
            out += [(t.id, n) for t in n.targets if isinstance(t, ast.Name)]
        elif isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name):
            out.append((n.target.id, n))
    return out


#: public functions and classes defined in more than one module, each with why the name is kept
SHARED_NAMES = {
    "main": "each command module's entry point",
    # the course-assignment API: one module per edition, the course's names by design
    "compute_group_normalized_rewards": "grpo.py (2025 edition) and grpo2026.py (2026 edition)",
    "compute_policy_gradient_loss": "grpo.py (2025 edition) and grpo2026.py (2026 edition)",
    # same semantics in two layers that may not import each other
    "sha256_file": "hex sha256 of a file: models/get_model.py (GGUF) and io/checkpoint.py (no symlink)",
    "write_json": "io/run_dir.write_json is io/safe_files.write_json with the run directory's defaults",
    # the Ray engine's learner role: a Trainer (which holds a training.learner.Learner); Ray titles
    # its process ray::Learner, which the reaper and its tests look for
    "Learner": "training/learner.py (the update stage) and engines/learner_actor.py (the Ray actor)",
}


def test_one_semantics_per_public_function_name():
    """A public function or class name is defined in one module only (the two masked means are
    `grpo.masked_mean`, NaN on an empty mask, and `losses.masked_mean_or_zero`), SHARED_NAMES aside."""
    where: dict[str, list[str]] = {}
    for p in SRC.rglob("*.py"):
        for name, node in _top_level_names(ast.parse(p.read_text())):
            if not name.startswith("_") and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                where.setdefault(name, []).append(p.relative_to(SRC).as_posix())
    shared = {n: sorted(ms) for n, ms in where.items() if len(ms) > 1}
    assert set(shared) <= set(SHARED_NAMES), {n: shared[n] for n in set(shared) - set(SHARED_NAMES)}
    assert "masked_mean" in where and where["masked_mean"] == ["grpo.py"]


def test_metrics_alias_defined_once():
    """`Metrics` (a step's metrics dict type) is defined in io/metrics.py and imported elsewhere."""
    defined = [
        p.relative_to(SRC).as_posix()
        for p in SRC.rglob("*.py")
        for name, _ in _top_level_names(ast.parse(p.read_text()))
        if name == "Metrics"
    ]
    assert defined == ["io/metrics.py"]


def test_no_dead_public_names():
    """Every public module-level name of the package is used somewhere: in the package, the
    tests, benchmarks/ or scripts/ (as a name, an attribute, an import or a string such as an
    `__all__` entry), not only where it is defined."""
    files = [p for d in (SRC, ROOT / "tests", ROOT / "benchmarks", ROOT / "scripts") for p in d.rglob("*.py")]
    used: set[str] = set()
    defined: dict[str, str] = {}
    for p in files:
        tree = ast.parse(p.read_text())
        if p.is_relative_to(SRC):
            for name, _ in _top_level_names(tree):
                if not name.startswith("_"):
                    defined.setdefault(name, p.relative_to(SRC).as_posix())
        for n in ast.walk(tree):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
                used.add(n.id)
            elif isinstance(n, ast.Attribute):
                used.add(n.attr)
            elif isinstance(n, ast.alias):
                used.add(n.name)
            elif isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.isidentifier():
                used.add(n.value)
    assert {n: m for n, m in defined.items() if n not in used} == {}
