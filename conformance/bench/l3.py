"""`hicache bench l3`: set/get throughput of 64-token MLA pages through each L3 backend, against a peer.

The peer moves the same bytes without the harness, in the same run; the ratio is the figure.
`digest GB/s` shows how much of the gap to the peer is integrity; a line a row splits the harness's
round into seal (the trailer digest) or verify, the backend call, and the Python between (the
rest, at least 0: a file set's seal runs beside its write, so there the parts overlap; a Mooncake
get's call includes the copy and digest of objects it reads in place, shown as a share).
The hit-rate gain of an L3 is conformance.bench.l3_hits (`hicache bench l3_hits`).
The method: docs/architecture.md, "Design notes"; the figures: BENCHMARKS.md.
"""

from __future__ import annotations

import os
import shutil
import statistics
import time

import numpy as np
import torch

from conformance.bench.common import emit, machine
from conformance.common import args as arg_types
from conformance.common import scratch
from conformance.common.errors import CliError, clip
from conformance.common.spec_options import add_spec_options
from hal.transfer.layouts import check_layout
from hal.transfer.seed import seed_geometry
from hicache_ref.core.pools import HostPool
from hicache_ref.storage import integrity
from hicache_ref.storage import pages as page_order
from hicache_ref.storage.integrity import DIGESTS

HELP = "L3 storage set/get throughput of seed-geometry pages per backend vs the same bytes moved directly"
GOAL = 0.9


def add_arguments(p) -> None:
    p.add_argument("--storage", action="append", default=None, metavar="SPEC",
                   help="backend to measure (repeatable); default: file in a temporary directory, and "
                        "mooncake:auto when the Mooncake wheel loads here")
    p.add_argument("--pages", type=arg_types.positive, default=32, help="pages set and got per round")
    p.add_argument("--batch", type=arg_types.positive, default=8, help="pages per set/get call")
    add_spec_options(p, "bench l3", filled=True)  # geometry, page size, profile as every command spells them
    p.add_argument("--host-layout", default="page_first_direct,layer_first",
                   help="host layouts (comma-separated) of the pool the pages come from and go to")
    p.add_argument("--digest", default="xxh3", help=f"integrity digest of the objects ({', '.join(DIGESTS)})")
    p.add_argument("--repeat", type=arg_types.positive, default=5, help="timed rounds; medians are reported")
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")


def check(a) -> None:
    """Bad options refused, naming the option, before anything runs."""
    if a.digest not in DIGESTS:
        raise CliError("--digest", f"{clip(repr(a.digest))} is not one of {', '.join(DIGESTS)}")
    geom = seed_geometry(layers=a.layers, kv_dim=a.kv_dim, page_size=a.page_size)
    for layout in a.host_layout.split(","):
        try:
            check_layout(layout, geom)
        except ValueError as e:
            raise CliError("--host-layout", clip(str(e).removeprefix("layout: "), 200)) from None
    from hicache_ref.storage.registry import split_spec, storage_class

    for spec in a.storage or []:
        try:
            storage_class(split_spec(spec)[0])
        except ValueError as e:
            raise CliError("--storage", clip(e, 200)) from None


MOONCAKE_MIN_SEGMENT = 16 << 20  # the client refuses a smaller segment ("Total size must be at least 16777216")


def mooncake_room(object_bytes: int, pages: int, batch: int) -> tuple[int, int, int, int]:
    """(segment, buffer) bytes a Mooncake client is given for one round, then the least it can do
    with: a round's objects and the peer's as many are stored at once (3x and 64 MiB leave
    headroom for the allocator), and a batch of objects is in flight (plus 8 MiB of slack)."""
    return 3 * pages * object_bytes + (64 << 20), batch * object_bytes + (8 << 20), \
        max(2 * pages * object_bytes, MOONCAKE_MIN_SEGMENT), batch * object_bytes


def default_specs(object_bytes: int, pages: int, batch: int) -> list[str]:
    from hicache_ref.storage.mooncake_cluster import unavailable_reason

    specs = ["file:" + scratch.make_dir("bench-l3-")]
    if unavailable_reason() is None:
        segment, buffer, _, _ = mooncake_room(object_bytes, pages, batch)
        specs.append(f"mooncake:auto,segment={segment},buffer={buffer}")
    return specs


