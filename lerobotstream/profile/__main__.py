"""``python -m lerobotstream.profile``: stream a dataset through the loader training uses (no model) and report.

Examples::

    python -m lerobotstream.profile --root /data/my_dataset --num-workers 2 --batch-size 8 --steps 50
    python -m lerobotstream.profile --repo-id lerobot/pusht --steps 100 --json prof.json --plot prof.png
    python -m lerobotstream.profile --root http://host/ds/ --step-ms 40   # would a 40 ms model step wait?
    python -m lerobotstream.profile --repo-id a/x,b/y --root /data/x,/data/y --weights 0.7,0.3   # a mixture

Defaults are what ``lerobotstream-train`` runs with lerobot-train 0.6's defaults (:data:`TRAIN_DEFAULTS`);
``--repeat`` is on for a mixture (its shares would otherwise bend once a dataset runs out), off
for one dataset (its epoch end then ends the run early).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence

from lerobotstream._atomic import check_output_file, write_text_atomic
from lerobotstream.errors import StreamingConfigError, run_cli
from lerobotstream.options import add_cli_flags
from lerobotstream.profile._report import build_report, format_report, needed_bytes, plot_report, require_matplotlib
from lerobotstream.profile._run import LOADERS, profile_dataset

#: what ``lerobotstream-train`` runs with lerobot-train 0.6's defaults (``TrainPipelineConfig``:
#: ``num_workers=4``, ``batch_size=8``, ``prefetch_factor=4``, ``persistent_workers=True``,
#: ``dataloader_multiprocessing_context="spawn"``; 0.6's loop converts uint8 frames on the device)
TRAIN_DEFAULTS = {
    "loader": "auto",
    "num_workers": 4,
    "batch_size": 8,
    "prefetch_factor": 4,
    "persistent_workers": True,
    "multiprocessing_context": "spawn",
    "return_uint8": True,
}


#: the stream options the profiler takes as flags (their type, default and help: StreamOptions'),
#: with the profiler's own defaults where lerobotstream-train runs another value
STREAM_FLAGS = tuple(
    "revision episodes camera_keys episode_pool_size prefetch_episodes byte_budget_gb decode_threads "
    "decoded_queue_size sampling_strategy seed device return_uint8 repeat delta_timestamps".split()
)


#: the keywords a library message may name → this command's flags (``None`` is spelled ``none``)
FLAGS = {
    **{name: "--" + name.replace("_", "-") for name in STREAM_FLAGS},
    "root": "--root",
    "repo_id": "--repo-id",
    "weights": "--weights",
    "num_workers": "--num-workers",
    "batch_size": "--batch-size",
    "prefetch_factor": "--prefetch-factor",
    "prefetch_batches": "--prefetch-factor",  # StreamLoader's name for it
}


def _parser() -> argparse.ArgumentParser:
    from lerobotstream._version import __version__

    ap = argparse.ArgumentParser(
        prog="python -m lerobotstream.profile", description=(__doc__ or "").splitlines()[0].replace("``", "")
    )
    ap.add_argument("--version", action="version", version=f"lerobotstream {__version__}")
    ap.add_argument(
        "--repo-id",
        help="Hub dataset repo id (or the id stored with --root); several, comma-separated, profile a weighted mixture",
    )
    ap.add_argument(
        "--root",
        help="local folder or URL (http(s)://, hf://) of the dataset (a mixture: one per repo id, comma-separated)",
    )
    ap.add_argument(
        "--weights",
        help="a mixture's sampling weights, comma-separated (default: in proportion to each dataset's frames)",
    )
    ap.add_argument(
        "--debug",
        action="store_true",
        help="print the full traceback on errors (also LEROBOTSTREAM_DEBUG=1); else one line, exit 2",
    )
    g = ap.add_argument_group("streaming options (the dataset's options of the same name, docs/options.md)")
    add_cli_flags(
        g,
        STREAM_FLAGS,
        defaults={"return_uint8": TRAIN_DEFAULTS["return_uint8"], "repeat": None},
        aliases={"camera_keys": ["--cameras"]},
        helps={
            "episodes": "Episode indices to stream (one dataset only; None: every episode).",
            "camera_keys": "Video keys to decode (None: all).",
            "return_uint8": "uint8 frames, as lerobotstream-train with LeRobot 0.6.",
            "repeat": "Chain epochs endlessly (None: on for a mixture, whose shares would otherwise "
            "bend once a dataset runs out; off for one dataset, whose epoch end then ends "
            "the run early).",
        },
    )
    r = ap.add_argument_group("run")
    r.add_argument(
        "--loader",
        default=TRAIN_DEFAULTS["loader"],
        choices=LOADERS,
        help="what batches the stream: StreamLoader's auto (default, what lerobotstream-train picks: threads "
        "below 8 CPUs, worker processes from 8), threads or processes mode, or torch's DataLoader",
    )
    r.add_argument(
        "--num-workers",
        type=int,
        default=TRAIN_DEFAULTS["num_workers"],
        help="DataLoader worker processes or StreamLoader shards (default: %(default)s, lerobot-train's; "
        "0: one stream in this process)",
    )
    r.add_argument(
        "--batch-size", type=int, default=TRAIN_DEFAULTS["batch_size"], help="samples per batch (default: %(default)s)"
    )
    r.add_argument(
        "--prefetch-factor",
        type=int,
        default=TRAIN_DEFAULTS["prefetch_factor"],
        help="batches each worker prepares ahead (default: %(default)s, lerobot-train's)",
    )
    r.add_argument(
        "--persistent-workers",
        action=argparse.BooleanOptionalAction,
        default=TRAIN_DEFAULTS["persistent_workers"],
        help="keep DataLoader workers across epochs (default: on)",
    )
    r.add_argument(
        "--multiprocessing-context",
        default=TRAIN_DEFAULTS["multiprocessing_context"],
        choices=("spawn", "fork", "forkserver"),
        help="how workers start (default: %(default)s, lerobot-train's)",
    )
    r.add_argument(
        "--steps", type=int, default=50, help="batches to draw (default: %(default)s; fewer if the epoch ends)"
    )
    r.add_argument(
        "--step-ms",
        type=float,
        default=0.0,
        help="simulated model step per batch, milliseconds (0: none; the verdict then predicts "
        "the wait of 10/50/100 ms steps)",
    )
    r.add_argument(
        "--memory-interval-ms",
        type=float,
        default=100.0,
        help="how often memory is sampled, milliseconds (default: %(default)g)",
    )
    r.add_argument("--json", help="write the full report (with series) to this JSON file")
    r.add_argument("--plot", help="write throughput/memory/stage figure to this PNG (matplotlib)")
    r.add_argument("--quiet", action="store_true", help="no terminal table")
    return ap


def run_profile(args: argparse.Namespace) -> dict:
    """Build the dataset from parsed CLI args, profile it and return the report dict."""
    from lerobotstream.dataset._dataset import StreamingLeRobotDataset

    if args.root is None and args.repo_id is None:
        raise StreamingConfigError("give --root (a dataset folder or URL) and/or --repo-id (a Hub dataset); see --help")
    repo_ids = (args.repo_id or "").split(",") if args.repo_id and "," in args.repo_id else None
    repeat = (repo_ids is not None) if args.repeat is None else bool(args.repeat)
    t0 = time.perf_counter()
    options = {name: getattr(args, name) for name in STREAM_FLAGS if name != "episodes"}
    options["repeat"] = repeat
    if repo_ids is not None:
        from lerobotstream.dataset._multi import StreamingMultiLeRobotDataset

        roots = args.root.split(",") if args.root else None
        weights = [float(w) for w in args.weights.split(",")] if args.weights else None
        if args.episodes:
            raise StreamingConfigError("--episodes selects episodes of one dataset; not with a mixture")
        ds = StreamingMultiLeRobotDataset(repo_ids, roots=roots, weights=weights, **options)
    else:
        if args.weights:
            raise StreamingConfigError("--weights needs several datasets in --repo-id (comma-separated)")
        ds = StreamingLeRobotDataset(args.repo_id, root=args.root, episodes=args.episodes, **options)
    metadata_s = time.perf_counter() - t0
    loader = {k: getattr(args, k) for k in ("prefetch_factor", "persistent_workers", "multiprocessing_context")}
    raw = profile_dataset(
        ds,
        num_workers=args.num_workers,
        batch_size=args.batch_size,
        steps=args.steps,
        step_s=args.step_ms / 1e3,
        memory_interval_s=args.memory_interval_ms / 1e3,
        metadata_s=metadata_s,
        loader=args.loader,
        **loader,
    )
    config = {
        "loader": raw["loader"],
        "root": args.root,
        "repo_id": args.repo_id,
        "num_workers": args.num_workers,
        "batch_size": args.batch_size,
        "frames": "uint8" if args.return_uint8 else "float32",
        **loader,
        "repeat": repeat,
        "as_lerobotstream_train": all(getattr(args, k) == v for k, v in TRAIN_DEFAULTS.items()),
        "steps": args.steps,
        **{k: getattr(args, k) for k in ("decode_threads", "prefetch_episodes", "episode_pool_size")},
        "cameras": list(getattr(ds, "video_keys", None) or ds.camera_keys),
        "episodes": ds.num_episodes,
        **({"mixture": ds.mixture} if hasattr(ds, "mixture") else {}),
    }
    return build_report(raw, ds, config=config, needed=needed_bytes(ds, raw["anchors"]))


def _write_json(obj: dict, path: str) -> None:
    """``obj`` as JSON at ``path``, atomically (``lerobotstream._atomic``: the old file or the whole new one)."""
    write_text_atomic(path, json.dumps(obj, indent=1, default=str))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the profile CLI; errors print one line and return 2 (``--debug`` / ``LEROBOTSTREAM_DEBUG=1``: traceback)."""
    args = _parser().parse_args(argv)
    return run_cli(lambda: _main(args), debug=args.debug)


