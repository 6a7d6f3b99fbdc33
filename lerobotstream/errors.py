"""Every exception lerobotstream raises, in one module.

Each class takes a message, then keyword-only structured fields (``episode_index``, ``camera``,
``path``...). Only the type and the message cross a DataLoader worker (torch rebuilds the error as
``exc_type(msg)``), so **the message itself names episode, camera and file**. Every class also
inherits a built-in (``ValueError``, ``OSError``...). Credentials never appear in a message.
"""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any


class LeRobotStreamError(Exception):
    """Base class of every lerobotstream error: ``message`` names what failed (episode, camera,
    file where known); ``**fields`` are kept as attributes (``episode_index=3``, ``path=...``)."""

    def __init__(self, message: str = "", **fields: Any) -> None:
        super().__init__(message)
        self.message = message
        for key, value in fields.items():
            setattr(self, key, value)
        self._fields = dict(fields)

    @property
    def fields(self) -> dict[str, Any]:
        """The structured fields given at construction (a copy), e.g. to raise the same error again
        with a longer message: ``type(exc)(f"{where}: {exc.message}", **exc.fields)``."""
        return dict(self._fields)

    def __reduce__(self):  # keep fields across pickling (multiprocessing, DataLoader workers)
        return (_rebuild, (type(self), self.message, self._fields))


def _rebuild(cls: type, message: str, fields: dict) -> LeRobotStreamError:
    return cls(message, **fields)


@contextlib.contextmanager
def naming(where: str) -> Iterator[None]:
    """Re-raise a lerobotstream error raised inside the block with ``where`` before its message
    (same type and fields), e.g. ``naming("dataset 1 (b/y)")`` for a mixture's dataset; an error
    whose message already starts with ``where`` passes unchanged."""
    try:
        yield
    except LeRobotStreamError as exc:
        if exc.message.startswith(where.split(";")[0].rstrip(")")):
            raise
        raise type(exc)(f"{where}: {exc.message}", **exc.fields) from exc


def in_flag_words(message: str, flags: dict[str, str], none: str | None = None) -> str:
    """``message`` with the Python keywords it names written as a command's flags: ``root=`` and
    ``root must be`` as ``--root``, a keyword with an underscore anywhere as a word
    (``num_workers`` → ``--num-workers``; not inside a path or placeholder, ``<repo_id>``); with
    ``none`` given (how the command line spells None), ``None`` in a message that names a flag as
    ``none``. ``flags``: keyword → flag."""
    out = message
    for kw, flag in flags.items():
        out = re.sub(rf"(?<![\w<$/.{{-]){re.escape(kw)}= ?", f"{flag} ", out)
        out = re.sub(rf"(?<![\w<$/.{{-]){re.escape(kw)}(?= must be\b)", flag, out)
        if "_" in kw:
            out = re.sub(rf"(?<![\w<$/.{{-]){re.escape(kw)}\b", flag, out)
    if none is not None and out != message:
        out = re.sub(r"\bNone\b", none, out)
    return out


@contextlib.contextmanager
def as_flags(flags: dict[str, str], none: str | None = None) -> Iterator[None]:
    """Re-raise a lerobotstream error raised inside the block (same type and fields) with its
    message in the command's flag words (:func:`in_flag_words`): what a CLI wraps its library
    calls in, so ``pass root= a local copy`` reads ``pass --root a local copy``."""
    try:
        yield
    except LeRobotStreamError as exc:
        text = in_flag_words(exc.message, flags, none)
        if text == exc.message:
            raise
        raise type(exc)(text, **exc.fields) from exc


def os_reason(e: BaseException) -> str:
    """The operating system's reason for ``e`` without the path it repeats: ``strerror (ENAME)``
    (``Too many levels of symbolic links (ELOOP)``); an error without ``strerror`` gives its text,
    or its type's name."""
    import errno

    code = getattr(e, "errno", None)
    name = errno.errorcode.get(code, "") if isinstance(code, int) else ""
    reason = getattr(e, "strerror", None) or str(e) or type(e).__name__
    return f"{reason} ({name})" if name else reason


