"""Decoder plumbing: FrameTimestampError, tolerance, OpenDecoderLRU LRU/close/fork, CUDA path with the
device absent (capability check, counted fallback, error text), PyAV fallback."""

from __future__ import annotations

import os
import subprocess
from types import SimpleNamespace

import pytest
import torch

pytest.importorskip("torchcodec")

from lerobotstream.decode import _cuda
from lerobotstream.decode._cuda import FallbackStatus, nvdec_capability, resolve_device
from lerobotstream.decode._decoder import EpisodeDecoder, EpisodeVideo
from lerobotstream.decode._open_decoders import OpenDecoderLRU
from lerobotstream.errors import DecodeError, FrameTimestampError  # noqa: E402
from lerobotstream.mp4.parse import parse_mp4_bytes  # noqa: E402
from lerobotstream.mp4.spans import plan_span
from lerobotstream.mp4.synth import synthesize


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    p = tmp_path_factory.mktemp("clip") / "h264.mp4"
    subprocess.run(
        [
            "ffmpeg",
            "-loglevel",
            "error",
            "-y",
            "-f",
            "lavfi",
            "-i",
            "testsrc2=s=64x48:r=30:d=1",
            "-c:v",
            "libx264",
            "-bf",
            "2",
            "-g",
            "10",
            "-pix_fmt",
            "yuv420p",
            str(p),
        ],
        check=True,
    )
    data = p.read_bytes()
    t = parse_mp4_bytes(data, path="h264.mp4")
    s = plan_span(t, 12, 18)
    return t, s, synthesize(t, s, data[s.byte_start : s.byte_stop])


def _video(clip, **kw):
    t, s, mini = clip
    base = dict(
        episode_index=7,
        camera="observation.images.front",
        path="videos/front/file-000.mp4",
        from_timestamp=12 / 30,
        fps=30,
    )
    base.update(kw)
    return EpisodeVideo(t, s, mini, **base)


def test_frame_timestamp_error_names_everything(clip):
    v = _video(clip)
    with pytest.raises(FrameTimestampError) as ei:
        v.frames_at([0, 10])  # frame 10 = 22/30 s is outside the span
    e = ei.value
    msg = str(e)
    assert "episode 7" in msg and "observation.images.front" in msg and "file-000.mp4" in msg
    assert e.episode_index == 7 and e.path.endswith("file-000.mp4")
    assert e.requested_s == pytest.approx(22 / 30) and e.nearest_s == pytest.approx(float(v.source_pts_s[-1]))
    assert e.nearest_s < e.requested_s


def test_tolerance_is_strict(clip):
    v = _video(clip, from_timestamp=12 / 30 + 1.001e-4, tolerance_s=1e-4)
    with pytest.raises(FrameTimestampError):
        v.frames_at([0])
    v = _video(clip, from_timestamp=12 / 30 + 0.999e-4)
    assert v.frames_at([0]).shape == (1, 3, 48, 64)
    with pytest.raises(ValueError):
        _video(clip, tolerance_s=0)


def test_streamed_query_time_is_exact_float64(clip):
    v = _video(clip, from_timestamp=1000.0)
    assert v.query_times([100_000])[0] == 1000.0 + 100_000 / 30


def _closing_decoder_class(closed: list):
    """A stand-in decoder class whose ``close()`` appends its key to ``closed``."""

    class D:
        def __init__(self, k):
            self.k = k

        def close(self):
            closed.append(self.k)

    return D


def test_decoder_cache_lru_closes_on_eviction():
    closed = []
    D = _closing_decoder_class(closed)

    c = OpenDecoderLRU(2)
    for k in "abc":
        c.get_or_open(k, lambda k=k: D(k))
    assert closed == ["a"] and len(c) == 2 and "a" not in c
    c.get_or_open("b", lambda: D("never opened"))  # open already: marked most recently used
    c.get_or_open("d", lambda: D("d"))
    assert closed == ["a", "c"]
    c.pop("b")
    c.clear()
    assert sorted(closed) == ["a", "b", "c", "d"] and len(c) == 0
    with pytest.raises(ValueError):
        OpenDecoderLRU(0)


def test_decoder_cache_forgets_parent_decoders_after_fork():
    c = OpenDecoderLRU(2)
    c.get_or_open("a", lambda: SimpleNamespace(close=lambda: None))
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: the parent's decoder is not visible
        os.write(w, b"1" if ("a" not in c and len(c) == 0) else b"0")
        os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(r, 1) == b"1" and "a" in c


def test_episode_decoder_refuses_use_across_fork(clip):
    t, s, mini = clip
    d = EpisodeDecoder(mini, s, codec=t.codec, label="ep 0")
    d.pid = -1  # as if opened in another process
    with pytest.raises(DecodeError, match="fork"):
        d.decode([0])


def test_cpu_device_has_no_fallback(clip):
    st = FallbackStatus()
    t, s, mini = clip
    d = EpisodeDecoder(mini, s, codec=t.codec, device="cpu", status=st)
    assert d.device == "cpu" and st.fallback_count == 0 and st.pyav_fallbacks == 0


def test_cuda_without_device_falls_back_counted_and_logged(clip, monkeypatch, caplog):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    st = FallbackStatus()
    t, s, mini = clip
    with caplog.at_level("WARNING", logger="lerobotstream.decode"):
        v = _video(clip, device="cuda", status=st)
        out = v.frames_at([0, 1])
    assert out.device.type == "cpu"
    assert st.fallback_count == 1 and "no CUDA device" in st.last_reason
    assert "NVDEC unavailable" in caplog.text
    ok, why = nvdec_capability("av01")
    assert not ok and "is_available() is False" in why


