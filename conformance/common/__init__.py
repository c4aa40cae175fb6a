"""What the `hicache` command and the tools it runs (bench, doctor, calibrate, report) share:
the one-line error type, argparse types, input-file checks, progress on stderr and result files.
It sits below both, so tools never import the CLI."""
