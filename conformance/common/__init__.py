"""What the `hicache` command and the tools it runs (bench, doctor, calibrate, report) share:
the one-line error type, argparse types, input-file checks (a pipe or FIFO read once: streamed),
progress on stderr and result files, every one written safely (safe_write).
It sits below both, so tools never import the CLI."""
