"""``StreamingLeRobotDataset``: the torch ``IterableDataset`` users train on.

The constructor opens the byte sources (metadata from ``root`` / ``repo_id``, payload from
``data_root`` when given), loads the metadata, plans cameras and windows and makes sure of the
validated MP4 sidecar. The per-process state is the stream core's
(:mod:`lerobotstream.dataset._stream`: this dataset is one part). Resume: docs/resume.md.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from lerobotstream import constants
from lerobotstream._slow import announce_if_slow
from lerobotstream.dataset._assemble import DeltaWindows
from lerobotstream.dataset._reader import ReaderConfig
from lerobotstream.dataset._stream import LoaderSettings, StreamCore, add_option_views, plan_settings
from lerobotstream.dataset._wiring import StreamPart
from lerobotstream.errors import MetadataError, Mp4Error, StreamingConfigError, naming
from lerobotstream.meta import LANGUAGE_COLUMNS, DatasetMeta
from lerobotstream.options import StreamOptions, check_tolerance, constructor_signature
from lerobotstream.sources import open_source

log = logging.getLogger("lerobotstream.dataset")

__all__ = ["CameraPlan", "StreamingLeRobotDataset", "plan_cameras"]


class StreamingLeRobotDataset(StreamCore):
    """Stream a LeRobotDataset v3 (Parquet + concatenated MP4) with map-style-identical items.

    Args:
        repo_id: ``OWNER/NAME`` on the Hub (also names local datasets' caches).
        root: local folder, ``hf://`` / ``hf://buckets/`` or any fsspec URL of the dataset.
        options: a :class:`~lerobotstream.options.StreamOptions`; keywords given beside it override it.
        *args, **kwargs: the options. Positional arguments follow LeRobot 0.6.1's
            ``StreamingLeRobotDataset``: episodes, image_transforms, delta_timestamps, tolerance_s,
            revision, force_cache_sync, streaming, buffer_size, max_num_shards, seed, rng, shuffle,
            return_uint8, depth_output_unit; every other option is keyword-only. LeRobot's
            force_cache_sync, streaming, buffer_size, rng and shuffle are no options here: accepted
            (by position or keyword) at LeRobot's defaults, the values that ask for what the stream
            does; another value raises StreamingConfigError naming the option to use instead
            (``shuffle=False``: ``sampling_strategy="sequential"``; ``rng``: ``seed``). Every option,
            its default, unit and rule: :class:`~lerobotstream.options.StreamOptions` and
            ``docs/options.md`` (generated from it).
    ``ds.options``: the resolved, frozen options every layer reads (``seed=None`` as 42,
    ``num_workers`` from ``max_num_shards`` when unset); each option is also a read-only attribute.

    Epochs: ``repeat=False`` yields one epoch per iterator (``set_epoch(e)`` for the next, like
    ``DistributedSampler``); ``repeat=True`` chains epochs endlessly. With
    ``persistent_workers=True`` the k-th iterator of a worker plays epoch ``e0 + k`` (``e0``: the
    epoch when the workers started): the workers never see later ``set_epoch`` calls.

    Items: see :func:`lerobotstream.dataset._assemble.assemble_item`.

    Raises:
        StreamingConfigError (a ValueError naming the option and its value) at construction;
        MetadataError, DeltaTimestampsError, ShardingError at construction or iteration start;
        Sidecar* errors at construction; ByteBudgetError before any payload fetch; ResumeStateError
        from ``load_state_dict`` (or the first worker batch); DecodeError / FrameTimestampError /
        SourceError during iteration (messages name episode, camera and file).
    """

    def __init__(
        self,
        repo_id: str | None = None,
        root: str | os.PathLike | None = None,
        *args: Any,
        options: StreamOptions | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__()
        self.options = o = StreamOptions.from_arguments(options, args, kwargs, "StreamingLeRobotDataset").resolved()
        t0 = time.perf_counter()
        self.repo_id, self.root = repo_id, root
        self._episodes = None if o.episodes is None else sorted({int(e) for e in o.episodes})
        meta_source = open_source(
            root, repo_id=repo_id, revision=o.revision, repo_type=o.repo_type, read_timeout_s=o.read_timeout_s
        )
        self._payload_source = (
            meta_source if o.data_root is None else open_source(o.data_root, read_timeout_s=o.read_timeout_s)
        )
        with announce_if_slow(log, f"lerobotstream: reading the metadata of {repo_id or root}"):
            self.meta = DatasetMeta.load(meta_source, episodes=o.episodes, repo_id=repo_id)
        check_tolerance(o.tolerance_s, self.meta.fps, where=self.meta.repo_id or _root_name(root))
        self.select_cameras(o.camera_keys, o.delta_timestamps)
        self.meta.rescale_depth_stats(o.depth_output_unit)  # as LeRobot 0.6.1: stats match the returned unit
        self.windows = DeltaWindows(o.delta_timestamps, self.meta.fps, o.tolerance_s, self.meta.features)
        if o.drop_n_last_frames and not (self.meta.episode_lengths > o.drop_n_last_frames).any():
            raise StreamingConfigError(
                f"drop_n_last_frames={o.drop_n_last_frames} leaves no anchor: every selected episode of "
                f"{self.meta.repo_id} has at most that many frames"
            )
        if o.partitions is not None:  # its rules (>= ranks x workers, <= episodes) before any fetch
            self._planner(self.loader_settings())
        self._setup = {"metadata_s": time.perf_counter() - t0}
        t1 = time.perf_counter()
        self._sidecar_npz, self._sidecar_how = self._find_sidecar()
        self._setup["sidecar_s"] = time.perf_counter() - t1
        # import torchcodec (~1 s) and the per-worker modules here: forked workers start with them loaded
        t2 = time.perf_counter()
        import lerobotstream.decode._decoder  # noqa: F401  (with _cuda, _depth, _frames, _lean)
        import lerobotstream.decode._open_decoders  # noqa: F401
        import lerobotstream.parquet  # noqa: F401
        import lerobotstream.planner._planner  # noqa: F401  (with the rest of the planner)

        try:
            import torchcodec.decoders  # noqa: F401
        except Exception:  # reported by the first decode, with episode/camera/file
            pass
        self._setup["torchcodec_import_s"] = time.perf_counter() - t2

    def select_cameras(self, camera_keys: Sequence[str] | None, delta_timestamps: dict | None = None) -> None:
        """Decode only ``camera_keys`` (None: every camera); raises as the constructor does."""
        windows = delta_timestamps if delta_timestamps is not None else self.options.delta_timestamps
        self._cameras = plan_cameras(
            self.meta, camera_keys, list((windows or {}).keys()), self.options.depth_output_unit
        )
        self.video_keys = self._cameras.video_keys  # decoded videos, RGB and depth
        self.image_keys = self._cameras.image_keys  # decoded image features
        self.depth_keys = self._cameras.depth_keys  # decoded depth videos
        self.transform_keys = self._cameras.transform_keys  # decoded cameras image_transforms apply to

    def _find_sidecar(self) -> tuple[str, str]:
        """``(npz path, how)`` of the validated MP4 sidecar; a damaged MP4's error points to
        ``lerobotstream-validate``."""
        from lerobotstream.sidecar import ensure_sidecar, open_sidecar

        o = self.options
        rid = self.repo_id or self.meta.repo_id or f"local/{_root_name(self.root)}"
        try:
            npz, how = ensure_sidecar(
                self._payload_source,
                self.meta,
                repo_id=rid,
                revision=o.revision,
                repo_type=o.repo_type,
                lock_timeout_s=o.sidecar_lock_timeout_s,
                tolerance_s=o.tolerance_s,
                data_root=None if o.data_root is None else os.fspath(o.data_root),
                progress=constants.show_progress(),
            )
            open_sidecar(  # validate once, in the training process
                npz,
                self.meta,
                source=self._payload_source,
                tolerance_s=o.tolerance_s,
                lock_timeout_s=o.sidecar_lock_timeout_s,
            )
        except Mp4Error as e:
            if isinstance(self.root, (str, os.PathLike)):
                where = os.fspath(self.root)
            else:
                where = f"--repo-id {self.repo_id}" if self.repo_id else "ROOT"
            hint = (
                f"check the dataset with `lerobotstream-validate {where}` (it names every damaged file and the "
                "episodes in it; `--print-good-episodes` prints the episodes to train on), then re-download or "
                "re-encode the file"
            )
            raise type(e)(f"{e.message}; {hint}", **e.fields) from e
        return str(npz), how

    # --- LeRobot-like surface ---------------------------------------------------------------------
    @property
    def episodes(self) -> list[int] | None:
        """The selected episode indices, sorted (None: every episode)."""
        return self._episodes

    @property
    def fps(self) -> int:
        return self.meta.fps

    @property
    def features(self) -> dict:
        return self.meta.features

    @property
    def num_frames(self) -> int:
        return self.meta.num_frames

    @property
    def num_episodes(self) -> int:
        return self.meta.num_episodes

    @property
    def sidecar_status(self) -> str:
        """How the MP4 sidecar was obtained: ``"cache"``, ``"published"`` or ``"built"``."""
        return self._sidecar_how

    # --- planner and resume -----------------------------------------------------------------------
    def anchor_lengths(self) -> dict[int, int]:
        """Anchors per selected episode: its length minus ``drop_n_last_frames`` (LeRobot's
        ``EpisodeAwareSampler``: those last frames are never anchors; windows still read them)."""
        n_drop = self.options.drop_n_last_frames
        return {int(e): max(0, int(n) - n_drop) for e, n in zip(self.meta.episode_indices, self.meta.episode_lengths)}

    def _planner(self, loader: LoaderSettings | int, episode_nbytes: Sequence[Callable[[int], int]] | None = None):
        """This dataset's planner for ``loader`` (``episode_nbytes``: ``[EpisodeSizes]``; None: this process's)."""
        from lerobotstream.planner._planner import Planner
        from lerobotstream.planner._streams import Streams

        sizes = (episode_nbytes or self.episode_sizes())[0]
        settings = plan_settings(self.options, self.loader_settings(loader))
        with naming(self.meta.repo_id):  # a rule the settings break (partitions, ranks) names the dataset
            return Planner(Streams.of_dataset(self.anchor_lengths(), sizes), settings)

    def _part_count(self) -> int:
        return 1

    # --- the stream core's parts ------------------------------------------------------------------
    def reader_config(self) -> ReaderConfig:
        """What this dataset's per-process :class:`~lerobotstream.dataset._reader.DatasetReader` needs."""
        return ReaderConfig(
            meta=self.meta,
            payload_source=self._payload_source,
            sidecar_npz=self._sidecar_npz,
            cameras=self._cameras,
            windows=self.windows,
            options=self.options,
        )

    def _parts(self) -> list[StreamPart]:
        return [StreamPart(self.reader_config(), transform_keys=tuple(self._cameras.transform_keys))]

    @property
    def _reader(self):
        """This process's :class:`~lerobotstream.dataset._reader.DatasetReader` (None before iterating)."""
        return None if self._readers is None else self._readers.readers[0]

    def stats(self) -> dict[str, Any]:
        """Per-process counters (stable names; the profiler reads them). Empty before iterating.

        Keys:
            sidecar (str): ``"cache"`` | ``"published"`` | ``"built"``.
            source (dict): payload ``ByteSource.stats``; metadata_source (dict) when metadata
                comes from another root; bytes_fetched, requests (int): the payload source's totals.
            bytes_needed (int): MP4 payload bytes of the fetched spans.
            bytes_by_epoch (dict): epoch -> MP4 payload bytes (no Parquet rows) by origin:
                ``store_bytes``, ``disk_cache_bytes``, ``reused_bytes`` (admitted again, payload still
                in memory) and ``needed_bytes`` (the epoch's episodes' spans).
            disk_cache (dict, with ``cache_dir`` over a remote store): ``hits``, ``misses``,
                ``corrupt``, ``writes``, ``evictions``, ``bytes_read``, ``bytes_written``, ``limit_bytes``.
            episodes_fetched, decoder_opens, decoder_evictions, open_decoders, decoder_capacity (int).
            decoder_fallbacks (int): CUDA requests decoded on the CPU; pyav_fallbacks (int);
                fallback_reasons (dict reason → count).
            frames_decoded (int): frames decoded (whole GOP runs, each once while cached);
                frames_returned (int, window frames included); frames_unique, decode_calls (int);
                frames_decoded_per_returned (float | None).
            seconds, summed over threads: metadata_s, sidecar_s, torchcodec_import_s (the
                constructor's set-up: one per process, every shard of it reports the same),
                index_open_s, spans_s, parquet_s, fetch_s, synthesize_s, open_s, decode_s,
                assemble_s, transforms_s, queue_wait_s, admit_wait_s, decode_job_s; first_item_s.
            items, chunks (int).
            gop_cache_bytes, gop_cache_peak_bytes, gop_cache_capacity_bytes, gop_cache_evictions
                (int): the decoded-GOP cache.
            reserved_bytes, resident_bytes, byte_budget (int, bytes); cache (dict: ``CacheStats``).
        """
        return self._stats_of(self._readers)

    def _stats_of(self, readers: Any) -> dict[str, Any]:
        if readers is None:
            return {}
        return {
            "sidecar": self._sidecar_how,
            **readers.part_stats(0),
            **self._setup,
            **readers.pipeline_stats(),
            "items": readers.times.items,
        }

    def __repr__(self) -> str:
        return f"StreamingLeRobotDataset({self.meta!r}, cameras={self.video_keys + self.image_keys})"


