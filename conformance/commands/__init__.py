"""Subcommands of `hicache`: module name = subcommand; each has HELP, add_arguments(parser), run(args)."""
