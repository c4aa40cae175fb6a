"""Target evaluation: every target of a profile gets a verdict (pass, fail, not_measured) on a
basis (measured on the backend under test in this run, or modeled from the profile with the
model's inputs named). `verdict` holds the row and the judging, `link`/`host` the measurers by
metric, `evaluate` the registry and the per-run context, `readings` the profile's readings as
modeled targets (the seed's measurements against the model's figures)."""
