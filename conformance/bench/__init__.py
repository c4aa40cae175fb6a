"""Benchmarks behind `hicache bench`: each module has HELP, add_arguments(parser), run(args).

`transfer`, `memory`, `replay` (with `replay_engine`, `replay_file_l3`, `replay_overhead`), `sweep`,
`l3` (with `l3_hits`), `spmd`; `common` holds medians, the machine's description and the output."""
