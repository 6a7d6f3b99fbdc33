"""``lerobotstream-train``: ``lerobot-train`` with ``--dataset.streaming=true`` on lerobotstream.

Accepts every ``lerobot-train`` argument plus the ``--dataset.streaming_*`` flags
(:class:`~lerobotstream.integrations.lerobot.config.StreamingDatasetConfig`). With
``--dataset.streaming=false`` it runs LeRobot's own ``train`` untouched (map-style dataset).
With ``--dataset.streaming=true`` it runs LeRobot's ``train`` with:

* our dataset factory (``patching.py``): LeRobot 0.6.x's ``make_train_eval_datasets`` (train
  stream, and an eval stream with ``--dataset.eval_split``) or 0.4.4's ``make_dataset``,
* LeRobot's own ``Accelerator`` settings (mixed precision, CPU, DDP kwargs), through a subclass
  that does not re-shard the streams' DataLoaders (each rank already streams its own episodes;
  accelerate would split or dispatch them a second time) and collates them with
  :class:`~lerobotstream.dataset.PackedCollate` over LeRobot's collate (the same batches, fewer
  shared-memory files from the workers); batches move to the policy device in LeRobot's
  preprocessor as usual,
* the stream state in every checkpoint and sample-exact ``--resume=true`` (``resume.py``),
* a streaming summary at the end (rank 0): samples/s, share of step time waiting for data,
  payload bytes fetched vs. dataset bytes, sidecar status. It is also written to
  ``<output_dir>/streaming_summary.json``.
"""

# No ``from __future__ import annotations``: LeRobot's ``parser.wrap`` reads the config class
# from the real annotation of ``_train``.

import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable

import torch

from lerobotstream import constants
from lerobotstream.integrations.lerobot import patching
from lerobotstream.integrations.lerobot.config import StreamingTrainPipelineConfig
from lerobotstream.integrations.lerobot.factory import TAG_BYTES, TAG_REQUESTS, TAG_WORKER, TrainingStream, \
    make_streaming_datasets
from lerobotstream.dataset import PackedCollate
from lerobotstream.integrations.lerobot import resume as _resume

__all__ = ["main", "Run"]

log = logging.getLogger("lerobotstream.train")


def _world() -> tuple[int, int]:
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return int(dist.get_rank()), int(dist.get_world_size())
    return 0, 1


