"""Entry point of one rank started by `commbench run --nproc N` (the config arrives as JSON)."""

import os
import sys

from commbench.config import RunConfig
from commbench.errors import CommbenchError
from commbench.launch import WORKER_CONFIG_ENV, require_launched


def main() -> int:
    cfg = RunConfig.from_json(os.environ[WORKER_CONFIG_ENV])
    env = require_launched()
    try:
        from commbench.sweep import run_rank

        return run_rank(cfg, env)
    except CommbenchError as exc:
        if env.rank == 0:  # one message, not one per rank
            print(f"commbench run: error: {exc}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
