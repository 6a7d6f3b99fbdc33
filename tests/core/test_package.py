"""The package imports, exposes a version, and its errors carry fields across pickling."""

import pickle

import lerobotstream
from lerobotstream import errors
from lerobotstream.sources._local import LocalSource


def test_version():
    assert isinstance(lerobotstream.__version__, str) and lerobotstream.__version__.count(".") >= 2


def test_errors_inherit_builtins_and_pickle():
    e = errors.FrameTimestampError("episode 3 camera top: no frame", episode_index=3, camera="top")
    assert isinstance(e, LookupError) and isinstance(e, errors.LeRobotStreamError)
    e2 = pickle.loads(pickle.dumps(e))
    assert type(e2) is errors.FrameTimestampError and e2.episode_index == 3 and str(e2) == str(e)
    assert issubclass(errors.SourceNotFoundError, FileNotFoundError)
    assert issubclass(errors.SidecarLockTimeoutError, TimeoutError)


def test_local_source_reads(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "f.bin").write_bytes(bytes(range(100)))
    src = LocalSource(tmp_path)
    assert src.size("a/f.bin") == 100
    assert src.read_ranges("a/f.bin", [(0, 3), (97, 3)]) == [b"\x00\x01\x02", b"\x61\x62\x63"]
    assert src.list("a") == ["a/f.bin"]
    assert src.stats.requests == 2 and src.stats.bytes_read == 6
    try:
        src.read("a/f.bin", 99, 5)
    except errors.RangeReadError as e:
        assert "f.bin" in str(e)
    else:
        raise AssertionError("short read not detected")
