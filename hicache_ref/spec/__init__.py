"""The one description of a run: a tree of frozen specs, checked and resolved once when made.

- root: CacheSpec, the nodes plus the profile; cross-field rules; builds the HiCache.
- geometry, tiers, semantics (+ presets), storage, serving, tp: one node each.
- fields: each field's option metadata (conformance.common.spec_options makes the options) and
  SpecError, the one error (a ValueError naming the option and the field).
- sizing: upstream's L2 sizing; machine: a served model's KV per rank and L1 as SGLang sizes it;
  capacity_check: what a run would allocate, refused before it does.
- engine_support: Honoured / Refused, each engine's declaration of every field; presets_table: the
  presets as the markdown table in hicache_ref/README.md.
"""

from hicache_ref.spec.fields import SpecError
from hicache_ref.spec.geometry import GeometrySpec
from hicache_ref.spec.presets import PRESETS, SWITCHES, preset, register_preset
from hicache_ref.spec.root import MATERIALIZE_LIMIT_BYTES, NODES, CacheSpec
from hicache_ref.spec.semantics import SemanticsSpec
from hicache_ref.spec.serving import ServingSpec
from hicache_ref.spec.storage import StorageSpec
from hicache_ref.spec.tiers import MIN_GHOST_ENTRIES, TiersSpec
from hicache_ref.spec.tp import TPSpec

__all__ = ["MATERIALIZE_LIMIT_BYTES", "MIN_GHOST_ENTRIES", "NODES", "PRESETS", "SWITCHES", "CacheSpec",
           "GeometrySpec", "SemanticsSpec", "ServingSpec", "SpecError", "StorageSpec", "TPSpec", "TiersSpec",
           "preset", "register_preset"]
