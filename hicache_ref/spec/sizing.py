"""Host (L2) pool size from `--hicache-ratio` / `--hicache-size`, computed as upstream does.

Upstream sizes each rank's host pool in HostKVCache.__init__ (mem_cache/memory_pool_host.py).
The rule (bytes per token, tokens, page alignment, the two checks): hicache_ref/README.md, "Design notes".
Figures are per rank.
"""

from __future__ import annotations

import math

DEFAULT_HICACHE_RATIO = 2.0  # server_args.hicache_ratio
HOST_MEMORY_RESERVE_BYTES = 10 * 2**30  # left free for the OS and other processes


def host_tokens(device_tokens: int, page_size: int, token_bytes: int, ratio: float | None = None,
                size_gb: int | None = None) -> int:
    """The host pool's tokens for a device pool of `device_tokens` (steps 1-3 above): from
    `size_gb` if given (it overrides `ratio`, as upstream), else from `ratio` (default 2.0)."""
    for name, v in (("device_tokens", device_tokens), ("page_size", page_size), ("token_bytes", token_bytes)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name}: expected a positive integer, got {v!r}")
    if size_gb is not None:
        if isinstance(size_gb, bool) or not isinstance(size_gb, int) or size_gb < 1:
            raise ValueError(f"size_gb: expected a positive whole number of GB, got {size_gb!r}")
        tokens = int(size_gb * 10**9 // token_bytes)
    else:
        ratio = DEFAULT_HICACHE_RATIO if ratio is None else ratio
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not math.isfinite(ratio) or ratio <= 0:
            raise ValueError(f"ratio: expected a positive number, got {ratio!r}")
        tokens = int(device_tokens * ratio)
    return (tokens // page_size + 1) * page_size


def check_host_larger(host: int, device: int) -> None:
    """Step 4: ValueError unless the host pool holds more tokens than the device pool."""
    if host <= device:
        raise ValueError(f"host pool of {host:,} tokens is not larger than the device pool of {device:,} tokens "
                         "(upstream requires it)")


def check_host_memory(requested_bytes: int, available_bytes: int) -> None:
    """Step 5: ValueError if `requested_bytes` exceed `available_bytes` less the 10 GiB reserve."""
    free = available_bytes - HOST_MEMORY_RESERVE_BYTES
    if requested_bytes > free:
        raise ValueError(f"host pool of {requested_bytes / 1e9:.2f} GB exceeds the {max(free, 0) / 1e9:.2f} GB "
                         "available after upstream's 10 GiB reserve")


def mem_available(meminfo: str = "/proc/meminfo") -> int | None:
    """MemAvailable in bytes (what psutil reports as available on Linux), or None if unknown."""
    try:
        with open(meminfo) as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None