StreamingLeRobotDataset.__init__.__signature__ = constructor_signature(  # type: ignore[attr-defined]
    StreamingLeRobotDataset.__init__, ("self", "repo_id", "root", "options")
)
add_option_views(StreamingLeRobotDataset)


def _root_name(root: Any) -> str:
    return os.path.basename(os.fspath(root).rstrip("/")) if root is not None else "dataset"


@dataclass
class CameraPlan:
    """The decoded cameras of one dataset (info order), as ``camera_keys=`` selects them among
    LeRobot's camera keys (video and image features); the others are never read. Depth keys get no
    image transforms (as in LeRobot); depth video is dequantised to ``depth_output_unit``, depth
    images converted from their ``depth_unit`` as map-style does."""

    video_keys: list[str]  # decoded video features (RGB and depth): each gets a mini-MP4 per episode
    image_keys: list[str]  # decoded ``image`` features (bytes in the Parquet rows)
    depth_keys: list[str]  # decoded depth video features (PyAV ``gray12le`` codes, dequantised)
    transform_keys: list[str]  # decoded camera keys ``image_transforms`` apply to (all but depth keys)
    #: depth video key → :class:`~lerobotstream.decode._depth.DepthDequantizer`
    dequantizers: dict = field(default_factory=dict)
    #: depth image key → unit conversion (``"mul"`` / ``"div"`` / None: ``_images.to_output_unit``)
    image_depth: dict = field(default_factory=dict)
    skipped_columns: list[str] = field(default_factory=list)  # ``image`` columns not decoded (never read)


