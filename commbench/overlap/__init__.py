"""Compute-communication overlap: profiler-trace analysis and the DDP demo that produces a trace."""
