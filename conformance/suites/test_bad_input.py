"""Bad input to any kvcacheio op: a ValueError naming the argument, and not one destination byte moved."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from conformance.suites import transfer_reference as ref

LAYERS, HEADS, HEAD_DIM, KV_DIM = 2, 2, 4, 8
PAGE = 4  # tokens per page
SIZE = 16  # token slots in every pool (4 pages)
DTYPE = torch.bfloat16
ITEM = HEADS * HEAD_DIM * 2  # 16 bytes, as is KV_DIM * 2 for MLA
LAYOUT_DIM = LAYERS * ITEM
DEV_SLOTS = [4, 5, 6, 7, 12, 13, 14, 15]  # device pages 1 and 3
HOST_SLOTS = [8, 9, 10, 11, 0, 1, 2, 3]  # host pages 2 and 0
PAGE_OPS = {"transfer_kv_per_layer_ph_lf", "transfer_kv_all_layer_lf_ph", "transfer_kv_direct",
            "transfer_kv_per_layer_direct_pf_lf", "transfer_kv_all_layer_direct_lf_pf"}
HOST_PAGE_OPS = {"transfer_kv_per_layer_direct_pf_lf": "src_indices", "transfer_kv_all_layer_direct_lf_pf": "dst_indices"}


def good_calls(mem) -> dict[str, dict]:
    """Keyword arguments of one valid call of every op (upstream argument names)."""
    gen = np.random.default_rng(7)

    def dev(dim=HEAD_DIM, heads=HEADS):
        return [ref.fill_random(mem.device((SIZE, heads, dim), DTYPE), gen) for _ in range(LAYERS)]

    def host(layout, attention):
        heads, dim = (HEADS, HEAD_DIM) if attention == "mha" else (1, KV_DIM)
        return ref.fill_random(mem.host(ref.host_shape(layout, attention, LAYERS, SIZE, heads, dim, PAGE), DTYPE), gen)

    k, v, k2, v2, lat = dev(), dev(), dev(), dev(), dev(KV_DIM, 1)
    lf, pf, pfd, ph = (host(x, "mha") for x in ("layer_first", "page_first", "page_first_direct", "page_head"))
    mlf, mpf, mpfd = (host(x, "mla") for x in ("layer_first", "page_first", "page_first_direct"))
    d, h = torch.tensor(DEV_SLOTS), torch.tensor(HOST_SLOTS)
    load = dict(src_indices=h, dst_indices=d)
    save = dict(src_indices=d, dst_indices=h)
    return {
        "transfer_kv_per_layer": dict(src_k=lf[0][1], dst_k=k[1], src_v=lf[1][1], dst_v=v[1], **load, item_size=ITEM),
        "transfer_kv_per_layer_pf_lf": dict(src_k=pf[0], dst_k=k[1], src_v=pf[1], dst_v=v[1], **load, layer_id=1,
                                            item_size=ITEM, src_layout_dim=LAYOUT_DIM),
        "transfer_kv_per_layer_ph_lf": dict(src_k=ph[0], dst_k=k[1], src_v=ph[1], dst_v=v[1], **load, layer_id=1,
                                            item_size=ITEM, src_layout_dim=LAYOUT_DIM, page_size=PAGE,
                                            head_num=HEADS),
        "transfer_kv_all_layer": dict(src_k_layers=k, dst_k_layers=list(lf[0]), src_v_layers=v,
                                      dst_v_layers=list(lf[1]), **save, item_size=ITEM, num_layers=LAYERS),
        "transfer_kv_all_layer_lf_pf": dict(src_k_layers=k, dst_k=pf[0], src_v_layers=v, dst_v=pf[1], **save,
                                            item_size=ITEM, dst_layout_dim=LAYOUT_DIM, num_layers=LAYERS),
        "transfer_kv_all_layer_lf_ph": dict(src_k_layers=k, dst_k=ph[0], src_v_layers=v, dst_v=ph[1], **save,
                                            item_size=ITEM, dst_layout_dim=LAYOUT_DIM, num_layers=LAYERS,
                                            page_size=PAGE, head_num=HEADS),
        "transfer_kv_per_layer_mla": dict(src=mlf[1], dst=lat[1], **load, item_size=ITEM),
        "transfer_kv_per_layer_mla_pf_lf": dict(src=mpf, dst=lat[1], **load, layer_id=1, item_size=ITEM,
                                                src_layout_dim=LAYOUT_DIM),
        "transfer_kv_all_layer_mla": dict(src_layers=lat, dst_layers=list(mlf), **save, item_size=ITEM,
                                          num_layers=LAYERS),
        "transfer_kv_all_layer_mla_lf_pf": dict(src_layers=lat, dst=mpf, **save, item_size=ITEM,
                                                dst_layout_dim=LAYOUT_DIM, num_layers=LAYERS),
        "transfer_kv_direct": dict(src_layers=k + v, dst_layers=k2 + v2, src_indices=d, dst_indices=h,
                                   page_size=PAGE),
        "transfer_kv_per_layer_direct_pf_lf": dict(src_ptrs=[pfd[0], pfd[1]], dst_ptrs=[k[1], v[1]], **load,
                                                   layer_id=1, page_size=PAGE),
        "transfer_kv_all_layer_direct_lf_pf": dict(src_ptrs=k + v, dst_ptrs=[pfd[0], pfd[1]], **save,
                                                   page_size=PAGE),
        # The MLA direct ops take [kv] host lists: the same op with one part.
        "transfer_kv_all_layer_direct_lf_pf[mla]": dict(src_ptrs=lat, dst_ptrs=[mpfd], **save, page_size=PAGE),
    }


def _op_name(key: str) -> str:
    return key.split("[")[0]


def _dst_names(args: dict) -> list[str]:
    """Every destination tensor argument, named as the ops name them (`dst_k`, `dst_layers[1]`)."""
    names = []
    for name, value in args.items():
        if name.startswith("dst") and name != "dst_indices" and not name.endswith("layout_dim"):
            if isinstance(value, (list, tuple)):
                names.extend(f"{name}[{i}]" for i in range(len(value)))
            else:
                names.append(name)
    return names


def _arg(args: dict, name: str) -> torch.Tensor:
    base, _, idx = name.partition("[")
    return args[base][int(idx[:-1])] if idx else args[base]


def _dst_tensors(args: dict) -> list[torch.Tensor]:
    return [_arg(args, n) for n in _dst_names(args)]


def _replace(args: dict, name: str, make) -> None:
    base, _, idx = name.partition("[")
    if idx:
        lst = list(args[base])
        lst[int(idx[:-1])] = make(lst[int(idx[:-1])])
        args[base] = lst
    else:
        args[base] = make(args[base])


def _shift_page(key: str, delta: int):
    def mutate(args, op):
        t = args[key].clone()
        t[-PAGE:] += delta  # a whole page, so page ops see consecutive, aligned slots out of range
        args[key] = t
        return key
    return mutate


def _set_first(key: str, value: int):
    def mutate(args, op):
        t = args[key].clone()
        t[0] = value
        args[key] = t
        return key
    return mutate


def _lengths_differ(args, op):
    args["dst_indices"] = args["dst_indices"][:-PAGE]
    return "dst_indices"


def _duplicate_dst(args, op):
    t = args["dst_indices"].clone()
    t[PAGE:] = t[:PAGE]
    args["dst_indices"] = t
    return "dst_indices"


def _index_dtype(args, op):
    args["src_indices"] = args["src_indices"].to(torch.int32)
    return "src_indices"


def _item_size(args, op):
    if "item_size" not in args:
        return None
    args["item_size"] *= 2
    return "item_size"


def _layout_dim(args, op):
    key = next((k for k in args if k.endswith("layout_dim")), None)
    if key is None:
        return None
    args[key] += ITEM  # one layer too many
    return "layout_dim"


def _page_size(args, op):
    if op not in HOST_PAGE_OPS and op not in ("transfer_kv_per_layer_ph_lf", "transfer_kv_all_layer_lf_ph"):
        return None
    args["page_size"] *= 2  # host tensors were made for PAGE
    return "page_size"


def _partial_page(args, op):
    if op not in PAGE_OPS:
        return None
    args["src_indices"], args["dst_indices"] = args["src_indices"][:-1], args["dst_indices"][:-1]
    return "src_indices"


def _unaligned_host_page(args, op):
    if op not in HOST_PAGE_OPS:
        return None
    key = HOST_PAGE_OPS[op]
    args[key] = args[key] + 1  # pages now start at slots 9 and 1: not page starts
    return key


def _page_not_consecutive(args, op):
    if op not in HOST_PAGE_OPS:
        return None
    args["dst_indices"] = args["dst_indices"].flip(0)
    return "dst_indices"


def _layer_id(args, op):
    if "layer_id" not in args:
        return None
    args["layer_id"] = LAYERS
    return "layer_id"


def _num_layers(args, op):
    if "num_layers" not in args:
        return None
    args["num_layers"] = LAYERS + 1
    return "num_layers"


def _dtype(args, op):
    name = _dst_names(args)[0]
    _replace(args, name, lambda t: torch.zeros_like(t, dtype=torch.float16))
    return name


def _device(args, op):
    # K on this backend's memory, V (or the last layer) on another device: 'meta' exists everywhere.
    name = _dst_names(args)[-1]
    _replace(args, name, lambda t: torch.empty_like(t, device="meta"))
    return name


MUTATIONS = {
    "index-lengths-differ": _lengths_differ,
    "src-index-out-of-range": _shift_page("src_indices", 4 * SIZE),
    "dst-index-out-of-range": _shift_page("dst_indices", 4 * SIZE),
    "src-index-negative": _set_first("src_indices", -1),
    "dst-index-negative": _set_first("dst_indices", -1),
    "dst-index-duplicate": _duplicate_dst,
    "index-not-int64": _index_dtype,
    "item-size-mismatch": _item_size,
    "layout-dim-mismatch": _layout_dim,
    "page-size-mismatch": _page_size,
    "partial-page-count": _partial_page,
    "host-page-not-aligned": _unaligned_host_page,
    "page-not-consecutive": _page_not_consecutive,
    "layer-id-out-of-range": _layer_id,
    "num-layers-mismatch": _num_layers,
    "dtype-mismatch": _dtype,
    "device-mismatch": _device,
}


# Cases hal.transfer.kvcacheio does not yet get right: strict xfail, so a fix shows as XPASS here.
KNOWN_GAPS: dict[tuple[str, str], str] = {}


class _CpuOnly:
    """Plain CPU tensors: enough to list ops and applicable cases without touching a backend."""

    def device(self, shape, dtype):
        return torch.empty(shape, dtype=dtype)

    host = device


def _cases() -> list:
    calls = good_calls(_CpuOnly())
    params = []
    for key, args in calls.items():
        for case, mutate in MUTATIONS.items():
            if mutate(dict(args), _op_name(key)) is None:
                continue  # e.g. no item_size argument, or not a page op
            gap = KNOWN_GAPS.get((_op_name(key), case))
            marks = [pytest.mark.xfail(strict=True, reason=f"hal.transfer.kvcacheio: {gap}")] if gap else []
            params.append(pytest.param(key, case, id=f"{key}-{case}", marks=marks))
    return params


OP_KEYS = list(good_calls(_CpuOnly()))
CASES = _cases()


def _snapshot(tensors) -> list[torch.Tensor]:
    return [t.detach().cpu().view(torch.uint8).clone() for t in tensors if t.device.type != "meta"]


def _call(kv, key: str, args: dict):
    return getattr(kv, _op_name(key))(**args)


@pytest.mark.parametrize("key", OP_KEYS)
def test_valid_call_moves_bytes(kv, kv_memory, key):
    # The baseline every bad-input case starts from must itself be accepted and do the copy.
    args = good_calls(kv_memory)[key]
    before = _snapshot(_dst_tensors(args))
    _call(kv, key, args).wait(60)
    after = _snapshot(_dst_tensors(args))
    assert any(not torch.equal(a, b) for a, b in zip(before, after, strict=True)), f"{key}: valid call moved no bytes"


@pytest.mark.parametrize("key, case", CASES)
def test_bad_input_names_argument_and_moves_nothing(kv, kv_memory, key, case):
    args = good_calls(kv_memory)[key]
    watched = _dst_tensors(args)  # the real destinations, before any is swapped out
    expected_name = MUTATIONS[case](args, _op_name(key))
    before = _snapshot(watched)
    with pytest.raises(ValueError, match=re.escape(expected_name)):
        _call(kv, key, args)
    kv_memory.synchronize()  # anything wrongly enqueued would have landed by now
    after = _snapshot(watched)
    for i, (b, a) in enumerate(zip(before, after, strict=True)):
        assert torch.equal(b, a), f"{key} with {case}: destination tensor {i} changed before the ValueError"


INT_ARGS = ("item_size", "src_layout_dim", "dst_layout_dim", "layer_id", "num_layers", "page_size", "head_num")
INT_CASES = [pytest.param(key, name, id=f"{key}-{name}") for key, args in good_calls(_CpuOnly()).items()
             for name in INT_ARGS if name in args]


@pytest.mark.parametrize("key, name", INT_CASES)
def test_numpy_integer_arguments_are_integers(kv, kv_memory, key, name):
    # One rule for every count and index argument: numpy ints are ints (a layer_id taken from
    # an array must work), bools are not (True is no layer 1): the test below.
    args = good_calls(kv_memory)[key]
    expected = good_calls(kv_memory)[key]
    args[name] = np.int64(args[name])
    _call(kv, key, args).wait(60)
    _call(kv, key, expected).wait(60)
    for got, want in zip(_snapshot(_dst_tensors(args)), _snapshot(_dst_tensors(expected)), strict=True):
        assert torch.equal(got, want), f"{key}: {name}=np.int64 moved other bytes than {name}=int"


@pytest.mark.parametrize("key, name", INT_CASES)
def test_bool_arguments_are_refused_naming_the_argument(kv, kv_memory, key, name):
    args = good_calls(kv_memory)[key]
    before = _snapshot(_dst_tensors(args))
    args[name] = True
    with pytest.raises(ValueError, match=rf"^{name}: True "):
        _call(kv, key, args)
    kv_memory.synchronize()
    assert all(torch.equal(b, a) for b, a in zip(before, _snapshot(_dst_tensors(args)), strict=True))


def _at_bound(t: torch.Tensor, bad: int, page_op: bool) -> torch.Tensor:
    """`t` with one index set to `bad`. Page ops get a whole page of consecutive slots ending
    (or starting) there, so only the bound, not the page shape, is wrong."""
    t = t.clone()
    if not page_op:
        t[-1 if bad >= 0 else 0] = bad
    elif bad >= 0:
        t[-PAGE:] = torch.arange(bad - PAGE + 1, bad + 1)
    else:
        t[:PAGE] = torch.arange(bad, bad + PAGE)
    return t


@pytest.mark.parametrize("bad", [SIZE, -1], ids=["at-slots", "minus-one"])
@pytest.mark.parametrize("name", ["src_indices", "dst_indices"])
@pytest.mark.parametrize("key", OP_KEYS)
def test_index_bounds_are_refused_by_the_argument_check(kv, kv_memory, monkeypatch, key, name, bad):
    # Exactly `slots` is the first index out of range: an off-by-one in the argument check
    # (`> n` for `>= n`) would leave the refusal to the plan check, which names no argument.
    def plan_reached(*a, **k):
        raise AssertionError(f"{key}: {name}={bad} got past the argument check to the plan")

    monkeypatch.setattr(kv, "plan_copy", plan_reached)
    args = good_calls(kv_memory)[key]
    args[name] = _at_bound(args[name], bad, _op_name(key) in PAGE_OPS)
    before = _snapshot(_dst_tensors(args))
    with pytest.raises(ValueError, match=rf"^{name}: index {bad} is outside \[0, {SIZE}\)$"):
        _call(kv, key, args)
    kv_memory.synchronize()
    assert all(torch.equal(b, a) for b, a in zip(before, _snapshot(_dst_tensors(args)), strict=True))