class Run:
    """State of one streaming training run (the patched names call into it)."""

    def __init__(self, cfg: Any) -> None:
        self.cfg = cfg
        self.stream: TrainingStream | None = None
        self.settings: dict[str, Any] = {}
        self.start_step = 0
        self.stream_base = (0, 0)  # (step, samples of the stream) where this run picked it up
        self.batches = 0
        self.samples = 0
        self.wait_s = 0.0
        self.first_batch_s: float | None = None
        self.loop_start: float | None = None
        self.last_t: float | None = None
        self.steady_wait_s = 0.0
        self.steady_s = 0.0
        self.worker_bytes: dict[int, int] = {}
        self.worker_requests: dict[int, int] = {}
        self.samples_by_dataset: dict[int, int] = {}
        self.trace_file = None
        self.sidecar_status: Any = None
        self.accelerator: Any = None  # the Accelerator LeRobot built (StreamingAccelerator)
        self.collate: str | None = None  # the train stream DataLoader's collate_fn (repr)
        self.loader: str = "dataloader"  # what batches the train stream (--dataset.streaming_loader)

    # --- patched: make_train_eval_datasets (0.6.x) / make_dataset (0.4.4) -----------------------
    def make_train_eval_datasets(self, cfg: Any) -> tuple[Any, Any]:
        if not cfg.dataset.streaming:
            return patching.original("make_train_eval_datasets")(cfg)
        return self._make_streams(cfg)

    def make_dataset(self, cfg: Any) -> Any:
        if not cfg.dataset.streaming:
            return patching.original("make_dataset")(cfg)
        return self._make_streams(cfg)[0]

    def _make_streams(self, cfg: Any) -> tuple[TrainingStream, TrainingStream | None]:
        t0 = time.perf_counter()
        stream, evaluation = make_streaming_datasets(cfg)
        rank, world = _world()
        self.settings = _resume.order_settings(cfg, world)
        if cfg.resume:
            self._resume(cfg, stream)
        self.stream = stream
        ds = stream.dataset
        self.sidecar_status = getattr(stream, "sidecar_status", None) or _sidecar_status(ds)
        if rank == 0:
            from importlib.metadata import version

            log.info("lerobotstream %s on lerobot %s: %r, %d frames in %d episodes, seed %s, %d DataLoader "
                     "workers, %s frames, setup %.2f s, sidecar: %s", _version(), version("lerobot"), ds,
                     stream.num_frames, stream.num_episodes, self.settings["seed"], cfg.num_workers,
                     "uint8" if ds.return_uint8 else "float32", time.perf_counter() - t0, self.sidecar_status)
            if evaluation is not None:
                log.info("lerobotstream: eval stream %r, %d frames in %d episodes (sequential, every frame once "
                         "per pass%s)", evaluation.dataset, evaluation.num_frames, evaluation.num_episodes,
                         f", at most {evaluation.max_samples} samples" if evaluation.max_samples else "")
        return stream, evaluation

    def _resume(self, cfg: Any, stream: TrainingStream) -> None:
        ckpt = Path(cfg.checkpoint_path)
        step_file = ckpt / "training_state" / "training_step.json"
        try:
            step = int(json.loads(step_file.read_text())["step"])
        except (OSError, ValueError, KeyError) as e:
            from lerobotstream.errors import ResumeStateError

            raise ResumeStateError(f"cannot read the checkpoint step from {step_file}: {e}") from e
        doc = _resume.read_checkpoint_state(ckpt)
        ds = stream.dataset
        changes = _resume.check_resume(doc, self.settings, step, ckpt)
        if changes or "origin" in doc.get("stream_state", {}):
            # another topology, or inside an elastic remainder: the checkpoint's own (rank 0) state
            ds.load_state_dict(doc["stream_state"])
        else:
            ds.load_state_dict(_resume.stream_state_for(ds, step * int(cfg.batch_size), self.settings))
        self.start_step = step
        self.stream_base = (step, int(ds.samples_consumed))
        log.info(_resume.describe_resume(step, changes, ds.resume_info(), step * int(cfg.batch_size)))

    # --- patched: cycle -------------------------------------------------------------------------
    def cycle(self, dataloader: Any) -> Iterator[Any]:
        if not isinstance(getattr(dataloader, "dataset", None), TrainingStream):
            yield from patching.original("cycle")(dataloader)
            return
        path = constants.train_trace_path()
        rank, _ = _world()
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            self.trace_file = open(f"{path}.rank{rank}", "a", buffering=1)
        self.collate = repr(getattr(dataloader, "collate_fn", None))
        self.loop_start = time.perf_counter()  # includes starting the DataLoader workers
        it = iter(dataloader)
        while True:
            t0 = time.perf_counter()
            try:
                batch = next(it)
            except StopIteration:  # the stream repeats; a finite one restarts like LeRobot's cycle
                it = iter(dataloader)
                continue
            t1 = time.perf_counter()
            self._account(batch, t0, t1)
            yield batch

    def _account(self, batch: dict[str, Any], t0: float, t1: float) -> None:
        wait = t1 - t0
        self.wait_s += wait
        if self.first_batch_s is None:
            self.first_batch_s = t1 - (self.loop_start or t0)
        elif self.last_t is not None:
            self.steady_wait_s += wait
            self.steady_s += t1 - self.last_t
        self.last_t = t1
        wids = batch.pop(TAG_WORKER)
        nbytes = batch.pop(TAG_BYTES)
        nreq = batch.pop(TAG_REQUESTS)
        for w, b, r in zip(wids.tolist(), nbytes.tolist(), nreq.tolist()):
            self.worker_bytes[w] = max(self.worker_bytes.get(w, 0), b)
            self.worker_requests[w] = max(self.worker_requests.get(w, 0), r)
        n = int(wids.shape[0])
        self.samples += n
        if "dataset_index" in batch:  # a mixture: samples per dataset, for the summary
            for d in batch["dataset_index"].tolist():
                self.samples_by_dataset[int(d)] = self.samples_by_dataset.get(int(d), 0) + 1
        if self.trace_file is not None:
            rank, _ = _world()
            self.trace_file.write(json.dumps({
                "rank": rank, "step": self.start_step + self.batches,
                "episode_index": batch["episode_index"].tolist(), "frame_index": batch["frame_index"].tolist(),
                "worker": wids.tolist(),
                **({"dataset_index": batch["dataset_index"].tolist()} if "dataset_index" in batch else {})}) + "\n")
        self.batches += 1

    # --- patched: save_checkpoint ---------------------------------------------------------------
    def save_checkpoint(self, checkpoint_dir: Path, step: int, cfg: Any, *args: Any, **kwargs: Any) -> None:
        patching.original("save_checkpoint")(checkpoint_dir, step, cfg, *args, **kwargs)
        if self.stream is None:
            return
        base_step, base_samples = self.stream_base
        samples = base_samples + (int(step) - base_step) * int(cfg.batch_size)
        state = _resume.stream_state_for(self.stream.dataset, samples, self.settings)
        _resume.write_checkpoint_state(Path(checkpoint_dir), int(step), self.settings, state)

    # --- summary --------------------------------------------------------------------------------
    def summary(self) -> dict[str, Any]:
        ds = self.stream.dataset if self.stream is not None else None
        elapsed = (self.last_t - self.loop_start) if (self.last_t and self.loop_start) else 0.0
        fetched = sum(self.worker_bytes.values())
        files = _dataset_bytes(ds) if ds is not None else None
        rank, world = _world()
        return {
            "rank": rank, "world_size": world, "num_workers": int(self.cfg.num_workers),
            "batch_size": int(self.cfg.batch_size), "seed": self.settings.get("seed"),
            "start_step": self.start_step, "steps": self.batches, "samples": self.samples,
            "elapsed_s": round(elapsed, 3),
            "samples_per_s": round(self.samples / elapsed, 2) if elapsed > 0 else None,
            "first_batch_s": None if self.first_batch_s is None else round(self.first_batch_s, 3),
            "data_wait_share": round(self.steady_wait_s / self.steady_s, 4) if self.steady_s > 0 else None,
            "data_wait_s": round(self.wait_s, 3),
            "payload_bytes_fetched": fetched,
            "payload_requests": sum(self.worker_requests.values()),
            "dataset_bytes": None if files is None else files["total"],
            "dataset_mp4_bytes": None if files is None else files["mp4"],
            "dataset_parquet_bytes": None if files is None else files["parquet"],
            "sidecar": self.sidecar_status,
            "collate": self.collate,
            "loader": self.loader,
            **_mixture_summary(ds, self.samples_by_dataset),
        }


