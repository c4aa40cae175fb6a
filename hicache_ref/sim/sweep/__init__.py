"""Capacity sweeps: one trace replayed at L2 (`sweep_l2`) or L3 (`sweep_l3`) capacity after
capacity, and where the curve stops paying (`plateau`)."""
