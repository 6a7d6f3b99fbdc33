# cython: language_level=3
"""Map a C status code (csrc/lrs_status.h) to one typed Mp4Error: the only such mapping."""

from lerobotstream.errors import (
    Mp4Error,
    Mp4InconsistentTablesError,
    Mp4TruncatedError,
    Mp4UnsupportedError,
)

from lerobotstream.mp4._c cimport (
    LRS_E_BADBOX,
    LRS_E_INCONSISTENT,
    LRS_E_OVERFLOW,
    LRS_E_TRUNCATED,
    LRS_E_UNSUPPORTED,
    LRS_OK,
)

STATUS_OK = LRS_OK
E_TRUNCATED = LRS_E_TRUNCATED
E_BADBOX = LRS_E_BADBOX
E_OVERFLOW = LRS_E_OVERFLOW
E_UNSUPPORTED = LRS_E_UNSUPPORTED
E_INCONSISTENT = LRS_E_INCONSISTENT

_CLASSES = {
    LRS_E_TRUNCATED: Mp4TruncatedError,
    LRS_E_BADBOX: Mp4Error,
    LRS_E_OVERFLOW: Mp4Error,
    LRS_E_UNSUPPORTED: Mp4UnsupportedError,
    LRS_E_INCONSISTENT: Mp4InconsistentTablesError,
}


def status_error(int code, str path, str box, long long offset, str reason):
    """Build the typed exception for a negative status.

    Args:
        code: an ``LRS_E_*`` value (negative).
        path: the MP4's path, named in the message ("" if unknown).
        box: fourcc of the box being read ("" if none).
        offset: file offset of that box in bytes (-1 if unknown).
        reason: the C layer's reason text.

    Returns:
        An ``Mp4Error`` subclass instance (``Mp4TruncatedError``, ``Mp4InconsistentTablesError``,
        ``Mp4UnsupportedError`` or the base ``Mp4Error``) with fields ``path``, ``box``, ``offset``,
        ``code``; the message names file, box, offset and reason.
    """
    cls = _CLASSES.get(code, Mp4Error)
    where = f" box '{box}'" if box else ""
    at = f" at offset {offset}" if offset >= 0 else ""
    msg = f"MP4 {path or '<bytes>'}:{where}{at}: {reason}"
    return cls(msg, path=path, box=box, offset=offset, code=code)


def raise_status(int code, str path, str box, long long offset, str reason):
    """Raise :func:`status_error` for ``code``; do nothing when ``code`` is 0 (ok)."""
    if code == LRS_OK:
        return
    raise status_error(code, path, box, offset, reason)
