"""PyTorch profiler traces: streaming a chrome trace, interval sets, the overlap analysis and its
stored form (torch-free), and the DDP demo that produces a trace (the one module that uses torch)."""
