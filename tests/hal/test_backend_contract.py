"""The Backend contract: public methods validate and dispatch once, backends fill the hooks."""

import numpy as np
import pytest
import torch

from hal.backend import Backend, HostRegistration, Stream
from hal.transfer.plan import CopyGroup, Segments, TransferPlan


class _Stream(Stream):
    def record(self):
        raise NotImplementedError

    def wait_event(self, event):
        raise NotImplementedError

    def synchronize(self):
        return None


class _Recorder(Backend):
    """Records what reaches the hooks; device memory is whatever tensor is in `device_buffers`."""

    name = "recorder"
    stream_type = _Stream
    max_registration_bytes = 4096

    def __init__(self, fail_at=None):
        super().__init__(None)
        self.executed, self.registered, self.released, self.fail_at = [], [], [], fail_at
        self.device_buffers = []

    @classmethod
    def probe(cls):
        return True, ""

    def alloc_device(self, shape, dtype):
        t = torch.zeros(shape, dtype=dtype)
        self.device_buffers.append(t)
        return t

    def is_device(self, tensor):
        return any(tensor is t for t in self.device_buffers)

    def new_stream(self):
        return _Stream()

    def default_stream(self):
        return _Stream()

    def _execute(self, plan, stream):
        self.executed.append((plan.op, plan.direction))

    def _register_range(self, address, nbytes):
        if len(self.registered) == self.fail_at:
            raise OSError("injected")
        self.registered.append((address, nbytes))
        return address

    def _unregister_range(self, handle):
        self.released.append(handle)


def _plan(src, dst, offsets=(0,), lengths=(16,)):
    seg = Segments(np.array(offsets), np.array(offsets), np.array(lengths))
    return TransferPlan("t", [CopyGroup(src, dst, seg)])


def test_execute_checks_the_plan_and_sets_direction_before_the_hook():
    b = _Recorder()
    dev, host = b.alloc_device((64,), torch.uint8), torch.zeros(64, dtype=torch.uint8)
    b.execute(_plan(dev, host))
    b.execute(_plan(host, dev))
    b.execute(_plan(host, host.clone()))
    assert b.executed == [("t", "d2h"), ("t", "h2d"), ("t", "h2h")]
    with pytest.raises(ValueError, match="outside"):
        b.execute(_plan(host, dev, (60,), (16,)))
    with pytest.raises(ValueError, match="not a tensor"):
        b.execute(_plan(("host", 0), ("device", 0)))  # symbolic plans are refused unless runs_symbolic_plans
    with pytest.raises(ValueError, match="stream"):
        b.execute(_plan(host, dev), stream=object())
    assert len(b.executed) == 3  # nothing bad reached the hook


def test_register_host_splits_at_the_limit_and_unregisters_once():
    b = _Recorder()
    handle = b.register_host(1 << 20, 10_000)
    assert isinstance(handle, HostRegistration)
    assert b.registered == [(1 << 20, 4096), ((1 << 20) + 4096, 4096), ((1 << 20) + 8192, 1808)]
    b.unregister_host(handle)
    b.unregister_host(handle)  # a second unregister releases nothing twice
    assert sorted(b.released) == [a for a, _ in b.registered]
    with pytest.raises(ValueError, match="handle"):
        b.unregister_host((1 << 20, 10_000))
    with pytest.raises(ValueError, match="nbytes"):
        b.register_host(4096, True)


def test_register_host_failure_rolls_back_the_pieces_done():
    b = _Recorder(fail_at=2)
    with pytest.raises(OSError, match="injected") as info:
        b.register_host(1 << 20, 16_384)
    assert b.released == [(1 << 20) + 4096, 1 << 20]  # newest first
    assert any("rolled back" in n for n in info.value.__notes__)


def test_default_profile_is_a_backend_attribute():
    from conformance.plugin import default_profile_name
    from hal.backend import backend_class

    assert {n: backend_class(n).default_profile for n in ("emu", "count", "cuda", "xpu")} == \
        {"emu": "emu", "count": "emu", "cuda": None, "xpu": "p800"}
    assert [default_profile_name(n) for n in ("emu", "count", "cuda", "xpu")] == ["emu", "emu", None, "p800"]


def test_model_seconds_is_part_of_the_contract():
    from hal.backend import get_backend
    from hal.transfer.seed import seed_plan

    plan = seed_plan("page_first_direct")
    assert _Recorder().model_seconds(plan) is None  # no model: None, not 0
    assert get_backend("count", "p800").model_seconds(plan) == get_backend("emu", "p800").model_seconds(plan) > 0
