"""Entry point of one rank started by `commbench overlap --nproc N` (the config arrives as JSON)."""

import os
import sys

from commbench.launch import WORKER_CONFIG_ENV, require_launched
from commbench.overlap.config import OverlapConfig


def main() -> int:
    cfg = OverlapConfig.from_json(os.environ[WORKER_CONFIG_ENV])
    from commbench.overlap.measure import run_rank

    return run_rank(cfg, require_launched())


if __name__ == "__main__":
    sys.exit(main())
