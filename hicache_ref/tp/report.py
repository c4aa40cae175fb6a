"""The report of an SPMD run: the JSON keys `hicache spmd` prints, from every rank's figures.

`ranks`, `ops`, `consistent` (every rank's decision digest equal), `digest` (that digest, hex),
`host_bytes_total` (distinct host KV bytes behind all ranks' pools: a shared buffer counts
once), `d2h_bytes_by_rank`, `read_mismatches` (pages any rank read that differ from what was
written), `first_divergence` (null, or {`op`, `decisions`: {rank: decision}}), then details.
Nothing in it depends on timing: the same run gives the same JSON (wall times are the bench's).
"""

from __future__ import annotations

from hicache_ref.tp.workload import WorkloadConfig

KEYS = ("ranks", "ops", "consistent", "digest", "host_bytes_total", "d2h_bytes_by_rank", "read_mismatches",
        "first_divergence")


def _config(cfg: WorkloadConfig) -> dict:
    return {"seed": cfg.seed, "shared": cfg.shared, "free_list": cfg.free_list, "check_every": cfg.check_every,
            "write_policy": cfg.write_policy, "inject_divergence_at": cfg.inject_divergence_at,
            "geometry": {"attention": "mla", "layers": cfg.layers, "kv_dim": cfg.kv_dim, "dtype": "bf16",
                         "page_size": cfg.page_size, "l1_pages": cfg.l1_pages, "l2_pages": cfg.l2_pages}}


def report(cfg: WorkloadConfig, results: list[dict]) -> dict:
    """The report of a run every rank finished (`results`: run_rank's list, by rank)."""
    digests = {r["digest"] for r in results}
    pool_bytes = results[0]["host_pool_bytes"]
    out = {
        "ranks": len(results),
        "ops": cfg.ops,
        "consistent": len(digests) == 1,
        "digest": results[0]["digest"] if len(digests) == 1 else None,
        "host_bytes_total": pool_bytes if cfg.shared else pool_bytes * len(results),
        "d2h_bytes_by_rank": {str(r["rank"]): r["d2h_bytes"] for r in results},
        "read_mismatches": sum(r["read_mismatch_pages"] for r in results),
        "first_divergence": None,
        "reads_identical": len({r["read_digest"] for r in results}) == 1,
        "h2d_bytes_by_rank": {str(r["rank"]): r["h2d_bytes"] for r in results},
        "pages_read_by_rank": {str(r["rank"]): r["pages_read"] for r in results},
        "registered_bytes_by_rank": {str(r["rank"]): r["registered_bytes"] for r in results},
        "checks": results[0]["checks"],
        "host_pool": {k: v for k, v in results[0]["pool"].items() if k not in ("file_uid",)},
    }
    out.update(_config(cfg))
    return out


def divergence_report(cfg: WorkloadConfig, ranks: int, error) -> dict:
    """The report of a run the self-check stopped (`error`: the SpmdDivergence every rank raised)."""
    out = {"ranks": ranks, "ops": cfg.ops, "consistent": False, "digest": None, "host_bytes_total": None,
           "d2h_bytes_by_rank": None, "read_mismatches": None,
           "first_divergence": {"op": error.op, "what": error.what,
                                "decisions": {str(r): d for r, d in sorted(error.decisions.items())}}}
    out.update(_config(cfg))
    return out


def ok(rep: dict) -> bool:
    """Whether a run passed: consistent decisions, identical reads, no mismatching page."""
    return bool(rep["consistent"]) and not rep["read_mismatches"] and rep.get("reads_identical", True)
