"""Entry point of one rank started by `commbench run --nproc N` (the config arrives as JSON)."""

import os
import sys

from commbench.config import RunConfig
from commbench.launch import WORKER_CONFIG_ENV, require_launched


def main() -> int:
    cfg = RunConfig.from_json(os.environ[WORKER_CONFIG_ENV])
    from commbench.sweep import run_rank

    return run_rank(cfg, require_launched())


if __name__ == "__main__":
    sys.exit(main())
