"""Local-disk byte source: ``os.pread`` on per-process file descriptors.

A missing file is :class:`~lerobotstream.errors.SourceNotFoundError`; any other OS failure
(permission, symlink loop, a folder or device where a file should be, I/O) is
:class:`~lerobotstream.errors.SourceReadError` naming the file and the reason.
"""

from __future__ import annotations

import errno
import os
import stat
import threading
from collections.abc import Sequence
from pathlib import Path

from lerobotstream.errors import RangeReadError, SourceError, SourceNotFoundError, SourceReadError
from lerobotstream.sources._base import ByteSource, check_ranges
from lerobotstream.sources._paths import checked_path

#: open descriptors kept per process (least recently used closed beyond this)
MAX_OPEN_FILES = 256


class LocalSource(ByteSource):
    """Files under the local folder ``root``, read with ``os.pread`` (thread-safe); paths keep to
    the path rule, symlinks inside the root are followed wherever they point."""

    def __init__(self, root: str | os.PathLike) -> None:
        super().__init__()
        self.root = Path(root).expanduser().resolve()
        self.root_display = str(self.root)
        self._init_process_state()

    _PROCESS_LOCAL = ("_fds", "_refs", "_pid", "_lock")

    def _init_process_state(self) -> None:
        self._fds: dict[str, int] = {}
        self._refs: dict[str, int] = {}
        self._pid = os.getpid()
        self._lock = threading.Lock()

    def _abs(self, path: str, *, folder: bool = False) -> Path:
        """``root / path``, ``path`` checked to stay under the root (``folder``: ``""`` allowed)."""
        return self.root / checked_path(path, self.root_display, folder=folder)

    def local_path(self, path: str) -> str | None:
        return str(self._abs(path))

    def _error(self, path: str, e: OSError) -> SourceError:
        """The typed error for ``e``, raised by the operating system on ``path``."""
        if isinstance(e, (FileNotFoundError, NotADirectoryError)):  # nothing there, or a file on its path
            return SourceNotFoundError(f"file not found: {self.root / path}", path=path)
        return SourceReadError.from_oserror(str(self.root / path), e, path=path)

    def _acquire(self, path: str) -> int:
        """An open descriptor for ``path`` (per process), pinned until :meth:`_release`."""
        with self._lock:
            if self._pid != os.getpid():  # forked: never reuse the parent's descriptors
                self._fds = {}
                self._refs = {}
                self._pid = os.getpid()
            fd = self._fds.pop(path, None)
            if fd is None:
                # close least recently used descriptors that no thread is reading from
                for old in [p for p in self._fds if not self._refs.get(p)][
                    : max(0, len(self._fds) + 1 - MAX_OPEN_FILES)
                ]:
                    os.close(self._fds.pop(old))
                try:
                    fd = os.open(self._abs(path), os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
                except OSError as e:
                    raise self._error(path, e) from e
            self._fds[path] = fd  # (re)insert: most recently used last
            self._refs[path] = self._refs.get(path, 0) + 1
            return fd

    def _release(self, path: str) -> None:
        with self._lock:
            if path in self._refs:
                self._refs[path] -= 1

    def _stat(self, path: str) -> os.stat_result:
        """``stat`` of a regular file (a folder is ``EISDIR``, a device or a pipe "not a regular file")."""
        try:
            st = self._abs(path).stat()
        except OSError as e:
            raise self._error(path, e) from e
        if stat.S_ISDIR(st.st_mode):
            e = IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(self._abs(path)))
            raise self._error(path, e) from e
        if not stat.S_ISREG(st.st_mode):
            kind = "a character" if stat.S_ISCHR(st.st_mode) else "a block" if stat.S_ISBLK(st.st_mode) else None
            reason = f"not a regular file ({kind + ' device' if kind else 'a pipe or a socket'})"
            raise SourceReadError(f"could not read {self._abs(path)}: {reason}", path=path, errno=None, reason=reason)
        return st

    def size(self, path: str) -> int:
        return self._stat(path).st_size

    def fingerprint(self, path: str) -> str | None:
        st = self._stat(path)
        return f"mtime_ns={st.st_mtime_ns}:size={st.st_size}"

    def exists(self, path: str) -> bool:
        try:
            return self._abs(path).is_file()
        except OSError as e:  # is_file() is False for a missing file or a symlink loop; this is another failure
            raise self._error(path, e) from e

    def list(self, prefix: str) -> list[str]:
        """Every file under the folder ``prefix`` (links to folders are not followed); a folder
        that cannot be listed (a refused permission) is a ``SourceReadError`` naming it."""
        base = self._abs(prefix, folder=True)
        if not base.is_dir():
            return []

        def failed(e: OSError) -> None:
            where = Path(e.filename) if e.filename else base
            raise self._error(where.relative_to(self.root).as_posix(), e) from e

        out = []
        for folder, _dirs, names in os.walk(base, onerror=failed):
            out.extend(os.path.join(folder, n) for n in names if os.path.isfile(os.path.join(folder, n)))
        return sorted(Path(p).relative_to(self.root).as_posix() for p in out)

    def _read_ranges(self, path: str, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        check_ranges(path, ranges)
        fd = self._acquire(path)
        out = []
        try:
            for offset, length in ranges:
                try:
                    data = os.pread(fd, length, offset)
                except OSError as e:  # EISDIR (a folder opens, but does not read), EIO
                    raise self._error(path, e) from e
                if len(data) != length:
                    raise RangeReadError(
                        f"short read of {self._abs(path)}: asked [{offset}, {offset + length}), got {len(data)} bytes",
                        path=path,
                        offset=offset,
                    )
                out.append(data)
        finally:
            self._release(path)
        total = sum(n for _, n in ranges)
        self.stats.add(requests=len(ranges), bytes_read=total, bytes_requested=total)
        return out

    def close(self) -> None:
        with self._lock:
            if self._pid == os.getpid():
                for fd in self._fds.values():
                    os.close(fd)
            self._fds = {}
            self._refs = {}

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass
