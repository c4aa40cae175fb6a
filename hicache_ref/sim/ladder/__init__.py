"""The fix ladder: a ladder state as runs (`scenario`), one rung per fix on top of the previous
(`ablate`), and the seed scenario of a readings file (`seed_scenario`)."""
