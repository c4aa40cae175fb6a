"""How stored pages are named and laid out: the harness's own objects, or upstream SGLang's.

`harness`: one object per page, every part in layer_first order, then the integrity trailer.
`sglang`: the objects upstream SGLang 0.5.23's own clients write, so either side reads the
other's store. Their names and their split into objects are the backend's (`upstream_objects`:
Mooncake keeps K and V apart under `_k` / `_v`, the file store one `.bin` per page); their bytes are
a part's page in the byte order of the writer's host layout (`order`, upstream's server default
page_first); upstream writes no trailer, so by default none is written and a page read without one
is counted as unverified (its size is still checked).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hal.transfer.layouts import get_layout
from hicache_ref.storage.pages import OBJECT_ORDERS

KEY_SCHEMES = ("sglang", "harness")
DEFAULT_KEY_SCHEME = "sglang"
DEFAULT_OBJECT_ORDER = "page_first"  # upstream's server default host layout


@dataclass(frozen=True)
class ObjectFormat:
    """What a client's objects are: the key scheme, upstream's byte order, whether a trailer is
    written, and the identity upstream's names carry (model, backend tag, attention, TP rank)."""

    scheme: str = "harness"
    order: str = "layer_first"
    trailer: bool = True
    model: str = ""
    tag: str = ""
    attention: str = "mla"
    tp_rank: int = 0
    tp_size: int = 1

    def __post_init__(self):
        if self.scheme not in KEY_SCHEMES:
            raise ValueError(f"scheme: {self.scheme!r} is not one of {', '.join(KEY_SCHEMES)}")
        if self.order not in OBJECT_ORDERS:
            raise ValueError(f"order: {self.order!r} is not one of {', '.join(OBJECT_ORDERS)}")
        if self.attention not in ("mha", "mla"):
            raise ValueError(f"attention: {self.attention!r} is not 'mha' or 'mla'")
        if not get_layout(self.order).supports(self.attention):
            raise ValueError("order: page_head is an MHA layout (upstream has no MLA page_head pool)")
        for name in ("model", "tag"):
            value = getattr(self, name)
            if not isinstance(value, str) or any(c.isspace() for c in value) or not value.isprintable():
                raise ValueError(f"{name}: expected printable text without spaces, got {value!r}")
        if isinstance(self.tp_size, bool) or not isinstance(self.tp_size, int) or self.tp_size < 1 or \
                isinstance(self.tp_rank, bool) or not isinstance(self.tp_rank, int) or \
                not 0 <= self.tp_rank < self.tp_size:
            raise ValueError(f"tp_rank: expected 0 <= tp_rank < tp_size, got {self.tp_rank!r} of {self.tp_size!r}")

    @property
    def upstream(self) -> bool:
        return self.scheme == "sglang"

    @property
    def model_label(self) -> str:
        """The model name as upstream puts it in keys ('/' becomes '-')."""
        return "-".join(self.model.split("/"))


HARNESS = ObjectFormat()


def mooncake_names(fmt: ObjectFormat, page_key: str, parts: int) -> list[tuple[str, tuple[int, ...]]]:
    """Upstream MooncakeStore's objects of one page: `[tag_][model_]<hash>_<suffix>_k` (and `_v`
    for MHA), the suffix the TP rank for MHA and empty for MLA; each object one part."""
    prefix = "_".join(p for p in (fmt.tag, fmt.model_label) if p)
    base = f"{prefix}_{page_key}" if prefix else page_key
    suffix = "" if fmt.attention == "mla" else str(fmt.tp_rank)
    names = ("k", "v")[:parts]
    return [(f"{base}_{suffix}_{n}", (i,)) for i, n in enumerate(names)]


def file_names(fmt: ObjectFormat, page_key: str, parts: int) -> list[tuple[str, tuple[int, ...]]]:
    """Upstream HiCacheFile's object of one page: `<hash>_<model>` for MLA, `<hash>_<model>_<rank>_<size>`
    for MHA, K then V in one object."""
    name = f"{page_key}_{fmt.model_label}"
    if fmt.attention == "mha":
        name += f"_{fmt.tp_rank}_{fmt.tp_size}"
    if not _FILE_NAME.match(name):  # a file name in the store's directory, never a path
        raise ValueError(f"keys: {page_key!r} does not make a plain file name ({name!r})")
    return [(name, tuple(range(parts)))]


_FILE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,250}$")
