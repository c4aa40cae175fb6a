"""Reports: a conformance run's verdict from junit.xml, its table and summary.json (`run_verdict`),
its report.json and report.html (`document`, `html*`, `target_rows`, `answer`), and the team pages of
advise, replay, sweep and ablate (`team_page`, `team_advise`, `team_results`). Beside them: the test
cases of a junit.xml (`junit_cases`), where the run ran (`environment`), the plots' numbers (`plot_data`),
report.json's schema (`report_schema`), and the two plugins conform loads into its pytest child
(`selection`: what the selection left out; `write_guard`: a report it cannot write is one line)."""
