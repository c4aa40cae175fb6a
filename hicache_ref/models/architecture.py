"""One served model's architecture: what a token's KV costs each rank, what the weights take of
HBM, and the FLOPs of a prefill.

MLA (DeepSeek-class) keeps one compressed latent per token and layer, identical on every TP rank;
MHA/GQA splits its KV heads over the ranks (replicated when there are fewer heads than ranks, as
SGLang does). FLOPs count multiply-adds twice: 2 x active parameters per token for the matrices, and
for causal attention 2 x heads x (qk dim + v dim) per layer for each earlier token attended.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

ATTENTIONS = ("mla", "mha")
KV_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float8_e4m3fn": 1}


@dataclass(frozen=True)
class ModelArch:
    """Architecture figures from a model's published config (config.json); `source` says which."""

    name: str
    attention: str  # mla | mha (GQA counts as mha with kv_heads < heads)
    layers: int
    kv_heads: int  # MHA: KV heads; MLA: 1 (the latent)
    kv_dim: int  # per stored KV head and token: MLA kv_lora_rank + rope dim; MHA the head dim
    # None where the model is not published (the seed's deployment): FLOPs and weights then unknown
    heads: int | None = None  # query heads
    qk_head_dim: int | None = None  # per query head: MLA nope + rope dims; MHA the head dim
    v_head_dim: int | None = None
    total_params: float | None = None
    active_params: float | None = None  # per token (MoE: the routed experts' share only)
    weight_bytes_per_param: float | None = None
    kv_dtype: str = "bfloat16"
    source: str = ""

    def __post_init__(self):
        if self.attention not in ATTENTIONS:
            raise ValueError(f"attention: expected one of {', '.join(ATTENTIONS)}, got {self.attention!r}")
        if self.kv_dtype not in KV_DTYPE_BYTES:
            raise ValueError(f"kv_dtype: expected one of {', '.join(KV_DTYPE_BYTES)}, got {self.kv_dtype!r}")
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name in _NUMBERS and (v is not None or f.name in _REQUIRED) and (
                    isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < 1e16):
                raise ValueError(f"{f.name}: expected a positive number, got {v!r}")
        if self.attention == "mla" and self.kv_heads != 1:
            raise ValueError(f"kv_heads: MLA keeps one latent KV head, got {self.kv_heads}")
        if self.active_params and self.total_params and self.active_params > self.total_params:
            raise ValueError(f"active_params: {self.active_params:g} exceeds total_params {self.total_params:g}")

    def kv_heads_per_rank(self, tp: int) -> int:
        """KV heads each of `tp` ranks stores: MLA's latent on every rank; MHA heads split, at least one.
        ValueError (`tp: ...`) for a TP SGLang cannot split the model over (split_over)."""
        self.split_over(tp)
        return 1 if self.attention == "mla" else max(1, self.kv_heads // tp)

    def split_over(self, tp: int) -> None:
        """ValueError unless SGLang's attention layers split over `tp` ranks: the query heads evenly
        (every attention class asserts heads % tp == 0), and MHA's KV heads evenly when there are at
        least as many as ranks, else replicated, each head on tp / kv_heads ranks."""
        _check_tp(tp)
        if self.heads is not None and self.heads % tp:
            raise ValueError(f"tp: model {self.name}'s {self.heads} attention heads do not split evenly over TP {tp} "
                             "(SGLang refuses it); give a TP that divides them")
        if self.attention == "mha" and (self.kv_heads % tp if self.kv_heads >= tp else tp % self.kv_heads):
            raise ValueError(f"tp: model {self.name}'s {self.kv_heads} KV heads neither split evenly over TP {tp} nor "
                             "replicate evenly across it (SGLang refuses it); give a TP that divides them or a "
                             "multiple of them")

    def token_kv_bytes(self, tp: int = 1) -> int:
        """KV bytes one token takes on one rank over all layers (MHA: K and V)."""
        sides = 1 if self.attention == "mla" else 2
        return self.layers * sides * self.kv_heads_per_rank(tp) * self.kv_dim * KV_DTYPE_BYTES[self.kv_dtype]

    def weight_bytes_per_rank(self, tp: int = 1) -> float:
        """Weight bytes each rank holds, the parameters split evenly over `tp` ranks."""
        _check_tp(tp)
        return self.known("total_params") * self.known("weight_bytes_per_param") / tp

    def known(self, name: str):
        """The field `name`, or ValueError saying the model does not publish it."""
        v = getattr(self, name)
        if v is None:
            raise ValueError(f"model {self.name}: {name} is not known (give a model YAML with it)")
        return v

    def geometry(self, tp: int = 1) -> dict:
        """The spec's geometry fields (hicache_ref.spec.geometry) for one rank of `tp`."""
        return dict(attention=self.attention, layers=self.layers, heads=self.kv_heads_per_rank(tp),
                    kv_dim=self.kv_dim, dtype=self.kv_dtype)

    def matrix_flops_per_token(self) -> float:
        """FLOPs of the weight matrices for one token (2 x active parameters)."""
        return 2.0 * self.known("active_params")

    def attention_flops_per_pair(self) -> float:
        """FLOPs of attending one token to one earlier token, over all layers (scores and values)."""
        return 2.0 * self.layers * self.known("heads") * (self.known("qk_head_dim") + self.known("v_head_dim"))

    def prefill_flops(self, tokens: int, cached: int = 0) -> float:
        """FLOPs to prefill `tokens` prompt tokens of which the first `cached` are cached: each new
        token at position p attends to p + 1 tokens (itself included)."""
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
            raise ValueError(f"tokens: expected a non-negative integer, got {tokens!r}")
        if isinstance(cached, bool) or not isinstance(cached, int) or not 0 <= cached <= tokens:
            raise ValueError(f"cached: expected an integer in 0..tokens ({tokens}), got {cached!r}")
        pairs = (tokens * (tokens + 1) - cached * (cached + 1)) // 2
        return self.matrix_flops_per_token() * (tokens - cached) + self.attention_flops_per_pair() * pairs


_REQUIRED = ("layers", "kv_heads", "kv_dim")
_NUMBERS = (*_REQUIRED, "heads", "qk_head_dim", "v_head_dim", "total_params", "active_params",
            "weight_bytes_per_param")


def _check_tp(tp) -> None:
    if isinstance(tp, bool) or not isinstance(tp, int) or not 1 <= tp <= 1024:
        raise ValueError(f"tp: expected an integer in 1..1024, got {tp!r}")
