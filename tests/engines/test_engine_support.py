"""Every spec field is declared, per engine, honoured or refused with the reason; an engine refuses
what it does not run in one line naming the option, and an undeclared option given a value."""

from __future__ import annotations

import dataclasses
import re

import pytest

from conformance.cli.main import main
from hicache_ref.engines import ENGINES, refusal, support_table
from hicache_ref.spec import CacheSpec
from hicache_ref.spec.engine_support import Honoured, Refused, first_refusal, spec_fields, undeclared

TABLE_FILE = {"reference": "hicache_ref/engines/reference_support.py", "sglang": "hicache_ref/engines/sglang/support.py"}


@pytest.mark.parametrize("engine", ENGINES)
def test_every_spec_field_is_honoured_or_refused_by_every_engine(engine):
    missing = undeclared(support_table(engine))
    assert not missing, "\n".join(
        f"{TABLE_FILE[engine]}: SUPPORT declares nothing for spec field {f.path!r} ({f.option}); add\n"
        f'    "{f.path}": Honoured("how the {engine} engine runs it"),\n'
        f'or, where the {engine} engine has no setting for it,\n'
        f'    "{f.path}": Refused("why, and what to give instead"),'
        for f in missing)


@pytest.mark.parametrize("engine", ENGINES)
def test_no_engine_declares_a_field_the_spec_does_not_have(engine):
    paths = {f.path for f in spec_fields()}
    stale = [p for p in support_table(engine) if p not in paths]
    assert not stale, f"{TABLE_FILE[engine]}: SUPPORT declares {stale}, which the spec no longer has: delete them"
    assert all(isinstance(s, (Honoured, Refused)) for s in support_table(engine).values())


def test_the_field_list_is_every_option_of_the_spec():
    fields = {f.path: f.option for f in spec_fields()}
    assert fields["tiers.l1_tokens"] == "--l1-tokens" and fields["profile"] == "--profile"
    assert fields["semantics.preset"] == "--semantics" and fields["tp.ranks"] == "--tp"
    assert "semantics.overrides" not in fields and "backend" not in fields  # not options


def test_an_undeclared_option_given_a_value_is_refused_naming_it():
    table = dict(support_table("sglang"))
    del table["serving.step_ms"]
    assert first_refusal("sglang", table, CacheSpec()) is None  # left at its default: nothing to run
    why = first_refusal("sglang", table, CacheSpec.of(step_ms=45, concurrency=2))
    assert why == "--step-ms: the sglang engine does not declare whether it runs this option"


@pytest.mark.parametrize("fields, option", [
    (dict(ghost=True), "--ghost"),
    (dict(tp=2, shared_host=True), "--shared-host"),
    (dict(hit_count="per_insert"), "--hit-count"),
    (dict(free_list="upstream_l1"), "--free-list"),
    (dict(load_back_quota=64), "--load-back-quota"),
    (dict(semantics="seed"), "--semantics"),
    (dict(l3="model:"), "--l3"),
    (dict(attention="mha", heads=3, kv_dim=3, dtype="bf16"), "--kv-dim"),
])
def test_sglang_refuses_what_it_cannot_honour_naming_the_option(fields, option):
    why = refusal("sglang", CacheSpec.of(**fields))
    assert why is not None and why.startswith(f"{option}: ") and "\n" not in why
    assert refusal("reference", CacheSpec.of(**fields)) is None


def test_sglang_runs_upstreams_write_policies_and_layouts_and_refuses_the_references_own(monkeypatch):
    """A write policy or a host layout added to the reference alone is refused on the sglang
    engine, naming its option, rather than handed to SGLang, which has no such setting."""
    from hal.transfer import layout_registry
    from hal.transfer.layouts.layer_first import LayerFirst
    from hicache_ref.core import policy
    from hicache_ref.engines.sglang import support

    for name in policy.POLICIES:
        assert refusal("sglang", CacheSpec.of(write_policy=name)) is None
    for name in layout_registry.layout_names("mla"):
        assert refusal("sglang", CacheSpec.of(host_layout=name, io_backend="kernel")) is None
    monkeypatch.setattr(support, "UPSTREAM_WRITE_POLICIES", ("write_back", "write_through"))
    why = refusal("sglang", CacheSpec.of(write_policy="write_through_selective"))
    assert why.startswith("--write-policy: SGLang ") and "write_through_selective" in why

    class ReferencesOwn(LayerFirst):
        name = "references_own_layout"

        def ops(self, geom):
            return None

    # registered for this test only, as tests/hal/test_layout_registry.py does
    monkeypatch.setattr(layout_registry.REGISTRY, "_classes", dict(layout_registry.REGISTRY._classes))
    monkeypatch.setattr(layout_registry, "_instances", dict(layout_registry._instances))
    layout_registry.register_layout(ReferencesOwn)
    spec = CacheSpec.of(host_layout="references_own_layout")
    assert refusal("sglang", spec).startswith("--host-layout: SGLang ")
    assert refusal("reference", spec) is None


