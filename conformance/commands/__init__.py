"""Subcommands of `hicache`; each module: NAME, HELP, add_arguments(parser), run(args)."""
