"""Atomic file writes: a temporary file in the target's folder, flushed and synced, then
``os.replace`` — a reader sees the old file or the whole new one, never a part, and a failed
write leaves no temporary file behind."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def check_output_file(path: str | os.PathLike, *, flag: str) -> None:
    """Refuse, before any work, an output ``path`` that :func:`write_text_atomic` could not write.

    Raises:
        StreamingConfigError: ``path`` is a folder, or its folder does not exist (names ``flag``,
            e.g. ``--json``, and the path).
    """
    from lerobotstream.errors import StreamingConfigError

    out = os.fspath(path)
    if os.path.isdir(out):
        raise StreamingConfigError(
            f"{flag} {out!r} is a folder: give the path of a file to write", option=flag, value=out
        )
    folder = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(folder):
        raise StreamingConfigError(f"{flag} {out!r}: the folder {folder} does not exist", option=flag, value=out)


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically; returns the path.

    Raises:
        IsADirectoryError: ``path`` is a folder (nothing is written).
        OSError: the folder does not exist or cannot be written (nothing is left behind).
    """
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"{path} is a folder, not a file")
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path
