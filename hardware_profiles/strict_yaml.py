"""Strict reading of a profile's or readings file's YAML document, and the one way an error echoes a value.

One YAML reader for profiles (hardware_profiles.profile_schema) and their readings files
(hardware_profiles.measured_readings): the text is a bounded regular UTF-8 file, one document,
each key once, exponent floats read as floats; aliases are refused on the node graph, before
anything is built from it (an alias bomb of a few KB would expand to gigabytes), and so are
nesting past MAX_DEPTH and numbers of too many digits. A bad value is echoed through `shown`,
which formats at most a few dozen characters of it however large it is.
"""

from __future__ import annotations

import re
import reprlib
from pathlib import Path
from typing import Any, NoReturn

import yaml

from hardware_profiles.bounded import MAX_SCALAR_CHARS, MAX_YAML_BYTES, BoundError, read_regular
from hardware_profiles.field_checks import ProfileError


class _StrictSafeLoader(yaml.SafeLoader):
    """SafeLoader that also reads exponent floats like 1e-6 (PyYAML's YAML 1.1 rules make them strings)."""


_StrictSafeLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxdict, _REPR.maxlist, _REPR.maxtuple, _REPR.maxset = 2, 4, 4, 4, 4
_REPR.maxstring = _REPR.maxother = _REPR.maxlong = 80
_SHOWN_CHARS = 80


def shown(value: Any) -> str:
    """`value` as an error echoes it: a repr bounded while it is made (never the whole of a huge
    value), on one line, at most _SHOWN_CHARS characters."""
    if isinstance(value, str) and len(value) > _SHOWN_CHARS // 2:  # its head, and how long it was
        return f"{' '.join(repr(value[: _SHOWN_CHARS // 2]).split())[:-1]}...' ({len(value):,} characters)"
    text = " ".join(_REPR.repr(value).split())
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 3] + "..."


def fail(file, key_path: str, expected: str, got: Any) -> NoReturn:
    """Raise the ProfileError for `got` at `key_path` of `file` (echoed through `shown`)."""
    raise ProfileError(str(file), key_path, expected, shown(got))


def mapping(file, key_path: str, value: Any, allowed=None) -> dict:
    """`value` when it is a mapping whose keys are all in `allowed` (None: any); ProfileError otherwise."""
    if not isinstance(value, dict):
        fail(file, key_path or "(document)", "a mapping", value)
    if allowed is not None:
        for k in value:
            if k not in allowed:
                fail(file, join_path(key_path, k), f"one of the keys {', '.join(allowed)}", k)
    return value


def yaml_text(path: Path) -> str:
    """A profile's or readings file's text: a regular file of at most MAX_YAML_BYTES, UTF-8;
    ProfileError naming the file otherwise (a FIFO, a device, /dev/zero, a file of gigabytes)."""
    try:
        data = read_regular(path, MAX_YAML_BYTES, "YAML")
    except BoundError as e:
        raise ProfileError(str(path), "(file)", f"a regular YAML file of at most {MAX_YAML_BYTES >> 20} MiB",
                           str(e).removeprefix(f"{path}: ")) from None
    except OSError as e:
        raise ProfileError(str(path), "(file)", "a readable YAML file", e.strerror or str(e)) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ProfileError(str(path), "(file)", "UTF-8 text", f"a byte that is not UTF-8 at offset {e.start}") from None


def parse_document(text: str, file: str) -> Any:
    """The one YAML document of `text`, checked for duplicate keys and aliases before it is built."""
    loader = _StrictSafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            raise ProfileError(file, "(document)", "a mapping of profile sections", "an empty file")
        _reject_duplicate_keys(node, "", file)
        return loader.construct_document(node)
    except RecursionError:  # `[[[[...` thousands deep: composing it recurses past Python's stack
        raise ProfileError(file, "(yaml)", f"nesting at most {MAX_DEPTH} levels deep", "deeper nesting") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"(yaml, line {mark.line + 1})" if mark else "(yaml)"
        raise ProfileError(file, where, "valid YAML", shown(getattr(e, "problem", None) or str(e))) from None
    finally:
        loader.dispose()


MAX_DEPTH = 32  # levels of nesting a profile or readings file may use (they use four or five)
_NUMBER_TAGS = ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")


def _reject_duplicate_keys(node: yaml.Node, path: str, file: str, walked: set[int] | None = None,
                           depth: int = 0) -> None:
    # safe_load keeps the last of two equal keys silently; in a profile that hides a typo'd edit.
    # A node reached twice is an alias (*name) of an anchor: refused, so nothing is ever expanded.
    # A number of thousands of digits is refused here, by its length, before int() is asked to read it.
    walked = set() if walked is None else walked
    if depth > MAX_DEPTH:
        raise ProfileError(file, path or "(document)", f"nesting at most {MAX_DEPTH} levels deep", "deeper nesting")
    if isinstance(node, yaml.ScalarNode) and node.tag in _NUMBER_TAGS and len(node.value) > MAX_SCALAR_CHARS:
        raise ProfileError(file, path or "(document)", f"a number of at most {MAX_SCALAR_CHARS} characters",
                           f"{len(node.value):,} characters")
    if id(node) in walked:
        raise ProfileError(file, path or "(document)", "a value written out (YAML aliases are not read)",
                           f"an alias of the anchor at line {node.start_mark.line + 1}")
    walked.add(id(node))
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = str(key_node.value)
            if key in seen:
                raise ProfileError(file, join_path(path, key), "each key once",
                                   f"a second {key!r} at line {key_node.start_mark.line + 1}")
            seen.add(key)
            _reject_duplicate_keys(key_node, join_path(path, key), file, walked, depth + 1)
            _reject_duplicate_keys(value_node, join_path(path, key), file, walked, depth + 1)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _reject_duplicate_keys(item, f"{path}[{i}]", file, walked, depth + 1)


def join_path(path: str, key: Any) -> str:
    """`key` under key path `path` (the document itself when `path` is empty)."""
    return f"{path}.{key}" if path else str(key)
