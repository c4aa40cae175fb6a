"""Files and profiles named on the command line, checked before any work starts.

A path that is a directory, unreadable, compressed or binary is refused with the option and the
file named (never the codec or the Python exception); a profile error echoes at most
errors.ECHO_CHARS of what the file holds. A trace that is not a regular file (a pipe, a FIFO,
`-` for stdin) is opened once and read once (streamed.StreamedInput); the sniff looks at what
was read, so every later read gives the same figures as the file would.
"""

from __future__ import annotations

import codecs
import gzip
import os
import stat
import zlib
from pathlib import Path

from conformance.common.errors import CliError, clip, clip_path
from conformance.common.safe_write import check_target, unwritable
from conformance.common.streamed import STDIN, StreamedInput, read_stream
from hal.common.units import parse_size

SNIFF_BYTES = 64 << 10
_MAGIC = {b"\x1f\x8b": "gzip", b"BZh": "bzip2", b"\xfd7zXZ": "xz", b"\x28\xb5\x2f\xfd": "zstd", b"PK\x03\x04": "zip"}


def readable_file(option: str, path: str | os.PathLike, streams: bool = False) -> Path | StreamedInput:
    """`path` as a Path once it is an existing regular file this process can open. With `streams`,
    a pipe, FIFO or `-` (stdin) is read whole, once, and returned as a StreamedInput; without, it
    is refused (a second open would find it drained or block)."""
    if streams and str(path) == STDIN:
        return read_stream(option, None, STDIN)
    p = Path(path)
    shown = clip_path(p)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise CliError(option, f"{shown}: no such file") from None
    except OSError as e:
        raise CliError(option, f"{shown}: cannot be read ({e.strerror or e})") from None
    if stat.S_ISDIR(st.st_mode):
        raise CliError(option, f"{shown}: is a directory, not a file")
    if not stat.S_ISREG(st.st_mode):
        # a character device is read as a stream: /dev/null is empty; /dev/zero and /dev/urandom are
        # refused at their first chunk (NUL bytes), an endless text one at the stream's byte cap
        if streams and (stat.S_ISFIFO(st.st_mode) or stat.S_ISCHR(st.st_mode) or stat.S_ISSOCK(st.st_mode)):
            return read_stream(option, p, str(p))
        raise CliError(option, f"{shown}: is not a regular file (a pipe, a FIFO or a device); give a file")
    try:
        with p.open("rb"):
            pass
    except OSError as e:
        raise CliError(option, f"{shown}: cannot be read ({e.strerror or e})") from None
    return p


def text_file(option: str, path: str | os.PathLike, what: str = "JSONL text",
              streams: bool = False) -> Path | StreamedInput:
    """readable_file, and its first bytes are UTF-8 text, not a compressed or binary file.

    A name ending in .gz is read through gzip (as hicache_ref.sim.trace.reader reads it): its
    decompressed head must be text. `streams`: as readable_file (traces pass it)."""
    p = readable_file(option, path, streams)
    with p.open("rb") as f:
        head = f.read(SNIFF_BYTES)
    if p.name.endswith(".gz") and head.startswith(b"\x1f\x8b"):
        try:
            with p.open("rb") as raw, gzip.GzipFile(fileobj=raw) as f:
                head = f.read(SNIFF_BYTES)
        except (OSError, EOFError, zlib.error):
            raise CliError(option, f"{clip_path(p)}: is not a readable gzip file (expected {what})") from None
    for magic, kind in _MAGIC.items():
        if head.startswith(magic):
            raise CliError(option, f"{clip_path(p)}: is {kind}-compressed; decompress it first (expected {what})")
    head = head.removeprefix(b"\xef\xbb\xbf")  # a UTF-8 BOM (some editors write one) is text
    try:
        codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
        binary = b"\x00" in head
    except UnicodeDecodeError:
        binary = True
    if binary:
        raise CliError(option, f"{clip_path(p)}: is binary, not {what}")
    return p


def trace_file(option: str, path: str | os.PathLike) -> Path | StreamedInput:
    """A Mooncake JSONL trace to read: a regular file, or a pipe, FIFO or `-` read once (text_file)."""
    return text_file(option, path, "a Mooncake JSONL trace", streams=True)


def requests_of(option: str, trace, requests: list) -> list:
    """`requests`, read from `trace`; CliError naming the option and the file when it holds none:
    no figure of an empty trace means anything, and no other option is to blame."""
    if not requests:
        raise CliError(option, f"{clip_path(trace)}: holds no request (an empty trace, or only blank lines)")
    return requests


def new_file(option: str, path: str | os.PathLike, suffixes: tuple[str, ...] = ()) -> Path:
    """`path` as a Path a command may write: a name ending in one of `suffixes` (none given: any),
    absent or a regular file (not a link, FIFO, device or directory), in a folder that exists and is
    not a link (safe_write.check_target, which the write checks again)."""
    out = Path(path)
    if suffixes and out.suffix not in suffixes:
        raise CliError(option, f"{clip_path(out)}: expected a {suffixes[0]} file name")
    try:
        return check_target(out)
    except CliError as e:
        raise CliError(option, f"{e.where}: {e.what}") from None


def output_folder(option: str, path: str | os.PathLike | None) -> Path | None:
    """A folder a command writes its results in (created when missing): CliError naming `option`
    when it is a file, or a symbolic link (its files would land where the link points)."""
    if path is None:
        return None
    out = Path(path)
    if out.is_symlink():
        raise CliError(option, f"{clip_path(out)}: is a symbolic link; name the folder it points at")
    if out.exists() and not out.is_dir():
        raise CliError(option, f"{clip_path(out)}: exists and is not a directory")
    if (why := unwritable(out)) is not None:  # before the run, not after it
        raise CliError(option, f"{clip_path(out)}: cannot be written: {why}")
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
    """A capacity in tokens (hal.common.units) holding at least one whole page; CliError naming `option`."""
    tokens = parse_size(text, name=option, minimum=1)
    if tokens < page_size:
        raise CliError(option, f"{clip(text)} tokens hold no whole page of --page-size {page_size}")
    return tokens
