"""Code backends share (not a backend itself).

`modeled_clock` (a plan's modeled seconds on a profile's link, a stream's modeled clock: emu and
count), `cudalike` (the CUDA-like backend: plan execution, host registrars, runtime detection) and
`cuda_streams` (its torch.cuda streams and events with host-side D2H scatters).
"""
