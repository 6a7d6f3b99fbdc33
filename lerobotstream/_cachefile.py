"""Opening a cache file that anyone on the node could have replaced: only a regular file is
opened, and never with a blocking ``open``. A FIFO, a socket or a device put where a derived index,
a note, a record or a disk-cache entry should be is refused at once (``open`` with ``O_NONBLOCK``
returns without waiting for a writer, then ``fstat`` must say regular file), so a cache reader
treats it like a damaged entry instead of waiting forever.

Every reader and appender of a cache file (``mp4/_index_file.py``, ``sidecar/``, ``disk_cache.py``)
opens through :func:`open_regular` or :func:`read_regular`.
"""

from __future__ import annotations

import errno
import os
import stat


class NotRegularFileError(OSError):
    """A cache path is a FIFO, socket, device, folder (or, with ``follow_symlinks=False``, a
    symbolic link): refused without blocking. An :class:`OSError`, so a reader that treats an
    unreadable cache file as absent or damaged does so for this one too."""


def open_regular(
    path: str | os.PathLike,
    flags: int = os.O_RDONLY,
    mode: int = 0o644,
    *,
    follow_symlinks: bool = True,
    dir_fd: int | None = None,
) -> int:
    """A descriptor of the regular file at ``path`` (opened with ``flags``; blocking mode restored).

    Args:
        path: the cache file.
        flags: ``os.open`` flags (``O_RDONLY``, ``O_WRONLY | O_APPEND | O_CREAT``...).
        mode: permission bits of a file ``O_CREAT`` makes.
        follow_symlinks: False: a symbolic link at ``path`` is refused (``O_NOFOLLOW``).
        dir_fd: ``path`` is relative to this open folder (as :func:`os.open`'s ``dir_fd``).

    Raises:
        NotRegularFileError: ``path`` is not a regular file (nothing is left open).
        OSError: ``path`` cannot be opened (absent, permission...).
    """
    flags |= os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    if not follow_symlinks:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags, mode, dir_fd=dir_fd)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR):
            # ELOOP: a symlink under O_NOFOLLOW; ENXIO: a FIFO opened to write with no reader
            raise NotRegularFileError(e.errno, f"not a regular file ({e.strerror})", os.fspath(path)) from e
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFileError(errno.EINVAL, "not a regular file", os.fspath(path))
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(
    path: str | os.PathLike,
    limit: int = -1,
    *,
    offset: int = 0,
    follow_symlinks: bool = True,
    dir_fd: int | None = None,
) -> bytes:
    """The bytes of the regular file at ``path`` from ``offset``, at most ``limit`` (-1: to the end).

    Raises:
        NotRegularFileError: ``path`` is not a regular file.
        OSError: ``path`` cannot be opened or read.
    """
    fd = open_regular(path, follow_symlinks=follow_symlinks, dir_fd=dir_fd)
    with os.fdopen(fd, "rb") as f:
        if offset:
            f.seek(offset)
        return f.read(limit)
