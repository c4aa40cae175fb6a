"""`hicache doctor`: host-side preflight checks (`checks`) and the advice drawn from them (`advice`)."""
