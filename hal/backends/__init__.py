"""Backends: one file each (emu, cuda, xpu); cudalike holds what cuda and xpu share."""
