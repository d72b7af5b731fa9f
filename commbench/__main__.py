"""`python -m commbench`: the same command line as `commbench` (torchrun and srun start ranks this way)."""

from commbench.cli import main

raise SystemExit(main())
