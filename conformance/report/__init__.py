"""Reports of a conformance run: the JUnit summary table and summary.json (`summary`)."""
