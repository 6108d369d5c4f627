"""Small helpers for end-to-end tests: run the CLI in-process and read its JSONL outputs."""
import json

from noma_prorl_bench.run import main


def read_jsonl(path):
    """A JSONL file -> list of dicts."""
    return [json.loads(line) for line in path.read_text().splitlines()]


def run_cli(tmp_path, fast_flags, *flags, name="run"):
    """Run `python -m noma_prorl_bench.run` in-process into tmp_path/name -> (metrics, events)."""
    out = tmp_path / name
    assert main(["--outdir", str(out), *fast_flags, *flags]) == 0
    return read_jsonl(out / "metrics.jsonl"), read_jsonl(out / "events.jsonl")