def _mixture_summary(ds: Any, counts: dict[int, int]) -> dict[str, Any]:
    """For a mixture: its repo ids and weights, and the samples this rank took from each dataset."""
    mixture = getattr(ds, "mixture", None)
    if not mixture:
        return {}
    total = sum(counts.values()) or 1
    return {"mixture": mixture, "samples_by_dataset": {mixture["repo_ids"][d]: n for d, n in sorted(counts.items())},
            "share_by_dataset": {mixture["repo_ids"][d]: round(n / total, 4) for d, n in sorted(counts.items())}}


def _dataset_bytes(ds: Any) -> dict[str, int] | None:
    """Bytes of the MP4 and Parquet files the selected episodes live in: ``{"mp4", "parquet",
    "total"}`` (None if unknown)."""
    try:
        mp4 = parquet = 0
        for child in getattr(ds, "datasets", [ds]):  # a mixture: every dataset's files
            meta = child.meta
            source = getattr(child, "_payload_source", None) or meta.source
            mp4 += int(sum(source.size(p) for p in meta.video_paths()))
            parquet += int(sum(source.size(p) for p in meta.data_paths()))
        return {"mp4": mp4, "parquet": parquet, "total": mp4 + parquet}
    except Exception:  # summary only: never fail a finished training run over it
        return None


