"""The sglang engine: SGLang's installed HiCache (UnifiedRadixCache, its tree core, its
cache controller and host pools, unmodified) replaying traces on the HAL.

The seam is the device layer only: kernel_shim (sgl_kernel.kvcacheio from hal.transfer),
pool_memory (host buffers from hal.memory, device buffers from the backend), tally (what moved).
`pin` names the SGLang release and says why it cannot run here; `engine.SGLangEngine` is the
engine as hicache_ref.engines picks it.
"""

from __future__ import annotations

from hicache_ref.engines.sglang.engine import SGLangEngine

ENGINE = SGLangEngine
