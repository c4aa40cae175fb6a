"""Code shared by backends of one family (not a backend itself): `cudalike` for CUDA-like devices."""