@dataclass(frozen=True)
class Problem:
    """One defect a check found: training raises its typed error on the first, and
    ``lerobotstream.validate`` collects every one as a finding. Returned by the shared checks
    (``parquet.episode_rows_problem``, ``index_problem``, ``task_index_problem``,
    ``footer_rows_problem``, ``features.data_columns_problem``, ``sidecar.validate_source``) and
    collected by ``DatasetMeta.load(problems=[])`` instead of raising."""

    code: str  # the validator's finding code (a key of lerobotstream.validate._findings.CODES)
    message: str  # what is wrong, one line (the caller adds where)
    episode_index: int | None = None
    camera: str | None = None
    path: str | None = None  # the file, relative to the dataset root
    column: str | None = None  # the data column it concerns (the first, when several)
    episodes: tuple[int, ...] = ()  # every episode it takes, when more than episode_index
    severity: str | None = None  # None: the code's own; "warning" where training tolerates it

    def __str__(self) -> str:
        """``episode 3, camera front, file videos/...mp4: <message>`` (the parts that apply)."""
        parts = [f"episode {self.episode_index}"] if self.episode_index is not None else []
        parts += [f"camera {self.camera}"] if self.camera else []
        parts += [f"file {self.path}"] if self.path else []
        return f"{', '.join(parts)}: {self.message}" if parts else self.message


# --- METADATA ERRORS --------------------------------------------------------------------------
class MetadataError(LeRobotStreamError, ValueError):
    """LeRobot v3 metadata is missing, malformed or inconsistent (names the episode and file)."""


class UnsupportedDatasetVersionError(MetadataError):
    """The dataset is not LeRobotDataset v3.x (e.g. v2.1); the message says how to convert it."""


class MetadataReadError(MetadataError, OSError):
    """A ``meta/`` file exists but cannot be read (I/O error, permission refused, symlink loop, a
    failed read of the source): names the file and the operating system's reason."""


class EpisodeDataError(MetadataError):
    """An episode's Parquet rows disagree with its metadata (row count, frame_index, episode_index)."""


class ParquetCorruptError(EpisodeDataError):
    """A data Parquet file cannot be decoded (truncated or corrupt pages, a page checksum that does
    not match): names the file and the episodes being read from it."""


# --- SOURCE (BYTES) ERRORS --------------------------------------------------------------------
class SourceError(LeRobotStreamError, OSError):
    """Reading bytes from a local path, fsspec URL, Hub dataset or bucket failed."""


class SourceProtocolError(SourceError, ValueError):
    """A root URL whose protocol no installed fsspec filesystem serves (``gopher://...``; names the
    root and the protocol), or a store's answer that breaks its protocol (a Hub size header that is
    not a number)."""


class SourceNotFoundError(SourceError, FileNotFoundError):
    """The file does not exist at the source (path is named, credentials are not)."""


class SourceReadError(SourceError):
    """A file exists at the source but cannot be read (permission refused, symlink loop, a folder,
    I/O error): names the file and the operating system's ``reason`` (``Is a directory (EISDIR)``)
    and ``errno``; the original error is chained. "Not found" is :class:`SourceNotFoundError`."""

    @classmethod
    def from_oserror(cls, where: str, e: OSError, *, path: str) -> SourceReadError:
        """The error for ``e``, raised while reading ``path`` (dataset-relative) shown as ``where``
        (an absolute path or a credential-free URL)."""
        reason = os_reason(e)
        return cls(f"could not read {where}: {reason}", path=path, errno=e.errno, reason=reason)


class SourceChangedError(SourceError):
    """The file's size or fingerprint changed during the run (metadata and payload must not change)."""


class SourceAuthError(SourceError, PermissionError):
    """The store refused our credentials (401/403). Credentials are never part of the message."""


class RangeReadError(SourceError):
    """A range read returned the wrong bytes (short body, wrong Content-Range) and retries ran out."""


class SourceTimeoutError(SourceError, TimeoutError):
    """A read got no complete answer within ``read_timeout_s`` (retries and backoff included);
    the message names the URL (without its query string) and the seconds waited."""


