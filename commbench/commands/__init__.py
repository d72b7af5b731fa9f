"""One module per `commbench` subcommand: each has HELP, add_arguments(parser) and main(args) -> int.

Command modules import heavy dependencies (torch, dash) inside main(), so `commbench --help` and
the modelling commands stay fast and work without torch.
"""
