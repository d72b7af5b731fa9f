"""Statistics over runs (torch-free): compare two runs, baselines and grading, history with change points."""
