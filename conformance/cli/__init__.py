"""The `hicache` command: `main` builds the parser; one module per subcommand, each with HELP,
add_arguments(parser) and run(args) -> exit code. Subcommands parse and print; the logic lives
in hal, hicache_ref and the conformance subpackages."""
