"""CUDA GPUs (NVIDIA; ROCm builds of torch too) through stock torch.cuda."""

from __future__ import annotations

import torch

from hal.backends.support.cudalike import CudaLikeBackend, kunlun_runtime_sign
from hal.backends.support.vendor_ops import VendorSearch


class CudaBackend(CudaLikeBackend):
    name = "cuda"

    @classmethod
    def vendor_search(cls) -> VendorSearch:
        """sgl-kernel's Python wrappers, `sgl_kernel.kvcacheio` (what SGLang's host pools call)."""
        return VendorSearch("sgl_kernel.kvcacheio")

    @classmethod
    def probe(cls) -> tuple[bool, str]:
        # A Kunlun XPU also answers as "cuda"; measuring it here would mislabel the hardware.
        sign = kunlun_runtime_sign()
        if sign:
            return False, f"the CUDA device here is a Kunlun XPU ({sign}); use the 'xpu' backend"
        if not torch.backends.cuda.is_built():
            return False, f"torch was built without CUDA (torch {torch.__version__})"
        if not torch.cuda.is_available():
            return False, "no CUDA device (torch.cuda.is_available() is False)"
        return True, ""


BACKEND = CudaBackend
