"""Code backends share (not a backend itself).

`modeled_clock` (a plan's modeled seconds on a profile's link, a stream's modeled clock: emu and
count), `cudalike` (the CUDA-like backend: plan execution, host registrars, runtime detection),
`cuda_streams` (its torch.cuda streams and events with host-side D2H scatters), `copy_modes` (its
`descriptor` / `gather` choice), `vendor_ops` (the vendor's kvcacheio kernels behind the harness's
calling convention) and `inventory` (what each backend is here, for `hicache backends`).
"""
