"""`commbench diagnose`: finding bad nodes and links among many in a few concurrent rounds (torch-free).

strategy.py   screen, localise by adaptive group testing, confirm, report; written against a
              Tester that runs one round of disjoint groups (real ranks or a cluster model)
fleet.py      the cluster model (node/link rates, leaf switches, faults, noise) and the
              fleet-scale simulation with its baselines (round-robin pairwise, bisection)
hostlist.py   Slurm hostlist syntax: compress names for --exclude, expand a host list
"""
