"""Measuring collectives on real ranks (imports torch when it runs).

Library, used by every driver:
  session.py    the process group, backend, device and placement of one rank; run.json's facts
  harness.py    rows, groups, buffers, warm-up, the timing loop, checking, gathering, the Record
  runner.py     around a driver's rows: run directory, watchdog, progress, failures, wrong data
  options.py    the run options of `commbench run` and `commbench overlap` (one module)
  timing.py, report.py, progress.py, placement.py, watchdog.py, faults.py, linkhealth.py
Drivers, peers that never import each other (the command chooses one):
  sweep.py      nccl-tests-style sweep           pairwise.py   the link matrix
  overlap.py    a GEMM beside a collective       diagnose.py   `commbench diagnose` on live ranks
Starting ranks: launch.py (torchrun, srun, local), worker.py (the one rank entry point and the
driver registry), slurm.py (`commbench submit` / `jobs`).
Not on ranks: calibrate.py times one device's compute for `commbench calibrate`, and
processor_json.py (no torch) turns those timings into a processor description.
"""