def _sidecar_status(ds: Any) -> Any:
    for name in ("sidecar_status", "sidecar_info"):
        v = getattr(ds, name, None)
        if v is not None:
            return v() if callable(v) else v
    st = ds.stats() if hasattr(ds, "stats") else {}
    return (st or {}).get("sidecar", "not reported by this dataset version")


def _fmt_bytes(n: int | None) -> str:
    """Bytes in binary units (KiB, MiB, GiB), as the byte budget and the profiler state them."""
    if n is None:
        return "?"
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"


def format_summary(s: dict[str, Any]) -> str:
    """The summary's terminal lines. Fetched bytes (MP4 spans and Parquet, every epoch, every
    worker) are compared with the MP4 + Parquet files of the selected episodes, as a ratio; the
    data-wait share leaves the first batch (worker start-up, first fetches) out and says so."""
    share = "?" if s["data_wait_share"] is None else f"{100 * s['data_wait_share']:.1f}%"
    frac = ""
    if s.get("dataset_bytes"):
        parts = ""
        if s.get("dataset_mp4_bytes") is not None and s.get("dataset_parquet_bytes") is not None:
            parts = (f" = MP4 {_fmt_bytes(s['dataset_mp4_bytes'])} + Parquet "
                     f"{_fmt_bytes(s['dataset_parquet_bytes'])}")
        frac = (f" (MP4 + Parquet, all epochs: {s['payload_bytes_fetched'] / s['dataset_bytes']:.2f} x the "
                f"{_fmt_bytes(s['dataset_bytes'])} of the selected episodes' files{parts})")
    return "\n".join([
        f"[lerobotstream] streaming summary (rank {s['rank']} of {s['world_size']}, "
        f"{s['num_workers']} DataLoader workers, batch {s['batch_size']}, seed {s['seed']})",
        f"[lerobotstream]   steps {s['start_step']}..{s['start_step'] + s['steps']}: {s['samples']} samples "
        f"in {s['elapsed_s']:.1f} s = {s['samples_per_s']} samples/s (first batch after {s['first_batch_s']} s)",
        f"[lerobotstream]   waiting for data: {share} of step time after the first batch (the first batch's "
        f"{s['first_batch_s']} s of start-up is not counted)",
        f"[lerobotstream]   payload fetched: {_fmt_bytes(s['payload_bytes_fetched'])} in "
        f"{s['payload_requests']} requests{frac}",
        f"[lerobotstream]   sidecar: {s['sidecar']}",
        f"[lerobotstream]   loader: {s.get('loader', 'dataloader')}",
    ])


def _version() -> str:
    from lerobotstream import __version__

    return __version__


