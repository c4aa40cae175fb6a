"""The KV geometry node: attention kind, layers, heads, KV width, dtype and page size.

Defaults are the P800 seed geometry (hal.transfer.seed, its one definition), so byte counts and
modeled seconds are the ones that deployment would see.
"""

from __future__ import annotations

from dataclasses import dataclass

from hal.transfer.layouts import DTYPES, KVGeometry, parse_dtype
from hal.transfer.seed import SEED_GEOMETRY
from hicache_ref.spec.fields import ALL_COMMANDS, fail, one_of, param, parse_int, whole

MAX_LAYERS, MAX_PAGE_SIZE, MAX_DIM, MAX_HEADS = 4096, 1 << 16, 1 << 16, 1024
_SEED_DTYPE = next(name for name, dt in DTYPES.items() if dt == SEED_GEOMETRY.dtype)


GEOMETRY_COMMANDS = ALL_COMMANDS | {"plan", "advise"}  # plan counts one transfer of this geometry
SHAPE_COMMANDS = GEOMETRY_COMMANDS | {"bench transfer", "bench l3"}  # benchmarks that move seed-shaped KV
# every command that pages tokens
PAGE_COMMANDS = SHAPE_COMMANDS | {"bench replay", "bench memory", "bench sweep", "bench l3_hits", "trace stats"}


@dataclass(frozen=True)
class GeometrySpec:
    """One rank's KV: what a token costs in bytes and how it is paged."""

    PATH = "geometry"
    attention: str = param(SEED_GEOMETRY.attention, "--attention", "attention kind: mla (one latent KV head) or mha",
                           choices=("mla", "mha"), commands=GEOMETRY_COMMANDS)
    layers: int = param(SEED_GEOMETRY.layers, "--layers", f"model layers (at most {MAX_LAYERS:,})",
                        parse=parse_int(1, MAX_LAYERS), commands=SHAPE_COMMANDS)
    heads: int = param(SEED_GEOMETRY.heads, "--heads", "KV heads (MHA; MLA keeps one)", parse=parse_int(1, MAX_HEADS),
                       commands=GEOMETRY_COMMANDS)
    kv_dim: int = param(SEED_GEOMETRY.head_dim, "--kv-dim", "MLA latent width, or the head dim with --attention mha",
                        parse=parse_int(1, MAX_DIM), commands=SHAPE_COMMANDS)
    dtype: str = param(_SEED_DTYPE, "--dtype", "KV element type", choices=tuple(DTYPES),
                       commands=GEOMETRY_COMMANDS)
    page_size: int = param(SEED_GEOMETRY.page_size, "--page-size", f"tokens per page (at most {MAX_PAGE_SIZE:,})",
                           parse=parse_int(1, MAX_PAGE_SIZE), commands=PAGE_COMMANDS)
    model: str | None = param(None, "--model", "served model: a preset name (hicache_ref/models/catalog.py) or a "
                              "model YAML; sets the KV geometry of one rank of the TP group and, with the profile's "
                              "HBM and --mem-fraction-static, L1 as SGLang sizes its KV pool", metavar="MODEL",
                              shown_default="none: the geometry options", commands=ALL_COMMANDS | {"advise"})

    def __post_init__(self):
        if self.model is not None and (not isinstance(self.model, str) or not self.model):
            raise fail(self, "model", f"expected a preset name or a YAML path, got {self.model!r}")
        one_of(self, "attention", ("mla", "mha"))
        whole(self, "layers", 1, MAX_LAYERS)
        whole(self, "heads", 1, MAX_HEADS)
        whole(self, "kv_dim", 1, MAX_DIM)
        whole(self, "page_size", 1, MAX_PAGE_SIZE)
        one_of(self, "dtype", tuple(DTYPES))
        if self.attention == "mla" and self.heads != 1:
            raise fail(self, "heads", f"MLA keeps one latent KV head, got {self.heads}; --heads is for --attention mha")

    def kv(self) -> KVGeometry:
        """The hal geometry this node describes."""
        return KVGeometry(self.attention, self.layers, self.heads, self.kv_dim, parse_dtype(self.dtype), self.page_size)

    @property
    def token_bytes(self) -> int:
        return self.kv().token_bytes

    def config(self) -> dict:
        """The geometry as the figures report it (page size reported beside it)."""
        return dict(attention=self.attention, layers=self.layers, heads=self.heads, kv_dim=self.kv_dim,
                    dtype=self.dtype)


def unaligned_rows(geometry: GeometrySpec) -> str | None:
    """Why rows of `geometry` cannot be copied by upstream's kvcacheio ops (a token's row of a
    layer, heads x kv_dim x dtype, is moved in ITEM_ALIGN-byte words), or None."""
    from hal.transfer.kvcheck import ITEM_ALIGN

    item = geometry.kv().item_size
    if item % ITEM_ALIGN == 0:
        return None
    what = "heads x kv-dim x dtype" if geometry.attention == "mha" else "kv-dim x dtype"
    return (f"a token's row of a layer ({what}) is {item} bytes, not a multiple of the {ITEM_ALIGN} bytes "
            "upstream's copies move")
