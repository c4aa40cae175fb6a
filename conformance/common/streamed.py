"""An input that is not a regular file (a pipe, a FIFO, `-` for stdin), read once and kept.

Such a file gives its bytes once: a second open finds it drained, or blocks on a FIFO with no
writer left. So the command reads it whole at the start, from the one open, and every later
read (the sniff, the trace reader, a second pass) reads the kept bytes. A FIFO with no writer
yet is waited for, saying so on stderr after a second; Ctrl-C stops the wait.
"""

from __future__ import annotations

import io
import os
import select
import sys
from pathlib import Path

from conformance.common.errors import CliError, clip_path
from hardware_profiles.bounded import MAX_STREAM_BYTES, BoundError, read_capped

STDIN = "-"
WRITER_NOTICE_SECONDS = 1.0


class StreamedInput:
    """The bytes of a pipe, FIFO or stdin, read once; opens like a file (`open("rb")`) as often as
    needed. `name` is the last part of the path given ('-' for stdin), str() the path as given."""

    def __init__(self, shown: str, data: bytes):
        self._shown, self._data = shown, data
        self.name = Path(shown).name if shown != STDIN else STDIN

    def open(self, mode: str = "rb"):
        """A fresh binary stream over the bytes read."""
        if mode != "rb":
            raise ValueError(f"mode: a streamed input opens only 'rb', got {mode!r}")
        return io.BytesIO(self._data)

    def is_file(self) -> bool:
        return True

    def __bool__(self) -> bool:  # given, even when empty: `trace or default` must not swap in another
        return True

    def __len__(self) -> int:
        return len(self._data)

    def __str__(self) -> str:
        return "stdin (-)" if self._shown == STDIN else self._shown

    def __repr__(self) -> str:
        return f"StreamedInput({self._shown!r}, {len(self._data)} bytes)"


def _wait_for_writer(fd: int, option: str, shown: str) -> None:
    """Block until the FIFO on `fd` (opened O_NONBLOCK) has data or its writer left."""
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLHUP)
    if poller.poll(int(WRITER_NOTICE_SECONDS * 1000)):
        return
    print(f"hicache: {option}: {clip_path(shown)}: a FIFO with no writer yet; waiting for one (Ctrl-C stops)",
          file=sys.stderr, flush=True)
    while not poller.poll(None):
        pass


def _text_only(read, option: str, shown: str):
    """`read`, refusing at its first chunk a stream that holds a NUL byte (binary: /dev/urandom)."""
    first = [True]

    def checked(n: int) -> bytes:
        chunk = read(n)
        if first[0] and chunk:
            first[0] = False
            if b"\x00" in chunk:
                raise CliError(option, f"{clip_path(shown)}: is binary, not text (it holds NUL bytes)")
        return chunk

    return checked


def read_stream(option: str, path: Path | None, shown: str, cap: int = MAX_STREAM_BYTES) -> StreamedInput:
    """All of `path` (None: stdin), read once, at most `cap` bytes; CliError naming `option` when it
    cannot be read, holds binary data or goes on past the cap (`yes '{}' |` would never end)."""
    try:
        if path is None:
            if sys.stdin is None:  # started with stdin closed (`<&-`)
                raise CliError(option, "stdin (-) is closed; nothing to read")
            data = read_capped(_text_only(sys.stdin.buffer.read1, option, shown), cap, clip_path(shown))
            return StreamedInput(shown, data)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO's open never blocks
        try:
            if os.fstat(fd).st_mode & 0o170000 == 0o010000:  # a FIFO: wait for its writer
                _wait_for_writer(fd, option, shown)
            os.set_blocking(fd, True)
            data = read_capped(_text_only(lambda n: os.read(fd, n), option, shown), cap, clip_path(shown))
        finally:
            os.close(fd)
    except BoundError as e:
        raise CliError(option, str(e)) from None
    except OSError as e:
        raise CliError(option, f"{clip_path(shown)}: cannot be read ({e.strerror or e})") from None
    return StreamedInput(shown, data)