@pytest.mark.parametrize(
    "cap,codec,ok",
    [
        ((8, 0), "av01", False),
        ((8, 6), "av01", True),
        ((9, 0), "av01", False),
        ((8, 9), "av01", True),
        ((10, 0), "av01", True),
        ((9, 0), "hev1", True),
        ((8, 0), "avc1", True),
        ((5, 2), "hev1", False),
        ((7, 5), "hvc1", True),
        ((9, 0), "mp4v", False),
    ],
)
def test_capability_matrix(monkeypatch, cap, codec, ok):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "_is_in_bad_fork", lambda: False, raising=False)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i=0: cap)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "FakeGPU")
    got, why = nvdec_capability(codec, "cuda:0")
    assert got is ok
    st = FallbackStatus()
    dev = resolve_device("cuda:0", codec, status=st)
    assert dev == ("cuda:0" if ok else "cpu") and st.fallback_count == (0 if ok else 1)
    if not ok and codec == "av01":
        assert "FakeGPU" in why and "8.6" in why


def test_capable_gpu_but_torchcodec_cannot_open_cuda_falls_back(clip, monkeypatch):
    """A CPU-only torchcodec raises 'Unsupported device: cuda': fall back to CPU, counted."""
    monkeypatch.setattr(_cuda, "nvdec_capability", lambda codec, device="cuda": (True, ""))
    st = FallbackStatus()
    t, s, mini = clip
    d = EpisodeDecoder(mini, s, codec=t.codec, device="cuda", status=st)
    assert d.device == "cpu" and st.fallback_count == 1 and "could not open on cuda" in st.last_reason
    assert d.decode([0]).shape == (1, 3, 48, 64)


def test_cuda_in_bad_fork_falls_back(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "_is_in_bad_fork", lambda: True, raising=False)
    ok, why = nvdec_capability("avc1")
    assert not ok and "forked" in why


def test_bad_device_string():
    with pytest.raises(ValueError):
        resolve_device("mps", "avc1")


def test_pyav_fallback_matches_torchcodec(clip, monkeypatch):
    t, s, mini = clip
    ref = EpisodeDecoder(mini, s, codec=t.codec).decode([5, 0, 3, 3])

    def boom(self, device, n):
        raise RuntimeError("rejected")

    monkeypatch.setattr(EpisodeDecoder, "_open_torchcodec", boom)
    st = FallbackStatus()
    d = EpisodeDecoder(mini, s, codec=t.codec, status=st)
    assert d.backend == "pyav" and st.pyav_fallbacks == 1
    assert torch.equal(d.decode([5, 0, 3, 3]), ref)
    with pytest.raises(DecodeError):
        EpisodeDecoder(mini, s, codec=t.codec, allow_pyav=False)


def test_closed_decoder_raises_and_video_reopens(clip):
    v = _video(clip, cache=OpenDecoderLRU(1))
    a = v.frames_at([0, 2])
    v.close()
    assert torch.equal(v.frames_at([0, 2]), a)
    t, s, mini = clip
    d = EpisodeDecoder(mini, s, codec=t.codec)
    d.close()
    with pytest.raises(DecodeError, match="closed"):
        d.decode([0])


def test_decoder_cache_never_closes_a_pinned_decoder():
    """Bug: another thread's open evicted (and closed) a decoder in use. Pinned decoders are never
    evicted; with all pinned the cache exceeds its capacity until they are released."""
    closed = []
    D = _closing_decoder_class(closed)

    c = OpenDecoderLRU(1)
    a = c.acquire("a", lambda: D("a"))
    b = c.acquire("b", lambda: D("b"))  # over capacity: "a" is pinned, so nothing is closed
    assert closed == [] and len(c) == 2 and len(c._pins) == 2
    c.release(a)  # "a" is the LRU unpinned one: closed now that it is released
    assert closed == ["a"] and len(c) == 1
    c.pop("b")  # pinned: forgotten now, closed on its last release
    assert closed == ["a"] and "b" not in c
    c.release(b)
    assert closed == ["a", "b"]
    with c.pinned("x", lambda: D("x")) as x:
        c.clear()
        assert closed == ["a", "b"] and x.k == "x"
    assert closed == ["a", "b", "x"] and len(c._pins) == 0


def test_decoder_cache_threads_never_use_closed_decoders(clip):
    """Many threads decoding distinct keys through one capacity-1 cache: no closed-decoder errors."""
    import threading

    cache = OpenDecoderLRU(1)
    videos = [_video(clip, cache=cache, cache_key=("k", i)) for i in range(4)]
    ref = videos[0].frames_at([0, 3, 5])
    errors = []

    def run(v):
        try:
            for _ in range(15):
                assert torch.equal(v.frames_at([0, 3, 5]), ref)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    ts = [threading.Thread(target=run, args=(v,)) for v in videos]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert errors == []
    assert len(cache._pins) == 0 and len(cache) <= 1


def test_closed_decoder_error_is_internal_not_a_backend_failure(clip):
    t, s, mini = clip
    d = EpisodeDecoder(mini, s, codec=t.codec)
    d.close()
    assert d.closed
    with pytest.raises(DecodeError, match="internal error: decode\\(\\) on a closed decoder"):
        d.decode([0])
