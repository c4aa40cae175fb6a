"""Reports: a conformance run's verdict from junit.xml, its table and summary.json (`run_verdict`),
its report.json and report.html (`document`, `html*`, `target_rows`, `answer`), and the team pages of
advise, replay, sweep and ablate (`team_page`, `team_advise`, `team_results`)."""
