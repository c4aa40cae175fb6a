"""Files and profiles named on the command line, checked before any work starts.

A path that is a directory, unreadable, compressed or binary is refused with the option and the
file named (never the codec or the Python exception); a profile error echoes at most
errors.ECHO_CHARS of what the file holds.
"""

from __future__ import annotations

import codecs
import gzip
import os
import zlib
from pathlib import Path

from conformance.common.errors import CliError, clip, clip_path
from hal.units import parse_size

SNIFF_BYTES = 64 << 10
_MAGIC = {b"\x1f\x8b": "gzip", b"BZh": "bzip2", b"\xfd7zXZ": "xz", b"\x28\xb5\x2f\xfd": "zstd", b"PK\x03\x04": "zip"}


def readable_file(option: str, path: str | os.PathLike) -> Path:
    """`path` as a Path once it is an existing regular file this process can open."""
    p = Path(path)
    shown = clip_path(p)
    if not p.exists():
        raise CliError(option, f"{shown}: no such file")
    if p.is_dir():
        raise CliError(option, f"{shown}: is a directory, not a file")
    try:
        with p.open("rb"):
            pass
    except OSError as e:
        raise CliError(option, f"{shown}: cannot be read ({e.strerror or e})") from None
    return p


def text_file(option: str, path: str | os.PathLike, what: str = "JSONL text") -> Path:
    """readable_file, and its first bytes are UTF-8 text, not a compressed or binary file.

    A name ending in .gz is read through gzip (as hicache_ref.sim.trace reads it): its
    decompressed head must be text."""
    p = readable_file(option, path)
    with p.open("rb") as f:
        head = f.read(SNIFF_BYTES)
    if p.name.endswith(".gz") and head.startswith(b"\x1f\x8b"):
        try:
            with gzip.open(p, "rb") as f:
                head = f.read(SNIFF_BYTES)
        except (OSError, EOFError, zlib.error):
            raise CliError(option, f"{clip_path(p)}: is not a readable gzip file (expected {what})") from None
    for magic, kind in _MAGIC.items():
        if head.startswith(magic):
            raise CliError(option, f"{clip_path(p)}: is {kind}-compressed; decompress it first (expected {what})")
    try:
        codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
        binary = b"\x00" in head
    except UnicodeDecodeError:
        binary = True
    if binary:
        raise CliError(option, f"{clip_path(p)}: is binary, not {what}")
    return p


def new_file(option: str, path: str | os.PathLike, suffixes: tuple[str, ...] = ()) -> Path:
    """`path` as a Path a command may write: a name ending in one of `suffixes` (none given: any),
    not a directory, in a folder that exists."""
    out = Path(path)
    if suffixes and out.suffix not in suffixes:
        raise CliError(option, f"{clip_path(out)}: expected a {suffixes[0]} file name")
    if out.is_dir():
        raise CliError(option, f"{clip_path(out)}: is a directory")
    if not out.parent.is_dir():
        raise CliError(option, f"{clip_path(out.parent)}: no such folder")
    return out


def is_path(text: str) -> bool:
    return "/" in text or text.endswith((".yaml", ".yml"))


def load_profile_arg(option: str, name_or_path: str):
    """The loaded profile; a ProfileError becomes one line naming the option and the file."""
    from hardware_profiles import ProfileError, load_profile

    if is_path(name_or_path):
        text_file(option, name_or_path, "a YAML profile")
    try:
        return load_profile(name_or_path)
    except ProfileError as e:
        raise CliError(option, f"{clip_path(e.file)}: {e.key_path}: expected {clip(e.expected, 160)}, "
                               f"got {clip(e.got)}") from None
    except UnicodeDecodeError:
        raise CliError(option, f"{clip_path(name_or_path)}: is not UTF-8 text") from None


def page_tokens(option: str, text: str, page_size: int) -> int:
    """A capacity in tokens (hal.units) holding at least one whole page; CliError naming `option`."""
    tokens = parse_size(text, name=option, minimum=1)
    if tokens < page_size:
        raise CliError(option, f"{clip(text)} tokens hold no whole page of --page-size {page_size}")
    return tokens
