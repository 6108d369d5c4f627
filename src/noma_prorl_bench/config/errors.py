"""The error of a bad flag value or combination, and the "did you mean" of its message."""

from __future__ import annotations

import difflib


class ConfigError(ValueError):
    """A bad flag value or combination: `flag` names the offending flag (argparse-style, exit 2)."""

    def __init__(self, flag: str, message: str):
        super().__init__(f"argument --{flag}: {message}")
        self.flag = flag


def suggest(word: str, options, cutoff: float = 0.5) -> str:
    """' (did you mean X?)' for the closest option to a misspelt word, else ''. Leading dashes are
    left out of the comparison (they would make any two flags look alike)."""
    options = list(options)
    close = [o for o in options if o.startswith(word) and len(word.lstrip("-")) >= 3]
    if not close:
        bare = {o.lstrip("-"): o for o in options}
        close = [bare[c] for c in difflib.get_close_matches(word.lstrip("-"), list(bare), n=1, cutoff=cutoff)]
    return f" (did you mean {close[0]}?)" if close else ""