# --- MP4 ERRORS (ISO/IEC 14496-12) ------------------------------------------------------------
class Mp4Error(LeRobotStreamError, ValueError):
    """The MP4 could not be indexed: names the file, the box and the reason."""


class Mp4TruncatedError(Mp4Error):
    """A box runs past the end of its parent or of the file."""


class Mp4InconsistentTablesError(Mp4Error):
    """Sample tables (stts, stsz, stsc, stco/co64, ctts, stss) disagree with each other or the file."""


class Mp4UnsupportedError(Mp4Error):
    """A valid MP4 feature we refuse rather than read wrongly: fragmented (moof), several media
    edits, repeated or non-unit-rate edits, no video track."""


# --- SIDECAR ERRORS ---------------------------------------------------------------------------
class SidecarError(LeRobotStreamError, ValueError):
    """The MP4 index sidecar is unusable."""


class SidecarSchemaError(SidecarError):
    """The sidecar's schema version or layout is not the one this reader understands."""


class SidecarStaleError(SidecarError):
    """The sidecar does not describe the current sources (paths, sizes, fingerprints)."""


class SidecarValidationError(SidecarError):
    """The sidecar disagrees with the dataset metadata (episode window, fps, frame count)."""


class SidecarWriteError(SidecarError, OSError):
    """The sidecar, its lock or the derived MP4 index could not be written (full disk, quota,
    read-only folder): names the path, the ``errno`` and what to do."""

    @classmethod
    def from_oserror(cls, path: Any, e: OSError, *, what: str, elsewhere: str) -> SidecarWriteError:
        """The error for ``e`` raised while writing ``what`` at ``path``: the reason and what to do
        (free space, permissions, or ``elsewhere``: the options that choose another folder)."""
        import errno
        import os

        path = os.fspath(path)
        folder = os.path.dirname(path) or "."
        if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            todo = f"free space on the disk holding {folder}, or write it elsewhere ({elsewhere})"
        elif e.errno in (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR):
            todo = f"make {folder} writable, or write it elsewhere ({elsewhere})"
        else:
            todo = f"check the disk holding {folder}, or write it elsewhere ({elsewhere})"
        return cls(f"cannot write {what} {path}: {os_reason(e)}; {todo}", path=path, errno=e.errno)


class SidecarLockTimeoutError(SidecarError, TimeoutError):
    """Another process held the sidecar build lock longer than ``sidecar_lock_timeout_s``."""


class SidecarPublishError(SidecarError):
    """``--push`` refused: only a complete, validated, full-dataset, current-schema sidecar of an
    ``hf://`` root may be published (the message says what is missing)."""


# --- DECODING ---------------------------------------------------------------------------------
class FrameTimestampError(LeRobotStreamError, LookupError):
    """No decoded frame lies within ``tolerance_s`` of a requested timestamp (fields
    ``episode_index``, ``camera``, ``path``, ``requested_s``, ``nearest_s``)."""


class DecodeError(LeRobotStreamError, RuntimeError):
    """The decoder failed on an episode's mini-MP4 (wraps the backend's error ``from e``)."""


class DeltaTimestampsError(LeRobotStreamError, ValueError):
    """``delta_timestamps`` are invalid: an offset is not a whole number of frames within
    ``tolerance_s`` (``|d*fps - round(d*fps)| / fps > tolerance_s``) or names an unknown feature."""


# --- BUDGETS, SHARDING, RESUME ----------------------------------------------------------------
class ByteBudgetError(LeRobotStreamError, ValueError):
    """An episode's synthesized bytes exceed the worker's whole byte budget (raised before any fetch)."""


