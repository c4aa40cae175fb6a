"""Reports of a conformance run: the run's verdict from junit.xml, its table and summary.json (`run_verdict`)."""
