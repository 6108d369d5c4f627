"""Small helpers for end-to-end tests: run the CLI in-process and read its JSONL outputs."""

import json

from noma_prorl_bench.run import main


def read_jsonl(path):
    """A JSONL file -> list of dicts."""
    return [json.loads(line) for line in path.read_text().splitlines()]


#: metric key prefixes that differ between identical runs (wall times, memory)
VOLATILE = ("time/", "perf/")


def stable(rows):
    """Rows without their VOLATILE keys: what two identical runs must agree on."""
    return [{k: v for k, v in r.items() if not k.startswith(VOLATILE)} for r in rows]


def rl_rows(path):
    """metrics.jsonl's RL-step rows, after checking that it starts with the step-0 row (the
    evaluation before RL) and holds it once."""
    rows = read_jsonl(path)
    assert rows[0]["step"] == 0 and "reward/val" in rows[0] and all(r["step"] > 0 for r in rows[1:])
    return rows[1:]


def run_cli(tmp_path, fast_flags, *flags, name="run"):
    """Run `python -m noma_prorl_bench.run` in-process into tmp_path/name -> (metrics of the RL
    steps, events)."""
    out = tmp_path / name
    assert main(["--outdir", str(out), *fast_flags, *flags]) == 0
    return rl_rows(out / "metrics.jsonl"), read_jsonl(out / "events.jsonl")
