"""Replaying a trace through the cache: serial (`serial_replay`), served with requests in flight
(`served_replay`, `steps`), per TP group (`tp_replay`), HiCache off (`baseline`), the figures every
replay reports (`replay_figures`), many replays on worker processes (`replay_workers`), and the one
call that picks among them by the spec (`replay_dispatch`)."""
