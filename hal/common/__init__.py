"""The bottom of hal, importing nothing else of it: argument checks every entry point shares
(`arg_checks`), sizes and counts as given on the command line (`units`), and the lookup-by-name rule of
the backend and store registries (`named_registry`)."""
