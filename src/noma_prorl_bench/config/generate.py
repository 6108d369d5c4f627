"""Writes config/run_config.py, the flat `RunConfig`, from the spec tree (config/specs/).

`python -m noma_prorl_bench.config.generate` rewrites it; `--check` exits 1 when the file is not
what the tree gives (tests/unit/test_specs.py runs the same comparison). A new flag is declared in
its spec alone; this makes its RunConfig field.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from noma_prorl_bench.config import choices
from noma_prorl_bench.config.specs import SPECS
from noma_prorl_bench.config.specs.base import owned_fields

TARGET = Path(__file__).with_name("run_config.py")

HEAD = '''"""The flat run configuration: one field per flag, generated from the spec tree (config/specs/).

Do not edit: declare a flag in the spec that owns it and run `python -m noma_prorl_bench.config.generate`.
Each field's help, choices and checks are its spec's; the resolved values are config/fields.FlatConfig's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from noma_prorl_bench.config.choices import (
{imports}
)
from noma_prorl_bench.config.fields import FlatConfig


@dataclass
class RunConfig(FlatConfig):
    """Resolved configuration of one training run (written to OUTDIR/config.json)."""
'''


def _literal(value: object) -> str:
    if isinstance(value, str):
        return json.dumps(value)
    return repr(value)


def render() -> str:
    """The text of run_config.py for the current tree."""
    body, used = [], set()
    for cls in SPECS:
        module = cls.__module__.rsplit(".", 1)[-1]
        body.append(f"\n    # {cls.__name__} (config/specs/{module}.py)")
        for f in owned_fields(cls):
            ann = str(f.type).replace("'", '"')
            used |= {n for n in re.findall(r"\b[A-Z]\w+\b", ann) if hasattr(choices, n) and n != "Literal"}
            body.append(f"    {f.name}: {ann} = {_literal(f.default)}")
    imports = "\n".join(f"    {n}," for n in sorted(used, key=str.lower))
    return HEAD.format(imports=imports) + "\n".join(body) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    text = render()
    if "--check" in argv:
        current = TARGET.read_text() if TARGET.exists() else ""
        if current != text:
            print(f"{TARGET} is not what the spec tree gives: run python -m noma_prorl_bench.config.generate")
            return 1
        return 0
    TARGET.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