def test_a_switch_is_upstreams_decision_unless_given_against_the_preset():
    # a preset's own value is the reference's model: the engine runs upstream's decision
    assert refusal("sglang", CacheSpec.of(semantics="reference", write_policy="write_back")) is None
    # given, and upstream's own value: accepted; given, another value: refused
    assert refusal("sglang", CacheSpec.of(semantics="sglang-0.5.23", hit_count="per_request_insert")) is None
    assert refusal("sglang", CacheSpec.of(hit_count="per_request_insert")) is None
    assert refusal("sglang", CacheSpec.of(semantics="sglang-0.5.23", evict_size="whole")).startswith("--evict-size: ")


@pytest.mark.parametrize("args, option", [(["--ghost"], "--ghost"), (["--hit-count", "per_insert"], "--hit-count")])
def test_replay_on_sglang_refuses_an_option_in_one_line_before_anything_runs(capsys, args, option):
    assert main(["replay", "--engine", "sglang", "--limit", "2", "--quiet", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"hicache: {option}: ") and err.count("\n") == 1


def test_a_declaration_names_a_reason_where_it_refuses():
    for engine in ENGINES:
        for path, s in support_table(engine).items():
            if isinstance(s, Refused):
                assert s.why.strip(), (engine, path)
    assert dataclasses.is_dataclass(Honoured) and dataclasses.is_dataclass(Refused)


def test_an_engine_is_one_file_naming_its_class(tmp_path):
    """A module of hicache_ref/engines/ (or a package's __init__) that names its class ENGINE is an
    engine under the file's name; the contract, the support tables and helpers are not engines."""
    from pathlib import Path

    import hicache_ref.engines as engines
    from hal.common.named_registry import modules_defining
    from hicache_ref.engines.base import ReplayEngine

    # The built-ins, and any engine file a team adds beside them (one file, no list to edit).
    assert {"reference", "sglang"} <= set(ENGINES)
    for name in ENGINES:
        cls = engines.engine_class(name)
        assert issubclass(cls, ReplayEngine) and not getattr(cls, "__abstractmethods__", None), name
    copy = tmp_path / "engines"
    copy.mkdir()
    for path in Path(engines.__file__).parent.glob("*.py"):
        (copy / path.name).write_text(path.read_text())
    (copy / "vllm.py").write_text("from hicache_ref.engines.base import ReplayEngine\n\n\n"
                                  "class VllmEngine(ReplayEngine):\n    pass\n\n\nENGINE = VllmEngine\n")
    assert sorted(modules_defining("x", copy, "ENGINE")) == sorted({*ENGINES, "vllm"} - {"sglang"})


def test_an_unknown_engine_is_refused_naming_the_known_ones():
    import hicache_ref.engines as engines

    known = re.escape(", ".join(ENGINES))
    with pytest.raises(ValueError, match=rf"^engine: 'nope' is not one of {known}$"):
        engines.engine_class("nope")


def test_an_engine_whose_module_does_not_import_is_not_run_with_the_reason(monkeypatch, tmp_path):
    """An engine file importing a vendor library absent here is not run, naming the module and the
    import error, to replay (EngineNotRun: NOT RUN, exit 3), the ladder and conform alike, never
    an internal error."""
    import sys

    import hicache_ref.engines as engines

    (tmp_path / "hicache_vendor_engine_test.py").write_text("import no_such_vendor_runtime\nENGINE = None\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "hicache_vendor_engine_test", raising=False)
    monkeypatch.setitem(engines._BUILTIN, "vendor", "hicache_vendor_engine_test:ENGINE")
    why = engines.not_run_reason("vendor")
    assert "hicache_vendor_engine_test" in why and "no_such_vendor_runtime" in why
    spec = CacheSpec.of(l1_tokens=32_000, l2_tokens=64_000)
    with pytest.raises(engines.EngineNotRun, match="no_such_vendor_runtime"):
        engines.replay_with("vendor", spec, [])
    assert engines.LadderEngine("vendor").not_run(spec).startswith("NOT RUN: engine vendor: its module")