def over_budget(
    episode_index: int,
    nbytes: int,
    byte_budget: int | None,
    *,
    holder: str = "the worker",
    budget_is: str = "",
    advice: str = "",
    where: str = "",
) -> ByteBudgetError | None:
    """The rule "an episode larger than the whole byte budget": the error to raise (before anything
    of the episode is fetched), or None when it fits: ``ByteBudgetError("episode 1 needs 11 bytes
    (0.000 GiB) of synthesized MP4 but the worker has a byte budget of 10 bytes (0.000 GiB); raise
    the byte budget (streaming_byte_budget_gb)", episode_index=1, nbytes=11, byte_budget=10)``.

    Args:
        nbytes: the episode's synthesized MP4 bytes (every camera); negative: a size function's bug.
        byte_budget: the budget of ``holder`` (``"worker 1 of rank 0"``), bytes (None: unbounded).
        budget_is: how the budget was derived (``"a quarter of the rank's 8 GiB"``), or "".
        advice: what else helps, after "raise the byte budget (streaming_byte_budget_gb)", or "".
        where: what comes first in the message (a mixture's dataset), or "".
    """
    e, n = int(episode_index), int(nbytes)
    fields: dict[str, Any] = {"episode_index": e}
    if n < 0:
        msg = f"episode {e} reports a negative byte size ({n})"
    elif byte_budget is not None and n > byte_budget:
        b = int(byte_budget)
        msg = (
            f"episode {e} needs {n} bytes ({n / 2**30:.3f} GiB) of synthesized MP4 but {holder} has a "
            f"byte budget of {b} bytes ({b / 2**30:.3f} GiB{'; ' + budget_is if budget_is else ''}); raise the "
            f"byte budget (streaming_byte_budget_gb){' ' + advice if advice else ''}"
        )
        fields.update(nbytes=n, byte_budget=b)
    else:
        return None
    return ByteBudgetError(f"{where}: {msg}" if where else msg, **fields)


class ShardingError(LeRobotStreamError, ValueError):
    """A rank would own no episode (lower the number of ranks or select more episodes)."""


class ResumeStateError(LeRobotStreamError, ValueError):
    """A saved stream state cannot be resumed: a setting that fixes the order differs (each one
    listed), the state was edited or is malformed, or another build's schema (start a new run)."""


class StreamingConfigError(LeRobotStreamError, ValueError):
    """A ``--dataset.streaming_*`` training flag or a ``StreamingLeRobotDataset`` option has an
    invalid value (the message names the flag/option and the value; raised at construction)."""


class OptionArgumentError(StreamingConfigError, TypeError):
    """A constructor's arguments do not fit its signature (an unknown keyword, an argument given
    twice, more positional arguments than LeRobot's, ``options=`` not a ``StreamOptions``); a
    ``TypeError`` too, as Python's own (the message names the argument)."""


class MixtureFeatureError(StreamingConfigError):
    """Datasets of a mixture disagree on a common feature (shape or dtype): the message names the
    feature, both datasets and both values (raised at construction)."""


class LoaderWorkerError(LeRobotStreamError, RuntimeError):
    """A ``StreamLoader`` worker died or failed, or delivered no batch within the loader's
    ``timeout`` (names the worker, its PID and its exit code, exception or stall; fields
    ``worker``, ``pid``, ``exitcode``, ``stalled_s``)."""


class LeRobotIntegrationError(LeRobotStreamError, RuntimeError):
    """The installed LeRobot lacks a seam ``lerobotstream-train`` relies on (unsupported version)."""


# --- OPTIONAL PACKAGES ------------------------------------------------------------------------
class MissingDependencyError(LeRobotStreamError, ImportError):
    """An optional package a feature needs is not installed (``s3fs`` for ``s3://``, matplotlib for
    ``--plot``): names the feature, the pip ``package`` and the module (``name``) that failed to
    import. Not a ``SourceError``: no class can be both an ``OSError`` and an ``ImportError``."""


class ExtensionBuildError(LeRobotStreamError, ImportError):
    """A compiled extension is not built for the running Python (a source checkout built for
    another Python, or never built, shadowing an installed copy): names the module, the Python and
    the builds found."""


__all__ = [name for name, obj in list(globals().items()) if isinstance(obj, type) and issubclass(obj, Exception)]


#: exit status of a command stopped by Ctrl-C (128 + SIGINT, as shells report it)
EXIT_INTERRUPTED = 130


