"""Target evaluation: every target of a profile gets a judgment (pass, fail, not_measured) on a
basis (measured on the backend under test in this run, or modeled from the profile with the
model's inputs named). `judgment` holds the row and the judging (the row's `verdict` key; the run's
PASS/FAIL is conformance.report.run_verdict), `link_measurers`/`host_measurers` the measurers by
metric, `evaluate` the registry and the per-run context, `reading_rows` the profile's readings as
modeled targets (the seed's measurements against the model's figures)."""
