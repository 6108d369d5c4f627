"""`python -m noma_prorl_bench.suite`: the suite command (suite/command.py)."""

import sys

from noma_prorl_bench.config.code_specs import drop_script_dir
from noma_prorl_bench.suite.command import main

if __name__ == "__main__":
    drop_script_dir()  # `python -m` put the current directory on the import path
    sys.exit(main())
