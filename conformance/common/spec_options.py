"""Command-line options made from the spec's field metadata (hicache_ref.spec.fields.param).

Each spec field declares its option, help, parser, choices and the commands it applies to; this
module adds those options to a command's parser and turns the parsed values back into a
CacheSpec. An option left out stays None here, so the spec's own default applies: one default
per concept, kept in the spec. Options a command has beyond the spec (its inputs and outputs)
are declared by the command in LOCAL_OPTIONS; the common ones are made here by `add_local`.
"""

from __future__ import annotations

import argparse
import dataclasses

from hicache_ref.engines import DEFAULT_ENGINE, ENGINES
from hicache_ref.spec import NODES, CacheSpec

ROOT = "root"  # the node name of the root's own fields (profile)

# The command-local options several commands share: (help, argparse keywords).
LOCAL = {
    "--trace": ("Mooncake JSONL trace, .jsonl or .jsonl.gz (default: the packaged conversation_trace.jsonl.gz)", {}),
    "--limit": ("only the first N requests (default: all)", dict(metavar="N")),
    "--json": ("print the figures as one JSON object", dict(action="store_true")),
    "--quiet": ("no progress on stderr (shown only on a terminal)", dict(action="store_true")),
    "--out": ("directory for the command's JSON and plot", {}),
    "--engine": ("which HiCache replays, one engine per file of hicache_ref/engines/: reference (hicache_ref's), "
                 "sglang (SGLang's installed HiCache on the HAL; the [sglang] extra, ci/install-sglang.sh)",
                 dict(choices=ENGINES, default=DEFAULT_ENGINE)),
}


def spec_fields(command: str) -> list[tuple[str, dataclasses.Field]]:
    """(node name, field) of every spec field with an option that applies to `command`."""
    out = [(name, f) for name, cls in NODES.items() for f in dataclasses.fields(cls)
           if "option" in f.metadata and command in f.metadata["commands"]]
    out += [(ROOT, f) for f in dataclasses.fields(CacheSpec) if "option" in f.metadata
            and command in f.metadata["commands"]]
    return out


def _dest(option: str) -> str:
    return option.removeprefix("--").replace("-", "_")


def _argparse_type(parse):
    def convert(text: str):
        try:
            return parse(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e).removeprefix(": ")) from None
    convert.__name__ = getattr(parse, "__name__", "value")
    return convert


def shown_default(f: dataclasses.Field, command: str | None = None) -> str:
    """The default as the help states it (in `command`, where it differs there)."""
    meta = f.metadata
    here = meta.get("per_command", {}).get(command, {})
    if here.get("shown_default") is not None:
        return here["shown_default"]
    if meta.get("shown_default") is not None:
        return meta["shown_default"]
    return "off" if meta.get("flag") else "none" if f.default is None else str(f.default)


def _group_title(node: str) -> tuple[str, str]:
    """(title, description) of the help group of a spec node's options: the node's name and the
    first line of its docstring."""
    if node == ROOT:
        return "spec", "The spec's own fields: the hardware profile that prices what runs."
    doc = (NODES[node].__doc__ or "").strip().splitlines()
    return node, (doc[0] if doc else None)


def add_spec_options(p, command: str, filled: bool = False) -> None:
    """Add an option for every spec field that applies to `command`, grouped in --help by its
    spec node (geometry, tiers, semantics, storage, serving, tp; the root's as "spec"). Left out
    it is None, so the spec's default applies when spec_from_args builds the spec; `filled`: the
    spec's default itself, for tools that read the values rather than build a spec."""
    groups: dict[str, argparse._ArgumentGroup] = {}
    for node, f in spec_fields(command):
        if node not in groups:
            groups[node] = p.add_argument_group(*_group_title(node))
        meta = f.metadata
        here = meta.get("per_command", {}).get(command, {})
        shown = "required" if here.get("required") else f"default: {shown_default(f, command)}"
        kw: dict = dict(dest=_dest(meta["option"]), help=f"{meta['help']} ({shown})", required=bool(here.get("required")))
        default = (False if meta["flag"] else f.default) if filled else None
        if meta["flag"]:
            kw.update(action="store_true", default=default)
        else:
            kw.update(default=default)
            if meta["parse"] is not None:
                kw["type"] = _argparse_type(meta["parse"])
            if meta["choices"]:
                kw["choices"] = meta["choices"]
            if meta["metavar"]:
                kw["metavar"] = meta["metavar"]
        action = groups[node].add_argument(meta["option"], **kw)
        # What the option means when left out (the spec's default), for the CLI reference and the
        # test that an option means the same in every command.
        action.spec_default = False if meta["flag"] else f.default


def add_local(p, option: str, help: str | None = None, **kw) -> None:
    """A command-local option; the shared ones (LOCAL) keep one help text across commands."""
    base_help, base_kw = LOCAL.get(option, (None, {}))
    p.add_argument(option, help=help or base_help, **{**base_kw, **kw})


def spec_from_args(a, command: str, **fixed) -> CacheSpec:
    """The CacheSpec the parsed options `a` describe; `fixed`: flat fields the command sets itself."""
    nodes: dict[str, dict] = {}
    for node, f in spec_fields(command):
        value = getattr(a, _dest(f.metadata["option"]))
        if value is not None:
            nodes.setdefault(node, {})[f.name] = value
    root = nodes.pop(ROOT, {})
    if not fixed:
        return CacheSpec(**{n: NODES[n](**kw) for n, kw in nodes.items()}, **root)
    # fixed fields join the options before the spec is made: what it resolves (--model's sizes
    # against the profile) sees them
    flat = {k: v for kw in nodes.values() for k, v in kw.items()}
    return CacheSpec.of(**{**flat, **root, **fixed})


def sizing_lines(spec: CacheSpec) -> list[str]:
    """How --model sized the spec (hicache_ref.spec.machine), one line of arithmetic each; [] without --model."""
    return [f"sizes: {line}" for line in (spec.machine_sizing or {}).get("arithmetic", [])]