def sized_spec(spec: str, object_bytes: int, pages: int, batch: int) -> str:
    """`spec` with the room a round needs: `mooncake:auto` (a cluster of this one client, so its
    segment is the whole store) gets segment= and buffer= where it names none, and is refused,
    naming --storage, where it names less. Other specs are the user's cluster, used as given."""
    from hicache_ref.storage.mooncake import SPEC_OPTIONS, MooncakeStorage
    from hicache_ref.storage.mooncake_cluster import AUTO
    from hicache_ref.storage.registry import parse_options, split_spec

    name, args = split_spec(spec)
    parts = [p.strip() for p in args.split(",")]
    if name != MooncakeStorage.name or parts[0] != AUTO:
        return spec
    opts = parse_options([p for p in parts[1:] if p], spec, SPEC_OPTIONS)  # as the store parses them
    segment, buffer, least_segment, least_buffer = mooncake_room(object_bytes, pages, batch)
    asked = spec  # the errors quote the spec as given, not with what is added here
    for key, given, least in (("segment", segment, least_segment), ("buffer", buffer, least_buffer)):
        if key not in opts:
            spec += f",{key}={given}"
        elif opts[key] < least:
            what = f"a round of {pages} objects of {object_bytes} bytes and the peer's as many" if key == "segment" \
                else f"a batch of {batch} objects of {object_bytes} bytes"
            raise ValueError(f"{asked}: {key}={opts[key]} cannot hold {what}: give {key}={given} (at least {least}), "
                             f"or fewer --{'pages' if key == 'segment' else 'batch'}")
    from hal.memory.budget import shortfall

    # the client maps its segment and buffer at start: refuse what this machine cannot hold first
    held = opts.get("segment", segment) + opts.get("buffer", buffer)
    if why := shortfall(held, "the Mooncake client's segment and buffer"):
        raise ValueError(f"{asked}: {why}")
    return spec


