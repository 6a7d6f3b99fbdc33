"""Smoke tests of tools/scale_sim.py (the scale model's simulator): a tiny size end to end, and
the synthetic dataset checked against the real index and span code (no timing assertions)."""

from __future__ import annotations

import numpy as np

from tools import scale_sim


def test_file_assignment_follows_lerobot_writer_rule() -> None:
    p = scale_sim.PRESETS["tiny"]
    lens = scale_sim.episode_lengths(p, 0)
    assert int(lens.sum()) == p.frames and lens.min() >= 30
    ep_bytes = scale_sim.episode_bytes_per_camera(p, lens, 0)
    src_of, sources = scale_sim.assign_files(p, ep_bytes)
    seen = np.zeros(src_of.shape, dtype=int)
    for sid, eps in enumerate(sources):
        assert eps == sorted(eps) and eps == list(range(eps[0], eps[-1] + 1))  # whole, consecutive episodes
        c = int(np.flatnonzero(src_of[eps[0]] == sid)[0])
        assert (src_of[eps, c] == sid).all()
        seen[eps, c] += 1
        if len(eps) > 1:  # only a single episode may exceed the file limit
            assert ep_bytes[eps[:-1], c].sum() <= p.file_mb * 1e6
    assert (seen == 1).all()  # every (episode, camera) in exactly one file


def test_synthetic_windows_resolve_through_real_index(tmp_path) -> None:
    from lerobotstream.mp4._index_file import Mp4Index
    from lerobotstream.mp4.spans import episode_frame_range, plan_span

    p = scale_sim.PRESETS["tiny"]
    rec = scale_sim.build(p, tmp_path, seed=1)
    assert rec["samples"] == p.samples and rec["derived_bytes"] > 0
    meta = np.load(tmp_path / "episodes.npz")
    lens, src_of, from_ts = meta["lengths"], meta["source"], meta["from_timestamp"]
    idx = Mp4Index.open(tmp_path / "sidecar.npz", index_dir=tmp_path / "indexes")
    assert sum(idx.table(s).num_samples for s in range(idx.num_sources)) == p.samples
    for ep in range(p.episodes):
        for c in range(p.cameras):
            sid = int(src_of[ep, c])
            t = idx.table(sid)
            a, b = episode_frame_range(t, float(from_ts[ep, c]), int(lens[ep]), p.fps)
            assert b - a == lens[ep]  # exactly the episode's frames
            assert bool(t.is_sync[a])  # each episode was encoded on its own: starts on a keyframe
            s = plan_span(t, a, b)
            assert s.sample_start == a and s.sample_stop == b
            assert scale_sim.HEADER_BYTES <= s.byte_start < s.byte_stop <= idx.source_info(sid)["size"]
            assert s.synth_nbytes > s.byte_stop - s.byte_start


def test_tiny_end_to_end_in_subprocesses(tmp_path) -> None:
    results = scale_sim.run("tiny", [4, 8], workdir=tmp_path, max_anchors=10_000, log=lambda s: None)
    assert [r["preset"]["name"] for r in results] == ["tiny"]
    r = results[0]
    assert [k["world"] for k in r["ranks"]] == [4, 8]
    for k in r["ranks"]:
        assert 0 < k["sources_touched"] <= k["sources_total"] == r["sources"]
        assert k["rank_episodes"] >= scale_sim.PRESETS["tiny"].episodes // k["world"] - 1
        assert k["rank_balance_max_over_mean"] >= 1.0
        assert k["mem"]["spans"]["rss_mb"] >= 0
    table = scale_sim.markdown(results)
    assert "| tiny |" in table
    assert not (tmp_path / "tiny").exists()  # builds are removed unless --keep


def test_validate_measurement_runs_and_finds_nothing_wrong() -> None:
    rec = scale_sim.simulate_validate(20, workers=2)
    assert rec["files"] == 20 and rec["requests"] > 0
    assert rec["bytes_per_file"] < rec["file_bytes"] / 4  # headers, not the payload
    assert set(rec["findings"]) <= {"not_faststart"} or rec["findings"] == {}


def test_elastic_measurement_hands_the_remainder_to_a_worker(tmp_path) -> None:
    """--elastic's two halves on the tiny preset: the training process writes this rank's part, a
    worker process takes it without computing the remainder again."""
    ship = tmp_path / "ship.pkl"
    r = scale_sim.simulate_elastic("tiny", (4, 2, 8), (3, 3, 5), ship=ship)
    assert r["samples_left"] + r["consumed_all_ranks"] == r["frames"] and ship.stat().st_size == r["ship_bytes"]
    w = scale_sim.simulate_elastic_worker("tiny", (4, 2, 8), (3, 3, 5), ship)
    assert w["t_worker_s"] >= 0 and w["ship_bytes"] == r["ship_bytes"]
