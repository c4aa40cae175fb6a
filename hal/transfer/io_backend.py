"""How host KV is moved: upstream's two io backends, and what each changes before planning.

Upstream's `--hicache-io-backend` is `kernel` (transfer kernels) or `direct` (one copy per merged run).
`direct` also sorts layer_first host indices and turns page_first into page_first_direct.
`None` keeps the seed's behaviour; pricing lives in hal.backends.support.modeled_clock.
The rules: docs/architecture.md, "Design notes".
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