class _FilePeer:
    """Plain files: one write / readinto per page, in a sibling directory of the store's."""

    def __init__(self, store, data: torch.Tensor, page_bytes: int):
        self.dir = scratch.make_dir("bench-peer-")
        self.views = [memoryview(data[i * page_bytes : (i + 1) * page_bytes].numpy()) for i in range(len(data) // page_bytes)]

    def set(self, tag: str) -> None:
        for i, view in enumerate(self.views):
            with open(os.path.join(self.dir, f"{tag}-{i}"), "wb", buffering=0) as f:
                f.write(view)

    def get(self, tag: str) -> None:
        for i, view in enumerate(self.views):
            with open(os.path.join(self.dir, f"{tag}-{i}"), "rb", buffering=0) as f:
                f.readinto(view)

    def clean(self, tag: str) -> None:
        for i in range(len(self.views)):
            os.unlink(os.path.join(self.dir, f"{tag}-{i}"))

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


class _MooncakePeer:
    """The same Mooncake client, raw: batch_put_from / batch_get_into of whole objects (page and trailer
    bytes) on a registered buffer. Its fastest plain calls here: put_from / get_into one object a call,
    and the multi-buffer batch calls with one buffer an object, were no faster (BENCHMARKS.md)."""

    def __init__(self, store, data: torch.Tensor, page_bytes: int, batch: int):
        self.raw, self.batch = store._store, batch
        self.count = data.numel() // page_bytes
        self.object_bytes = page_bytes + integrity.TRAILER_BYTES  # the bytes of one harness object
        self.data = torch.zeros(self.count, self.object_bytes, dtype=torch.uint8)
        self.data[:, :page_bytes] = data.view(self.count, page_bytes)
        self.data = self.data.view(-1)
        if self.raw.register_buffer(self.data.data_ptr(), self.data.numel()) != 0:
            raise RuntimeError("mooncake peer: register_buffer failed")

    def _calls(self, tag: str):
        base = self.data.data_ptr()
        for lo in range(0, self.count, self.batch):
            idx = range(lo, min(lo + self.batch, self.count))
            yield [f"{tag}-{i}" for i in idx], [base + i * self.object_bytes for i in idx], [self.object_bytes] * len(idx)

    def set(self, tag: str) -> None:
        for keys, ptrs, sizes in self._calls(tag):
            if any(rc != 0 for rc in self.raw.batch_put_from(keys, ptrs, sizes)):
                raise RuntimeError("mooncake peer: batch_put_from failed")

    def get(self, tag: str) -> None:
        for keys, ptrs, sizes in self._calls(tag):
            if any(rc != self.object_bytes for rc in self.raw.batch_get_into(keys, ptrs, sizes)):
                raise RuntimeError("mooncake peer: batch_get_into failed")

    def clean(self, tag: str) -> None:
        self.raw.batch_remove([f"{tag}-{i}" for i in range(self.count)], True)

    def close(self) -> None:
        self.raw.unregister_buffer(self.data.data_ptr())


def _harness_clean(store, keys: list[str]) -> None:
    if store.name == "file":
        for key in keys:
            store._discard(key)
    elif store.name == "mooncake":
        store._store.batch_remove(keys, True)


class _Parts:
    """Wall seconds a round spends in the harness's own steps, timed on the store instance: seal
    (the trailer digest; the file store's runs beside its writes), verify (the digest check,
    scatter of staged pages), and the backend call (`_write` / `_read`: the client library or
    syscalls, which move the bytes)."""

    STEPS = {"seal": "_seal", "write": "_write", "read": "_read_digested", "verify": "_verify"}

    def __init__(self, store):
        self.store, self.seconds = store, dict.fromkeys(self.STEPS, 0.0)
        for step, attr in self.STEPS.items():
            setattr(store, attr, self._timed(step, getattr(store, attr)))

    def _timed(self, step, fn):
        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[step] += time.perf_counter() - t0
        return timed

    def take(self) -> dict:
        out, self.seconds = self.seconds, dict.fromkeys(self.STEPS, 0.0)
        return out

    def close(self) -> None:
        for attr in self.STEPS.values():
            self.store.__dict__.pop(attr, None)


def _time(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def throughput(store, geom, layout: str, pages: int, batch: int, repeat: int) -> dict:
    """Median seconds and GB/s of the harness and its peer for one backend and host layout."""
    src = HostPool(geom, pages * geom.page_size, layout, materialize=True)
    dst = HostPool(geom, pages * geom.page_size, layout, materialize=True)
    rng = np.random.default_rng(0)
    for buf in src.buffers:
        buf.view(torch.uint8).view(-1).copy_(torch.from_numpy(rng.integers(0, 256, buf.numel() * buf.element_size(),
                                                                         dtype=np.uint8)))
    store.register_host_pool(src)
    store.register_host_pool(dst)
    page_bytes = page_order.page_bytes(geom)
    data = torch.from_numpy(rng.integers(0, 256, pages * page_bytes, dtype=np.uint8))
    peer = _FilePeer(store, data, page_bytes) if store.name == "file" else \
        _MooncakePeer(store, data, page_bytes, batch) if store.name == "mooncake" else None
    times = {"set": [], "get": [], "peer_set": [], "peer_get": [], "digest": []}
    parts = _Parts(store)
    in_place = getattr(store, "in_place_reads", None)  # Mooncake: objects read from its own segment
    ok = True
    try:
        for r in range(repeat + 1):  # round 0 warms up
            keys = [f"bench-l3-{os.getpid()}-{layout}-{r}-{i}" for i in range(pages)]
            calls = [(keys[lo : lo + batch], list(range(lo, min(lo + batch, pages)))) for lo in range(0, pages, batch)]
            parts.take()
            t = {"set": _time(lambda c=calls: [ok_all(store.set(k, src, p)) for k, p in c])}
            t.update({f"set_{k}": v for k, v in parts.take().items() if k in ("seal", "write")})
            if peer:
                t["peer_set"] = _time(lambda rr=r: peer.set(f"peer-{os.getpid()}-{rr}"))
            t["get"] = _time(lambda c=calls: [ok_all(store.get(k, dst, p)) for k, p in c])
            t.update({f"get_{k}": v for k, v in parts.take().items() if k in ("read", "verify")})
            if peer:
                t["peer_get"] = _time(lambda rr=r: peer.get(f"peer-{os.getpid()}-{rr}"))
                peer.clean(f"peer-{os.getpid()}-{r}")
            t["digest"] = _time(lambda: [integrity.trailer(store.digest, "k", [data[i * page_bytes : (i + 1) * page_bytes]])
                                         for i in range(pages)])
            if r == 0:
                ok = all(torch.equal(a.view(torch.uint8), b.view(torch.uint8)) for a, b in zip(src.buffers, dst.buffers,
                                                                                             strict=True))
            _harness_clean(store, keys)
            if r:
                for k, v in t.items():
                    times.setdefault(k, []).append(v)
    finally:
        parts.close()
        if peer:
            peer.close()
        store.unregister_host_pool(src)
        store.unregister_host_pool(dst)
    nbytes = pages * page_bytes
    med = {k: statistics.median(v) for k, v in times.items() if v}
    row = {"bytes": nbytes, "verified": ok, **{f"{k}_seconds": v for k, v in med.items()},
           **{f"{k}_gbps": nbytes / v / 1e9 for k, v in med.items()}}
    for op in ("set", "get"):
        row[f"{op}_ratio"] = med[f"peer_{op}"] / med[op] if f"peer_{op}" in med else None
    # where a harness round goes (medians of the rounds): the rest is Python between the steps
    row["set_python_seconds"] = max(0.0, med["set"] - med["set_seal"] - med["set_write"])
    row["get_python_seconds"] = max(0.0, med["get"] - med["get_read"] - med["get_verify"])
    row["peer"] = None if peer is None else type(peer).__doc__.split(":")[0]
    if in_place is not None:  # the share of the gets' objects read in place rather than by the client
        row["get_in_place"] = (store.in_place_reads - in_place) / ((repeat + 1) * pages)
    return row


def ok_all(flags: list[bool]) -> None:
    if not all(flags):
        raise RuntimeError(f"bench l3: {flags.count(False)} of {len(flags)} pages failed")


def run(a) -> int:
    from hicache_ref.storage.integrity import TRAILER_BYTES
    from hicache_ref.storage.registry import open_storage

    geom = seed_geometry(layers=a.layers, kv_dim=a.kv_dim, page_size=a.page_size)
    page_bytes = page_order.page_bytes(geom)
    try:
        specs = [sized_spec(spec, page_bytes + TRAILER_BYTES, a.pages, a.batch) for spec in a.storage or []] or \
            default_specs(page_bytes + TRAILER_BYTES, a.pages, a.batch)
    except ValueError as e:
        raise CliError("--storage", clip(e, 300)) from None
    from hal.transfer import digestcopy

    result = {"machine": machine(), "digest_engine": digestcopy.engine(), "config": {"pages": a.pages, "batch": a.batch, "layers": a.layers,
              "kv_dim": a.kv_dim, "page_size": a.page_size, "page_bytes": page_bytes, "digest": a.digest,
              "repeat": a.repeat}, "goal_ratio": GOAL, "backends": {}}
    lines = [f"{a.pages} pages of {a.page_size}-token MLA ({a.layers} layers x {a.kv_dim}, bf16: "
             f"{page_bytes / 2**20:.2f} MiB a page) per round, {a.batch} a call, digest {a.digest} "
             f"({digestcopy.engine()}), "
             f"median of {a.repeat}",
             f"{'storage':<10}{'layout':<19}{'set GB/s':>9}{'peer':>7}{'ratio':>7}{'get GB/s':>10}{'peer':>7}"
             f"{'ratio':>7}{'digest GB/s':>13}  verified"]
    for spec in specs:
        try:
            store = open_storage(spec + (f",digest={a.digest}" if a.digest != "xxh3" else ""))
        except (ValueError, RuntimeError) as e:
            raise CliError("--storage", clip(e, 300)) from None
        label = spec if len(spec) < 40 else spec[:37] + "..."
        rows = {}
        try:
            for layout in a.host_layout.split(","):
                rows[layout] = r = throughput(store, geom, layout, a.pages, a.batch, a.repeat)

                def ratio(x):
                    return f"{x:>7.2f}" if x is not None else f"{'n/a':>7}"

                lines.append(f"{store.name:<10}{layout:<19}{r['set_gbps']:>9.2f}{r.get('peer_set_gbps', 0):>7.2f}"
                             f"{ratio(r['set_ratio'])}{r['get_gbps']:>10.2f}{r.get('peer_get_gbps', 0):>7.2f}"
                             f"{ratio(r['get_ratio'])}{r['digest_gbps']:>13.2f}  {r['verified']}")
                lines.append(f"{'':<10}{'  ms':<19}set: seal {r['set_seal_seconds'] * 1e3:.1f} + call "
                             f"{r['set_write_seconds'] * 1e3:.1f} + python {r['set_python_seconds'] * 1e3:.1f}"
                             f" (peer {r.get('peer_set_seconds', 0) * 1e3:.1f}); get: call "
                             f"{r['get_read_seconds'] * 1e3:.1f} + verify {r['get_verify_seconds'] * 1e3:.1f}"
                             f" + python {r['get_python_seconds'] * 1e3:.1f} (peer {r.get('peer_get_seconds', 0) * 1e3:.1f})"
                             + (f", {r['get_in_place']:.0%} in place" if "get_in_place" in r else ""))
        finally:
            store.close()
            if not a.storage and store.name == "file":  # the temporary directory default_specs made
                shutil.rmtree(store.directory, ignore_errors=True)
        result["backends"][label] = {"name": store.name, "peer": next(iter(rows.values()))["peer"], "layouts": rows}
    # The hit-rate / net-benefit gain of L3 on a trace is `hicache bench l3_hits` (conformance.bench.l3_hits).
    lines.append(f"goal: ratio >= {GOAL} (peer seconds / harness seconds for the same bytes)")
    emit(result, a.json, lines)
    return 0 if all(r["verified"] for b in result["backends"].values() for r in b["layouts"].values()) else 1