def error_line(e: BaseException) -> str:
    """The one line a CLI prints for ``e``: ``error: <Type>: <message>`` (whitespace folded)."""
    msg = " ".join(str(e).split()) or repr(e)
    return f"error: {type(e).__name__}: {msg}"


#: exit status of a command whose reader closed stdout early (128 + SIGPIPE, as Unix tools)
EXIT_CLOSED_STDOUT = 141


def run_cli(body: Callable[[], int], *, debug: bool = False) -> int:
    """Run a command-line body and return its exit status. Any exception prints one line
    ``error: <Type>: <message>`` on stderr and gives status 2; Ctrl-C (``KeyboardInterrupt``)
    prints ``interrupted`` and gives status 130 — unless ``debug`` (a ``--debug`` flag) or
    ``LEROBOTSTREAM_DEBUG`` is set, where either propagates with its traceback.

    A reader closing stdout early (``cmd | head -2``) ends it quietly: stdout is flushed before
    returning (not at interpreter exit), then pointed at ``os.devnull``, and
    :data:`EXIT_CLOSED_STDOUT` returned without an error line. A ``BrokenPipeError`` from anything
    but stdout is an error like any other."""
    import os

    from lerobotstream.constants import debug_enabled

    try:
        status = body()
        sys.stdout.flush()
        return status
    except KeyboardInterrupt:
        if debug or debug_enabled():
            raise
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as e:  # noqa: BLE001 - one typed line for every failure
        if isinstance(e, BrokenPipeError) and _stdout_closed():
            with contextlib.suppress(OSError, ValueError):
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, sys.stdout.fileno())
                os.close(devnull)
            return EXIT_CLOSED_STDOUT
        if debug or debug_enabled():
            raise
        print(error_line(e), file=sys.stderr)
        return 2


def _stdout_closed() -> bool:
    """True when stdout's reader has gone (flushing fails, or poll reports an error/hang-up)."""
    try:
        sys.stdout.flush()
    except (BrokenPipeError, ValueError):
        return True
    except OSError:
        return False
    try:
        import select

        poller = select.poll()
        poller.register(sys.stdout.fileno(), 0)  # POLLERR / POLLHUP are always reported
        return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in poller.poll(0))
    except (AttributeError, OSError, ValueError):
        return False


_CAUGHT = re.compile(
    r"\ACaught (\w+) (in DataLoader worker process \d+)\.\nOriginal Traceback \(most recent call last\):\n"
)


def worker_error(exc: BaseException) -> BaseException | None:
    """The original error of a DataLoader worker from torch's re-raised copy
    (``ExceptionWrapper.reraise``: ``type(exc)("Caught <Type> in DataLoader worker process N.\n
    Original Traceback ...")``, the whole worker traceback).

    Returns:
        A new exception of the same type whose message is the original one followed by
        ``" (in DataLoader worker process N)"``, or None when ``exc`` is not such a copy (or its
        type cannot be rebuilt from one message).
    """
    text = getattr(exc, "message", None)
    if not isinstance(text, str):
        text = exc.args[0] if exc.args and isinstance(exc.args[0], str) else str(exc)
    m = _CAUGHT.match(text)
    if m is None or m.group(1) != type(exc).__name__:
        return None
    block = text.rsplit("Traceback (most recent call last):\n", 1)[-1]  # the last (raised) exception
    lines = block.split("\n")
    first = next((i for i, line in enumerate(lines) if line and not line.startswith(" ")), None)
    if first is None:
        return None
    body = "\n".join(lines[first:]).rstrip("\n")
    names = (f"{type(exc).__module__}.{type(exc).__qualname__}", type(exc).__qualname__)
    for name in names:
        if body.startswith(name + ": "):
            body = body[len(name) + 2 :]
            break
        if body == name:
            body = ""
            break
    else:
        return None
    try:
        out = type(exc)(f"{body} ({m.group(2)})" if body else f"({m.group(2)})")
    except Exception:  # noqa: BLE001 - a type that cannot be rebuilt keeps torch's copy
        return None
    return out
