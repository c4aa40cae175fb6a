"""How host KV is moved: upstream's two io backends, and what each changes before planning.

SGLang's HiCache moves KV between device and host either with transfer kernels
(`--hicache-io-backend kernel`: one launch copies every item through index tables, no DMA
descriptors) or directly (`direct`: one copy per merged run, the descriptors
hal.transfer.plan counts). Choosing direct also changes the indices and the layout:
- with a layer_first host pool the host indices are sorted ascending first (the device
  indices follow the same permutation), so runs scattered in the request's order can merge;
- a page_first host pool becomes page_first_direct (upstream switches the layout, since a
  direct copy of page_first's token-major pages would be one run per token and layer).

`None` (the pools' and controller's default) keeps the seed's behaviour: the layout as given,
indices in the order given, priced per merged segment. Pricing per io backend lives in
hal.backends.support.modeled_clock (a plan with `kernel_items` set is a kernel copy).
"""

from __future__ import annotations

import numpy as np

from hal.transfer.layout_registry import get_layout

IO_BACKENDS = ("kernel", "direct")


def check_io_backend(name: str, value, allow_none: bool = True) -> None:
    """ValueError naming `name` unless `value` is one of IO_BACKENDS (or None where allowed)."""
    if value is None and allow_none:
        return
    if value not in IO_BACKENDS:
        raise ValueError(f"{name}: {value!r} is not one of {', '.join(IO_BACKENDS)}")


def effective_host_layout(layout, io_backend: str | None) -> str:
    """The name of the host layout a pool really uses under `io_backend` (the layout's
    `under`: page_first becomes page_first_direct with direct)."""
    return get_layout(layout).under(io_backend).name


def direct_order(layout, io_backend: str | None, host_indices: np.ndarray,
                 device_indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(host, device) indices as the io backend submits them: with direct and a layout that
    asks for it (`direct_sorted`: layer_first) the pairs sorted by host index (stable),
    otherwise as given."""
    if io_backend != "direct" or len(host_indices) < 2 or not get_layout(layout).direct_sorted:
        return host_indices, device_indices
    if (host_indices[1:] > host_indices[:-1]).all():  # already ascending: nothing to permute
        return host_indices, device_indices
    order = np.argsort(host_indices, kind="stable")
    return host_indices[order], device_indices[order]
