"""Benchmarks behind `hicache bench`: each module has HELP, add_arguments(parser), run(args)."""
