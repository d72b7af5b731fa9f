"""Test infrastructure for multi-node tests: an emulated cluster of network namespaces
(`emulated.EmulatedCluster`) and a real Slurm cluster on top of it (`slurm.SlurmCluster`).

Fixtures live in `fixtures.py`; see its docstring for how tests use them.
"""
