"""The `hicache` command: `main` builds the parser and dispatches; one module per subcommand, each with
HELP, add_arguments(parser) and run(args) -> exit code. Beside them what every run shares: the strict
argparse (`strict_parser`), the one-line error reports (`error_lines`) and how a stopped run ends
(`run_ending`). Subcommands parse and print; the logic lives in hal, hicache_ref and the conformance
subpackages."""