def _stream_loader(run: "Run", data_loader: Any) -> Any:
    """A ``StreamLoader`` with ``data_loader``'s settings (``--dataset.streaming_loader``), or None
    for ``dataloader`` (torch's DataLoader kept). The mode and its reason are logged and recorded
    for the summary (the train stream's)."""
    from lerobotstream.loader import StreamLoader

    choice = getattr(run.cfg.dataset, "streaming_loader", "auto")
    if choice == "dataloader":
        log.info("lerobotstream: --dataset.streaming_loader=dataloader: torch's DataLoader")
        return None
    loader = StreamLoader(data_loader.dataset, int(data_loader.batch_size), num_workers=int(data_loader.num_workers),
                          mode=choice, pin_memory=bool(data_loader.pin_memory), drop_last=bool(data_loader.drop_last),
                          prefetch_batches=data_loader.prefetch_factor if data_loader.num_workers else None,
                          collate_fn=data_loader.collate_fn,
                          multiprocessing_context=data_loader.multiprocessing_context)
    if getattr(data_loader.dataset, "tags", False):
        run.loader = f"StreamLoader {loader.mode} ({loader.mode_reason})"
    log.info("lerobotstream: --dataset.streaming_loader=%s: StreamLoader in %s mode (%s)", choice, loader.mode,
             loader.mode_reason)
    return loader


def _streaming_accelerator_class(run: "Run") -> type:
    """accelerate's ``Accelerator`` as LeRobot builds it, except that the streams' DataLoaders are
    left as they are (one shard per rank already); the instance is recorded on ``run``."""
    from accelerate import Accelerator

    class StreamingAccelerator(Accelerator):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            run.accelerator = self

        def prepare_data_loader(self, data_loader, device_placement=None, slice_fn_for_dispatch=None):
            if isinstance(getattr(data_loader, "dataset", None), TrainingStream):
                # the same batches as LeRobot's collate (default or lerobot_collate_fn), in fewer
                # shared-memory files from the workers (docs/performance.md)
                if not isinstance(data_loader.collate_fn, PackedCollate):
                    data_loader.collate_fn = PackedCollate(data_loader.collate_fn)
                loader = _stream_loader(run, data_loader)  # (it calls PackedCollate's inner collate)
                return data_loader if loader is None else loader  # already one shard per rank; don't split or dispatch it again
            return super().prepare_data_loader(data_loader, device_placement=device_placement,
                                               slice_fn_for_dispatch=slice_fn_for_dispatch)

    return StreamingAccelerator


def _mixture_model_card(run: Run) -> Callable[..., Any]:
    """LeRobot's ``generate_model_card`` that, for a mixture, lists every dataset in the card's
    ``datasets`` and adds the weights and observed shares to its text (0.6.1's method
    ``PreTrainedPolicy.generate_model_card(dataset_repo_id, ...)`` or main's free function
    ``generate_model_card(model_cfg, cfg, dataset_meta)``, see :func:`patching.model_card_target`)."""
    original = patching.original("generate_model_card")
    _, is_method = patching.model_card_target()

    def mixture() -> dict | None:
        return getattr(getattr(run.stream, "dataset", None), "mixture", None)

    def extend(card: Any, mix: dict) -> Any:
        total = sum(mix["weights"])
        rows = "\n".join(f"| {r} | {w / total:.4f} |" for r, w in zip(mix["repo_ids"], mix["weights"]))
        card.text = (card.text + "\n\n## Training data: a streamed mixture\n\nTrained with lerobotstream on a "
                     "weighted mixture of datasets (share of the samples drawn from each"
                     f"{'' if mix.get('weights_given') else ', in proportion to its frames'}):\n\n"
                     "| dataset | weight |\n|---|---:|\n" + rows + "\n")
        return card

    if is_method:
        def generate_model_card(self: Any, dataset_repo_id: Any, *args: Any, **kwargs: Any) -> Any:
            mix = mixture()
            if not mix:
                return original(self, dataset_repo_id, *args, **kwargs)
            return extend(original(self, list(mix["repo_ids"]), *args, **kwargs), mix)
    else:
        def generate_model_card(model_cfg: Any, cfg: Any = None, dataset_meta: Any = None, *args: Any,
                                **kwargs: Any) -> Any:
            mix = mixture()
            card = original(model_cfg, cfg, dataset_meta, *args, **kwargs)
            if not mix:
                return card
            card.data.datasets = list(mix["repo_ids"])
            return extend(card, mix)

    return generate_model_card


