"""Backends: one file each, filling hal.backend's underscore hooks.

`emu` (CPU threads and real copies plus the modeled clock), `count` (prices plans on the modeled
clock, moves no bytes), `cuda` and `xpu` (torch.cuda; Kunlun XPUs under torch_xmlir). `support/`
holds what several backends share. hal.registry finds each file by the class it names
`BACKEND`; nothing outside this package names a backend class.
"""