def plan_cameras(
    meta: DatasetMeta, camera_keys: Sequence[str] | None, window_keys: Sequence[str], depth_output_unit: str = "mm"
) -> CameraPlan:
    """Resolve ``camera_keys`` (None: every camera) against the dataset's cameras, with the
    ``delta_timestamps`` keys ``window_keys`` and ``depth_output_unit`` (``"mm"`` or ``"m"``).

    Raises:
        MetadataError: a key is not a camera of the dataset; a selected depth video has an encoding
            that is not decoded losslessly or invalid quantiser parameters (names the camera).
        StreamingConfigError: a window on a camera that is not decoded, or on a language column or
            ``string`` feature; a selected depth video without PyAV, or image features without Pillow.
    """
    cameras = list(meta.camera_keys)
    if camera_keys is None:
        selected = set(cameras)
    else:
        unknown = [k for k in camera_keys if k not in cameras]
        if unknown:
            raise MetadataError(
                f"camera_keys {unknown} are not camera keys (video or image features) of {meta.repo_id} ({cameras})"
            )
        selected = set(camera_keys)
    decoded = [k for k in cameras if k in selected]
    skipped = [k for k in window_keys if k in cameras and k not in selected]
    if skipped:  # the items would carry a <key>_is_pad without its frames
        raise StreamingConfigError(
            f"delta_timestamps has windows on cameras {skipped} that camera_keys={decoded} does not decode: "
            "the items would carry their <key>_is_pad without the frames; add them to camera_keys or drop "
            "their windows",
            option="delta_timestamps",
            value=skipped,
        )
    unstackable = {
        *LANGUAGE_COLUMNS,
        *(k for k, f in meta.features.items() if f.get("dtype") in ("string", "language")),
    }
    lang = [k for k in window_keys if k in unstackable]
    if lang:  # language rows, string features: map-style's stack raises TypeError
        raise StreamingConfigError(
            f"delta_timestamps has windows on {lang}: their per-frame values (language rows, strings) cannot be "
            "stacked (map-style LeRobot raises TypeError); drop these windows",
            option="delta_timestamps",
            value=lang,
        )
    depth_all = set(meta.depth_keys)
    video_keys = [k for k in meta.video_keys if k in selected]
    image_keys = [k for k in meta.image_keys if k in selected]
    depth_keys = [k for k in video_keys if k in depth_all]
    plan = CameraPlan(
        video_keys=video_keys,
        image_keys=image_keys,
        depth_keys=depth_keys,
        transform_keys=[k for k in cameras if k in selected and k not in depth_all],
        skipped_columns=[k for k in meta.image_keys if k not in selected],
    )
    if depth_keys:
        if importlib.util.find_spec("av") is None:
            raise StreamingConfigError(
                f"depth cameras {depth_keys} need PyAV to decode their 12-bit codes "
                "(pip install av), or leave them out with camera_keys=",
                option="camera_keys",
                value=depth_keys,
            )
        from lerobotstream.decode._depth import DepthDequantizer

        for key in depth_keys:
            q = meta.depth_quantizer(key)  # MetadataError for unsupported encodings
            plan.dequantizers[key] = DepthDequantizer(
                q.depth_min, q.depth_max, q.shift, q.use_log, output_unit=depth_output_unit
            )
    if image_keys and importlib.util.find_spec("PIL") is None:
        raise StreamingConfigError(
            f"image features {image_keys} need Pillow (pip install pillow), or leave them out with camera_keys=",
            option="camera_keys",
            value=image_keys,
        )
    for key in image_keys:
        if key in depth_all:
            unit = meta.depth_unit(key)
            plan.image_depth[key] = None if unit in (None, depth_output_unit) else "mul" if unit == "m" else "div"
    return plan