def run_training(cfg: StreamingTrainPipelineConfig) -> dict[str, Any] | None:
    """Train with a parsed config; returns the streaming summary on rank 0 (None otherwise or
    for a map-style run)."""
    lt = patching.check_lerobot()
    train = patching.train_function()
    if not cfg.dataset.streaming:
        train(cfg)  # LeRobot's map-style path, unchanged
        return None
    run = Run(cfg)
    seam = patching.dataset_seam(lt)
    with patching.installed(**{seam: getattr(run, seam)}, cycle=run.cycle, save_checkpoint=run.save_checkpoint,
                            Accelerator=_streaming_accelerator_class(run),
                            generate_model_card=_mixture_model_card(run)):
        train(cfg)
    if run.trace_file is not None:
        run.trace_file.close()
    if run.accelerator is not None and not run.accelerator.is_main_process:
        return None
    summary = run.summary()
    print(format_summary(summary), flush=True)
    if cfg.output_dir is not None:
        _resume.write_json_atomic(Path(cfg.output_dir) / "streaming_summary.json", summary)
    return summary


def _parse_and_train() -> Any:
    from lerobot.configs import parser

    @parser.wrap()
    def _train(cfg: StreamingTrainPipelineConfig):
        return run_training(cfg)

    return _train()


def main() -> None:
    """Console entry ``lerobotstream-train``.

    ``--version``: ours and LeRobot's, before any parsing. ``--help``: a short streaming section
    first (:func:`streaming_help`), then LeRobot's whole list. A mistyped ``--dataset.*`` flag:
    one line naming the closest flag (:func:`unknown_dataset_flag`), exit 2. Every lerobotstream
    error (and a flag's own error): one line ``error: <Type>: <message>``, exit 2; Ctrl-C:
    ``interrupted``, exit 130. ``--debug`` (removed before LeRobot parses the flags) or
    ``LEROBOTSTREAM_DEBUG=1``: the traceback instead.
    """
    import sys

    from lerobotstream.errors import EXIT_INTERRUPTED, error_line

    argv = sys.argv[1:]
    if "--version" in argv:
        from importlib.metadata import PackageNotFoundError, version

        try:
            lerobot = version("lerobot")
        except PackageNotFoundError:
            lerobot = "not installed"
        print(f"lerobotstream {_version()} (lerobot {lerobot})")
        return
    debug = "--debug" in argv or constants.debug_enabled()
    sys.argv[1:] = argv = [a for a in argv if a != "--debug"]
    try:
        patching.check_lerobot()
        if "-h" in argv or "--help" in argv:
            print(streaming_help(), flush=True)
        else:
            bad = unknown_dataset_flag(argv)
            if bad is not None:
                raise bad
        from lerobot.utils.import_utils import register_third_party_plugins

        register_third_party_plugins()
        _parse_and_train()
    except KeyboardInterrupt:
        if debug:
            raise
        print("interrupted", file=sys.stderr)
        raise SystemExit(EXIT_INTERRUPTED) from None
    except Exception as exc:
        cause = _one_line_error(exc)
        if cause is None or debug:
            raise
        print(error_line(cause), file=sys.stderr)
        raise SystemExit(2) from None


def _one_line_error(exc: BaseException) -> BaseException | None:
    """The error ``main`` prints as one line: a flag's own error behind draccus's ParsingError,
    or any lerobotstream error (a DataLoader worker's as the worker raised it); None for others
    (LeRobot's and Python's own errors keep their traceback)."""
    from lerobotstream.errors import LeRobotStreamError

    cause = _flag_error(exc)
    if cause is not None:
        return cause
    if isinstance(exc, LeRobotStreamError):
        from lerobotstream.errors import worker_error  # torch's "Caught ... in DataLoader worker" copy

        return worker_error(exc) or exc
    return None


