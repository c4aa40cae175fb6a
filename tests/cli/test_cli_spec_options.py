"""Every option of replay, sweep and ablate is one spec field's or a documented command-local one,
and a spec field's option is spelled, and defaults, the same in every command that has it."""

from __future__ import annotations

import argparse
import importlib

import pytest

from conformance.common.spec_options import shown_default, spec_fields
from hicache_ref.spec import CacheSpec

COMMANDS = ("replay", "sweep", "ablate")


def _parser(command: str):
    module = importlib.import_module(f"conformance.cli.{command}")
    p = argparse.ArgumentParser(allow_abbrev=False)
    module.add_arguments(p)
    return module, p


def _options(p) -> dict[str, argparse.Action]:
    return {s: a for a in p._actions for s in a.option_strings if s.startswith("--") and s != "--help"}


@pytest.mark.parametrize("command", COMMANDS)
def test_every_option_is_a_spec_field_or_documented_local(command):
    module, p = _parser(command)
    from_spec = [f.metadata["option"] for _, f in spec_fields(command)]
    assert len(from_spec) == len(set(from_spec)), "two spec fields share an option"
    local = set(module.LOCAL_OPTIONS)
    assert not local & set(from_spec), f"{command}: local options shadow spec fields: {local & set(from_spec)}"
    options = set(_options(p))
    assert options == set(from_spec) | local, (f"{command}: undocumented {sorted(options - set(from_spec) - local)}, "
                                              f"declared but absent {sorted((set(from_spec) | local) - options)}")


def test_a_spec_option_has_one_spelling_and_default_everywhere():
    seen: dict[str, tuple] = {}
    for command in COMMANDS:
        _, p = _parser(command)
        actions = _options(p)
        for node, f in spec_fields(command):
            a = actions[f.metadata["option"]]
            # None in the parser: the spec's default applies, the same object in every command
            assert a.default is None, f"{command} {f.metadata['option']}: a default outside the spec"
            key = (node, f.name)
            # the help up to its "(default: ...)": that part a command may state its own way, where
            # the field's per_command says so (ablate's fractions of the trace, sweep's required L1)
            text = a.help.rsplit(" (", 1)[0]
            said = (a.dest, text, tuple(a.choices or ()))
            if not f.metadata["per_command"].get(command):
                assert a.help.endswith(f"(default: {shown_default(f)})"), f"{command} {f.metadata['option']}"
            assert seen.setdefault(key, said) == said, f"{f.metadata['option']}: differs between commands"


def test_the_naming_table_defaults_hold():
    spec = CacheSpec()
    assert spec.profile == "p800"
    assert spec.tiers.write_policy == "write_through_selective"
    assert spec.page_size == 64 and spec.geometry.kv_dim == 576 and spec.tiers.host_layout == "layer_first"
    for command in COMMANDS:
        _, p = _parser(command)
        assert "--head-dim" not in _options(p) and "--pd" not in _options(p)


def test_a_new_field_becomes_an_option_in_every_command_it_applies_to():
    names = {c: {f.metadata["option"] for _, f in spec_fields(c)} for c in COMMANDS}
    assert {"--profile", "--page-size", "--kv-dim", "--l1-tokens"} <= names["replay"] & names["sweep"] & names["ablate"]
    assert "--l3" in names["replay"] and "--l3" not in names["ablate"]


# Options spelled like a spec field's but made by hand, each with why it is not the spec's option.
HAND_MADE = {
    ("bench transfer", "--host-layout"): "a comma list of layouts to time, not the one layout a cache uses",
    ("bench l3", "--host-layout"): "a comma list of layouts to time, not the one layout a cache uses",
    ("sweep", "--l2-tokens"): "a comma list of tiers (sweep grows L2 over them)",
    ("sweep", "--l3-tokens"): "a comma list of tiers (sweep grows the model L3 over them)",
    ("ablate", "--l3-tokens"): "the l3_pooled rung's capacity, not an L3 of every rung",
    ("spmd", "--tp"): "ranks of the SPMD self-check (real processes), not a replay's modeled TP group",
    ("spmd", "--shared-host"): "the self-check's real shared host segment",
    ("spmd", "--free-list"): "the self-check's allocator order (fifo or lifo)",
    ("bench spmd", "--tp"): "ranks of the SPMD benchmark (real processes)",
    ("conform", "--profile"): "the profile whose targets are judged: the backend's own by default",
    ("calibrate", "--model"): "with --allhit: the model whose layers and KV bytes price the all-hit table's loads "
                              "(calibrate builds no cache spec)",
    ("calibrate", "--profile"): "the profile the measured link section is written into: the backend's own by default",
    ("advise", "--profile"): "repeatable: profiles compared side by side on the same replays",
    ("doctor", "--profile"): "the topology to emulate where the host reports none (default: none)",
}


def test_no_command_makes_a_spec_option_by_hand():
    """A concept the spec holds is defined once: a command that has its option takes the spec's
    (default, parser, help), unless HAND_MADE says why that command's option is another thing."""
    from conformance.cli.main import build_parser
    from conformance.cli.reference import commands, option_name, options

    spec_options = {f.metadata["option"] for node in ("replay", "sweep", "ablate", "plan", "bench replay")
                    for _, f in spec_fields(node)}
    by_hand = set()
    for name, parser in commands(build_parser()):
        command = name.removeprefix("hicache ")
        for action in options(parser):
            option = option_name(action)
            if option in spec_options and not hasattr(action, "spec_default"):
                by_hand.add((command, option))
    assert by_hand <= set(HAND_MADE), f"made by hand, take the spec's option: {sorted(by_hand - set(HAND_MADE))}"
    assert set(HAND_MADE) <= by_hand, f"no longer made by hand, drop from HAND_MADE: {sorted(set(HAND_MADE) - by_hand)}"


def test_help_groups_the_spec_options_by_their_node():
    from conformance.cli.main import build_parser
    from hicache_ref.spec import NODES

    sub = next(a for a in build_parser()._actions if a.__class__.__name__ == "_SubParsersAction")
    groups = {g.title: {a.option_strings[-1] for a in g._group_actions} for g in sub.choices["replay"]._action_groups}
    assert set(NODES) | {"spec"} <= set(groups)
    assert {"--l1-tokens", "--host-layout"} <= groups["tiers"] and "--kv-dim" in groups["geometry"]
    assert "--l3" in groups["storage"] and "--tp" in groups["tp"] and "--profile" in groups["spec"]
    own = groups.get("options") or groups["optional arguments"]  # its title before Python 3.10
    assert "--trace" in own and "--trace" not in set().union(*(groups[n] for n in NODES))
