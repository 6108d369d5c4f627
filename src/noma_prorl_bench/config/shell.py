"""Commands the tool prints for a user to paste: they name the interpreter that is running
(`sys.executable`) or the installed `prorl-bench` script by its full path, and quote every
argument (shlex), so they work outside an activated virtual environment and with any path.

>>> import sys, shlex
>>> command("python -m noma_prorl_bench.run", "--outdir", "my runs/a").startswith(shlex.quote(sys.executable))
True
>>> command("python -m noma_prorl_bench.run", "--outdir", "my runs/a").endswith("--outdir 'my runs/a'")
True
"""

from __future__ import annotations

import os
import shlex
import sys

CONSOLE_SCRIPT = "prorl-bench"


def program(prog: str) -> str:
    """`prog` as a pasteable program: "python -m M" -> "/path/to/python -m M"; "prorl-bench CMD" ->
    "/path/to/bin/prorl-bench CMD" (the script beside the interpreter; without one,
    "/path/to/python -m noma_prorl_bench.cli CMD"); anything else unchanged."""
    if prog.startswith("python -m "):
        return shlex.quote(sys.executable) + prog[len("python") :]
    if prog == CONSOLE_SCRIPT or prog.startswith(CONSOLE_SCRIPT + " "):
        rest = prog[len(CONSOLE_SCRIPT) :]
        script = os.path.join(os.path.dirname(sys.executable), CONSOLE_SCRIPT)
        if os.path.isfile(script) and os.access(script, os.X_OK):
            return shlex.quote(script) + rest
        return f"{shlex.quote(sys.executable)} -m noma_prorl_bench.cli" + rest
    return prog


def command(prog: str, *args: str) -> str:
    """The full pasteable command line: program(prog) and the shell-quoted args."""
    return " ".join([program(prog), *(shlex.quote(str(a)) for a in args)])


def pip_install(*args: str) -> str:
    """ "/path/to/python -m pip install ARGS": installs into the environment that runs the tool."""
    return " ".join([shlex.quote(sys.executable), "-m", "pip", "install", *args])