def _streaming_fields() -> list[Any]:
    """The dataclass fields :class:`StreamingDatasetConfig` defines or redefines (the streaming
    flags, ``repo_id``/``streaming`` with their streaming help), plus LeRobot's ``root``."""
    import dataclasses

    from lerobotstream.integrations.lerobot.config import StreamingDatasetConfig

    own = set(vars(StreamingDatasetConfig).get("__annotations__", {})) | {"root"}
    return [f for f in dataclasses.fields(StreamingDatasetConfig) if f.name in own]


def _field_help(name: str) -> str:
    """A flag's help: the one its field carries (the generated streaming flags: from
    ``StreamOptions``), else the comment above the field in its config class (LeRobot's)."""
    import dataclasses

    from lerobotstream.integrations.lerobot.config import StreamingDatasetConfig

    field = {f.name: f for f in dataclasses.fields(StreamingDatasetConfig)}.get(name)
    given = None if field is None else field.metadata.get("custom_args", {}).get("help")
    if given:
        return " ".join(str(given).split())
    try:
        from draccus.wrappers.docstring import get_attribute_docstring

        doc = get_attribute_docstring(StreamingDatasetConfig, name)
        text = doc.comment_above or doc.comment_inline or doc.docstring_below
    except Exception:  # help text only
        text = ""
    return " ".join(str(text or "").split())


def streaming_help() -> str:
    """The short section ``lerobotstream-train --help`` prints before LeRobot's whole list: every
    streaming flag (derived from :class:`StreamingDatasetConfig`'s fields) with its default and
    help text."""
    import dataclasses
    import textwrap

    lines = ["lerobotstream-train: lerobot-train plus streaming. The streaming flags (all of "
             "lerobot-train's flags follow):", ""]
    for f in _streaming_fields():
        default = "required" if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING \
            else f"default: {f.default!r}" if f.default is not dataclasses.MISSING else "default: see below"
        lines.append(f"  --dataset.{f.name} ({default})")
        help_text = _field_help(f.name)
        if help_text:
            lines.extend(textwrap.wrap(help_text, width=100, initial_indent="      ", subsequent_indent="      "))
    lines += ["", "  --debug: print the full traceback on errors (also LEROBOTSTREAM_DEBUG=1)", "",
              "lerobot-train's flags:"]
    return "\n".join(lines)


def unknown_dataset_flag(argv: list[str]) -> Exception | None:
    """A :class:`~lerobotstream.errors.StreamingConfigError` for the first ``--dataset.NAME`` of
    ``argv`` that is no field of :class:`StreamingDatasetConfig`, naming the closest one
    (``difflib``); None when every ``--dataset.*`` flag exists. Nested flags
    (``--dataset.image_transforms.enable``) are checked on their first part only."""
    import dataclasses
    import difflib

    from lerobotstream.errors import StreamingConfigError
    from lerobotstream.integrations.lerobot.config import StreamingDatasetConfig

    names = [f.name for f in dataclasses.fields(StreamingDatasetConfig)]
    for arg in argv:
        if not arg.startswith("--dataset."):
            continue
        key = arg[len("--dataset."):].split("=", 1)[0].split(".", 1)[0]
        if key in names:
            continue
        close = difflib.get_close_matches(key, names, n=1, cutoff=0.6)
        hint = f"did you mean --dataset.{close[0]}?" if close else "see the streaming flags at the top of --help"
        return StreamingConfigError(f"unknown flag --dataset.{key}: {hint}")
    return None


def _flag_error(exc: BaseException) -> BaseException | None:
    """The ValueError (e.g. StreamingConfigError) behind draccus's ParsingError, if any."""
    if type(exc).__name__ != "ParsingError":
        return None
    seen = exc.__cause__ or exc.__context__
    while seen is not None:
        if isinstance(seen, ValueError) and type(seen).__name__ != "ParsingError":
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


if __name__ == "__main__":
    main()
