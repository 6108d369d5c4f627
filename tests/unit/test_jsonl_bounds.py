"""tasks/jsonl.py: the bounds on a task file, the --n_val a run without one gets, the longest prompt.

Each bound (file size, line length, JSON nesting, prompt and answer length) is refused before what
it bounds is read and named by its flag; fitted_n_val / make_config give the --n_val of a run
without one; the memory estimate is sized by the file's longest prompt."""

import json

import pytest

from noma_prorl_bench.config import ConfigError, make_config
from noma_prorl_bench.config.specs import RunSpecs
from noma_prorl_bench.io.memory import build_estimate
from noma_prorl_bench.io.memory_shape import model_shape, prompt_response_tokens
from noma_prorl_bench.tasks import jsonl, make_task
from noma_prorl_bench.tasks.jsonl import LIMITS, MAX_DEPTH, read_lines

pytestmark = pytest.mark.unit


def _write(path, records, extra=""):
    path.write_text(extra + "".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def _qa(n, start=0):
    return [{"prompt": f"{i}+1=", "answer": str(i + 1)} for i in range(start, start + n)]


def test_a_long_line_is_refused_by_max_line_bytes_before_it_is_parsed(tmp_path, monkeypatch):
    path = _write(tmp_path / "t.jsonl", _qa(3), extra=json.dumps({"prompt": "a" * 10_000_000, "answer": "b"}) + "\n")
    parsed = []
    monkeypatch.setattr(jsonl.json, "loads", lambda s: parsed.append(len(s)) or json.JSONDecoder().decode(s))
    with pytest.raises(ConfigError, match=r"t\.jsonl:1 is longer than --max_line_bytes 1,048,576 bytes") as e:
        read_lines(path, "prompt", "answer")
    assert e.value.flag == "max_line_bytes" and parsed == []


def test_max_line_bytes_is_exact_and_raising_it_lets_a_long_line_through(tmp_path):
    pad = {"prompt": "q", "answer": "a", "other": ""}
    pad["other"] = "x" * (2_000_000 - len(json.dumps(pad)))  # a 2,000,000-byte line, mostly ignored
    path = _write(tmp_path / "t.jsonl", [pad, *_qa(2)])
    with pytest.raises(ConfigError, match=r":1 is longer than --max_line_bytes"):
        read_lines(path, "prompt", "answer")
    with pytest.raises(ConfigError, match=r":1 is longer than --max_line_bytes 1,999,999"):
        read_lines(path, "prompt", "answer", max_line_bytes=1_999_999)
    examples = read_lines(path, "prompt", "answer", max_line_bytes=2_000_000)  # the newline is not counted
    assert [(e.prompt, e.answer) for e in examples] == [("q", "a"), ("0+1=", "1"), ("1+1=", "2")]


def test_deep_nesting_is_one_error_naming_the_line(tmp_path):
    deep = '{"prompt": ' + "[" * 100_000 + "]" * 100_000 + ', "answer": "a"}\n'
    path = _write(tmp_path / "t.jsonl", _qa(2), extra=deep)
    with pytest.raises(ValueError, match=r"t\.jsonl:1 nests JSON deeper than 64 levels"):
        read_lines(path, "prompt", "answer")
    with pytest.raises(ConfigError, match=r"argument --task: .*t\.jsonl:1 nests JSON deeper than 64 levels") as e:
        make_task(f"jsonl:{path}", n_val=1)
    assert str(e.value).count("\n") == 0
    nested = lambda k: "[" * k + "1" + "]" * k  # noqa: E731
    ok = _write(tmp_path / "ok.jsonl", _qa(2), extra=f'{{"prompt": {nested(MAX_DEPTH - 1)}, "answer": 2}}\n')
    assert read_lines(ok, "prompt", "answer")[0].prompt == nested(MAX_DEPTH - 1)  # not a string: turned into one
    too = _write(tmp_path / "too.jsonl", _qa(2), extra=f'{{"prompt": {nested(MAX_DEPTH)}, "answer": 2}}\n')
    with pytest.raises(ValueError, match="deeper than 64"):  # below Python's recursion limit
        read_lines(too, "prompt", "answer")


def test_a_file_over_max_task_bytes_is_refused_without_being_opened(tmp_path, monkeypatch):
    path = tmp_path / "big.jsonl"
    with open(path, "wb") as f:
        f.truncate(LIMITS["max_task_bytes"] + 1)  # sparse: no disk used
    opened = []
    monkeypatch.setattr(jsonl, "open", lambda *a, **k: opened.append(a), raising=False)
    with pytest.raises(
        ConfigError,
        match=r"big\.jsonl is 268,435,457 bytes, more than --max_task_bytes "
        r"268,435,456",
    ) as e:
        read_lines(str(path), "prompt", "answer")
    assert e.value.flag == "max_task_bytes" and opened == []
    small = _write(tmp_path / "s.jsonl", _qa(20))
    with pytest.raises(ConfigError, match="--max_task_bytes 100"):
        read_lines(small, "prompt", "answer", max_task_bytes=100)


def test_prompt_and_answer_lengths_are_bounded_in_characters(tmp_path):
    path = _write(tmp_path / "t.jsonl", [*_qa(2), {"prompt": "é" * 16_385, "answer": "1"}])
    with pytest.raises(
        ConfigError,
        match=r"t\.jsonl:3: the prompt is 16,385 characters long, more than "
        r"--max_prompt_chars 16,384",
    ) as e:
        read_lines(path, "prompt", "answer")
    assert e.value.flag == "max_prompt_chars"
    assert len(read_lines(path, "prompt", "answer", max_prompt_chars=16_385)) == 3
    path = _write(tmp_path / "a.jsonl", [*_qa(2), {"prompt": "q", "answer": "9" * 4_097}])
    with pytest.raises(
        ConfigError, match=r"a\.jsonl:3: the answer is 4,097 characters long, more than --max_answer_chars 4,096"
    ) as e:
        read_lines(path, "prompt", "answer")
    assert e.value.flag == "max_answer_chars"
    path = _write(tmp_path / "v.jsonl", [{"prompt": [1, 2], "answer": 3}])  # values as today
    assert [(e.prompt, e.answer) for e in read_lines(path, "prompt", "answer")] == [("[1, 2]", "3")]


def test_the_bound_flags_are_jsonl_only_and_positive(tmp_path):
    with pytest.raises(ConfigError, match="argument --max_prompt_chars: only applies to --task jsonl:PATH"):
        make_config({"outdir": "o", "max_prompt_chars": 10})
    path = _write(tmp_path / "t.jsonl", _qa(12))
    with pytest.raises(ConfigError, match="argument --max_line_bytes: must be a positive integer, got 0"):
        make_config({"outdir": "o", "task": f"jsonl:{path}", "max_line_bytes": 0})
    with pytest.raises(ConfigError, match="argument --max_answer_chars: .*more than --max_answer_chars 1 "):
        _fitted({"outdir": "o", "task": f"jsonl:{path}", "max_answer_chars": 1})  # read when n_val is fitted


def _fitted(explicit):
    """The config the run entry makes: make_config, then n_val fitted to the file when not given."""
    from noma_prorl_bench.tasks import jsonl_n_val

    cfg = make_config(explicit)
    if "n_val" not in explicit:
        cfg.n_val = jsonl_n_val(RunSpecs.from_config(cfg).task, cfg.n_val)
    return cfg


def test_the_run_entry_fits_n_val_and_says_so(tmp_path, capsys):
    from noma_prorl_bench.run import resolve_config

    path = _write(tmp_path / "t.jsonl", _qa(12))
    cfg, _ = resolve_config(["--outdir", str(tmp_path / "o"), "--task", f"jsonl:{path}"], "prog")
    assert cfg.n_val == 2 and "prog: --n_val 2: not given" in capsys.readouterr().err
    cfg, _ = resolve_config(["--outdir", str(tmp_path / "o"), "--task", f"jsonl:{path}", "--n_val", "5"], "prog")
    assert cfg.n_val == 5 and capsys.readouterr().err == ""


@pytest.mark.parametrize(
    "n, cap, want", [(2, 256, 1), (9, 256, 1), (12, 256, 2), (1000, 256, 200), (5000, 256, 256), (1000, 32, 32)]
)
def test_fitted_n_val_is_a_fifth_of_the_distinct_prompts(tmp_path, n, cap, want):
    path = _write(tmp_path / "t.jsonl", _qa(n) + _qa(n))  # each prompt twice
    assert (
        jsonl.fitted_n_val(
            RunSpecs.from_config(make_config({"outdir": "o", "task": f"jsonl:{path}", "n_val": 1})).task, cap
        )
        == want
    )


def test_n_val_is_fitted_only_when_not_given(tmp_path):
    path = _write(tmp_path / "t.jsonl", _qa(12))
    cfg = _fitted({"outdir": "o", "task": f"jsonl:{path}"})
    assert (
        cfg.n_val == 2
        and len(make_task(cfg.task, n_val=cfg.n_val, spec=RunSpecs.from_config(cfg).task).validation_set()) == 2
    )
    assert _fitted({"outdir": "o", "task": f"jsonl:{path}", "n_val": 5}).n_val == 5
    given = _fitted({"outdir": "o", "task": f"jsonl:{path}", "n_val": 12})
    with pytest.raises(ConfigError, match=r"argument --n_val: 12 leaves no training prompt: the file has 12 "):
        make_task(given.task, n_val=given.n_val, spec=RunSpecs.from_config(given).task)
    one = _write(tmp_path / "one.jsonl", [{"prompt": "q", "answer": "a"}] * 3)
    with pytest.raises(ConfigError, match=r"argument --task: the task file has 1 distinct prompt: it needs at least 2"):
        _fitted({"outdir": "o", "task": f"jsonl:{one}"})
    with pytest.raises(ConfigError, match="argument --task: cannot read"):
        _fitted({"outdir": "o", "task": f"jsonl:{tmp_path / 'missing.jsonl'}"})


def test_the_memory_estimate_is_sized_by_the_longest_prompt(tmp_path):
    """The longest prompt may be a training prompt none of a few random draws picks: every line counts."""

    def cfg_for(prompt_len):
        long_line = {"prompt": "1" * prompt_len, "answer": "2"}
        path = _write(tmp_path / f"p{prompt_len}.jsonl", [*_qa(2000), long_line])
        cfg = make_config({"outdir": "o", "task": f"jsonl:{path}", "n_val": 4, "max_prompt_chars": 10**6})
        assert long_line["prompt"] not in {
            e.prompt for e in make_task(cfg.task, 4, RunSpecs.from_config(cfg).task).validation_set()
        }
        return cfg

    sizes = {}
    for n in (100, 1_000, 10_000):
        sp = RunSpecs.from_config(cfg_for(n))
        P, T = prompt_response_tokens(sp)
        assert (P, T) == (n + 2, 5)  # <bos> prompt <sep>; "2000" + end token
        sizes[n] = build_estimate(sp, model_shape(sp, P + T), P, T).total
    assert sizes[100] < sizes[1_000] < sizes[10_000]
    assert sizes[10_000] - sizes[1_000] > 5 * (sizes[1_000] - sizes[100])  # activations grow with P


def test_the_transformer_holds_the_files_longest_prompt(tmp_path):
    """A jsonl task has no fixed prompt length: the position table covers its longest prompt (at
    least 512 rows, as before), so a long training prompt cannot overflow it mid-run."""
    from noma_prorl_bench.training.trainer import Trainer

    path = _write(tmp_path / "t.jsonl", [*_qa(11), {"prompt": "1" * 600, "answer": "2"}])
    short = _write(tmp_path / "s.jsonl", _qa(12))
    rows = {}
    for name, p in (("long", path), ("short", short)):
        cfg = _fitted(
            {
                "outdir": str(tmp_path / name),
                "task": f"jsonl:{p}",
                "model": "transformer",
                "warmstart_steps": 0,
                "batch_size": 2,
                "group_size": 2,
            }
        )
        rows[name] = Trainer.from_config(cfg).start().policy.max_len
    assert rows == {"long": 2 + 600 + 3, "short": 512}  # <bos> prompt <sep>, answer "11" + end
