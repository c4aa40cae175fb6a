"""The `hicache` command: `main` builds the parser and dispatches; one module per subcommand, each with
HELP, add_arguments(parser) and run(args) -> exit code. Beside them what every run shares: the strict
argparse (`strict_parser`), the one-line error reports (`error_lines`) and how a stopped run ends
(`run_ending`). `conform`'s parts: its argument checks (`conform_args`), its OUT folder (`out_folder`),
its pytest child (`pytest_child`), `--storage` (`conform_storage`); `plots` draws the figures of trace
stats, sweep and ablate; `reference` writes docs/cli.md from the parsers. Subcommands parse and print;
the logic lives in hal, hicache_ref and the conformance subpackages."""
