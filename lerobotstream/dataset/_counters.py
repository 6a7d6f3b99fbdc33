"""A stream's per-process counters: each part's own (source, fetches, decodes, decoders) and
the worker's shared ones (pipeline stage times, the byte cache, the decoded-GOP cache), read
from its :class:`~lerobotstream.dataset._wiring.Readers` (``stats()``, ``source_stats()``)."""

from __future__ import annotations

from typing import Any

__all__ = ["PROCESS_KEYS", "one_per_process", "part_stats", "pipeline_stats", "source_stats"]

#: Counters of the payload and metadata sources, which every shard of one process shares (threads
#: mode): summed over processes, never over the shards of one process.
PROCESS_KEYS = ("source", "metadata_source", "bytes_fetched", "requests")


def one_per_process(parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The first of ``parts`` (``stats()`` of shards) from each process (``pid``)."""
    seen: dict[Any, dict[str, Any]] = {}
    for p in parts:
        seen.setdefault(p.get("pid"), p)
    return list(seen.values())


def part_stats(readers: Any, d: int) -> dict[str, Any]:
    """Part ``d``'s own counters in this process (see ``StreamingLeRobotDataset.stats``)."""
    reader = readers.readers[d]
    src = reader.source.stats.as_dict()
    fb = reader.fallback
    out: dict[str, Any] = {
        "pid": reader.pid,
        "source": src,
        "bytes_fetched": int(src.get("bytes_read", 0)),
        "requests": int(src.get("requests", 0)),
        "decoder_opens": reader.decoders.opened,
        "decoder_evictions": reader.decoders.evicted,
        "open_decoders": len(reader.decoders),
        "decoder_capacity": reader.decoders.capacity,
        "decoder_fallbacks": fb.fallback_count,
        "pyav_fallbacks": fb.pyav_fallbacks,
        "fallback_reasons": dict(fb.cpu_fallbacks),
        "index_open_s": reader.index_open_s,
        "episodes_sized": len(readers.sizes[d]),
    }
    with reader.lock:
        out.update(
            {
                k: (int(v) if k.startswith(("frames", "decode_calls", "bytes", "episodes", "items")) else v)
                for k, v in reader.counts.items()
            }
        )
    out["spans_s"] = reader.spans.planned_s
    with reader.lock:
        out["bytes_by_epoch"] = {e: dict(row) for e, row in sorted(reader.by_epoch.items())}
    if reader.disk is not None:
        out["disk_cache"] = {**reader.disk.counters, "limit_bytes": reader.disk.limit_bytes}
    out["frames_decoded_per_returned"] = (
        out["frames_decoded"] / out["frames_returned"] if out["frames_returned"] else None
    )
    meta_source = reader.cfg.meta.source
    if meta_source is not reader.source:
        out["metadata_source"] = meta_source.stats.as_dict()
    return out


def pipeline_stats(readers: Any) -> dict[str, Any]:
    """The worker's shared counters: pipeline stage times, the byte cache, the decoded-GOP cache."""
    t = readers.times
    gops = readers.gops
    out: dict[str, Any] = {
        "assemble_s": t.assemble_s,
        "queue_wait_s": t.queue_wait_s,
        "admit_wait_s": t.admit_wait_s,
        "decode_job_s": t.decode_job_s,
        "chunks": t.chunks,
        "first_item_s": t.first_item_s,
        "gop_cache_bytes": gops.nbytes,
        "gop_cache_peak_bytes": gops.peak_nbytes,
        "gop_cache_capacity_bytes": gops.capacity_bytes,
        "gop_cache_evictions": gops.evictions,
    }
    c = readers.cache
    if c is not None:
        out.update(
            reserved_bytes=c.reserved_bytes,
            resident_bytes=c.resident_bytes,
            byte_budget=c.byte_budget,
            cache=c.stats.as_dict(),
        )
    else:
        out.update(reserved_bytes=0, resident_bytes=0, byte_budget=0, cache={})
    return out


def source_stats(readers: Any) -> list[dict[str, Any]]:
    """Each part's payload-source counters (``ByteSource.stats``) in ``readers`` (empty: none yet)."""
    return [] if readers is None else [r.source.stats.as_dict() for r in readers.readers]