def _check_run_flags(args: argparse.Namespace) -> None:
    """The run flags' rules, before the dataset is opened (each error names the flag and its value)."""
    from lerobotstream.constants import MAX_NUM_WORKERS
    from lerobotstream.options import is_number, require

    require(
        "--num-workers", args.num_workers, 0 <= args.num_workers <= MAX_NUM_WORKERS, f"an int in [0, {MAX_NUM_WORKERS}]"
    )
    require("--batch-size", args.batch_size, args.batch_size >= 1, "an int >= 1")
    require("--prefetch-factor", args.prefetch_factor, args.prefetch_factor >= 1, "an int >= 1")
    require("--steps", args.steps, args.steps >= 1, "an int >= 1")
    require("--step-ms", args.step_ms, is_number(args.step_ms) and args.step_ms >= 0, "a number >= 0 (0: no step)")
    ok = is_number(args.memory_interval_ms) and args.memory_interval_ms > 0
    require("--memory-interval-ms", args.memory_interval_ms, ok, "a number > 0")


def _main(args) -> int:
    from lerobotstream.errors import as_flags

    _check_run_flags(args)
    if args.json:
        check_output_file(args.json, flag="--json")  # before the run, not after it
    if args.plot:
        require_matplotlib()  # before the run, not after it
    with as_flags(FLAGS, none="none"):  # "num_workers must be" reads "--num-workers must be"
        report = run_profile(args)
    if not args.quiet:
        print(format_report(report))
    if args.json:
        _write_json(report, args.json)
    if args.plot:
        plot_report(report, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
