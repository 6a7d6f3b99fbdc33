"""``python -m lerobotstream.sidecar build|inspect`` (console script ``lerobotstream-build-mp4-sidecar``):
see :data:`DESCRIPTION`. A reader that closes stdout early ends the command quietly (status 141)."""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from collections.abc import Sequence

#: the parser's description (plain text: argparse prints it as written)
DESCRIPTION = """\
build:   parse a dataset's MP4s into a schema-5 sidecar NPZ (atomic; a failure keeps the old file);
         with --push, validate the complete sidecar and publish it (explicit maintainer action).
inspect: print a readable summary of a sidecar (and of its derived index with --index).

The console script lerobotstream-build-mp4-sidecar takes build's options without the word
build (lerobotstream-build-mp4-sidecar --root DIR --output X.npz builds); bare, it asks for them.
Errors print one line "error: <Type>: <message>" and exit with status 2 (--debug or
LEROBOTSTREAM_DEBUG=1: the full traceback)."""

EXAMPLES = """\
examples:
  %(prog)s build --root /data/my_dataset --output my_dataset.npz
  %(prog)s build --repo-id OWNER/NAME --output my_dataset.npz   # $HF_LEROBOT_HOME/OWNER/NAME, else the Hub
  %(prog)s build --data-root hf://datasets/OWNER/NAME@COMMIT --output sidecar.npz --push
  %(prog)s inspect my_dataset.npz --index"""


def _prog() -> str:
    """``lerobotstream-build-mp4-sidecar`` when run as the console script, else ``python -m ...``."""
    name = os.path.basename(sys.argv[0] if sys.argv and sys.argv[0] else "")
    return name if name.startswith("lerobotstream-") else "python -m lerobotstream.sidecar"


def default_repo_id(root: str | None, data_root: str | None) -> str:
    """The repo id recorded when ``--repo-id`` is not given: ``OWNER/NAME`` of an ``hf://`` root,
    else ``local/<folder name>`` (the last path component of the folder or URL)."""
    from urllib.parse import urlsplit

    if root is None and data_root is not None and str(data_root).startswith("hf://"):
        from lerobotstream.sources._open import parse_hf_url

        return parse_hf_url(str(data_root))[1]
    where = os.fspath(root) if root is not None else urlsplit(str(data_root or "")).path
    name = os.path.basename(os.path.abspath(os.path.expanduser(where)) if root is not None else where.rstrip("/"))
    return f"local/{name or 'dataset'}"


def _build(args: argparse.Namespace) -> int:
    from lerobotstream import sources
    from lerobotstream.errors import SidecarPublishError, StreamingConfigError
    from lerobotstream.sidecar._build import build_sidecar
    from lerobotstream.sources._local import LocalSource

    if args.repo_id is None and (args.root is not None or args.data_root is not None):
        args.repo_id = default_repo_id(args.root, args.data_root)
    if args.push and args.episodes is not None:
        raise SidecarPublishError(
            "only a complete dataset sidecar can be published: drop --episodes (subset sidecars cannot be pushed)"
        )
    if args.push and (args.root is not None or not str(args.data_root).startswith("hf://")):
        raise SidecarPublishError(
            "--push needs --data-root hf://datasets/OWNER/NAME@COMMIT or "
            "hf://buckets/OWNER/NAME (a local folder cannot be published)"
        )
    if args.root is None and args.data_root is None and args.repo_id is None:
        raise StreamingConfigError(
            "give --root FOLDER, --data-root URL or --repo-id OWNER/NAME (a local copy "
            "in $HF_LEROBOT_HOME/<repo_id> first, else the Hub, as LeRobot)"
        )
    # recorded: the folder or URL given, else (--repo-id alone) the source's own root
    data_root = args.root if args.root is not None else args.data_root
    if args.root is not None:
        src = LocalSource(args.root)
    else:
        src = sources.open_source(
            args.data_root,
            repo_id=args.repo_id,
            revision=args.revision,
            repo_type=args.repo_type,
            endpoint=args.endpoint,
        )
        if args.data_root is not None:
            args.repo_type = getattr(src, "repo_type", args.repo_type)  # hf://buckets/... is a bucket
        commit = getattr(src, "commit", None)
        if commit is not None:
            if args.data_root is not None and args.revision not in (None, commit):
                print(f"revision {args.revision} resolves to commit {commit}; the sidecar records the commit")
            args.revision = commit
    report = build_sidecar(
        src,
        output=args.output,
        repo_id=args.repo_id,
        revision=args.revision,
        repo_type=args.repo_type,
        data_root=data_root,
        episodes=args.episodes,
        workers=args.workers,
        max_pending=args.max_pending,
        tolerance_s=args.tolerance_s,
        progress=not args.no_progress,
    )
    print(f"wrote {report.output}")
    print(
        f"episodes={report.num_episodes} files={report.num_sources} samples={report.num_samples} "
        f"subset={report.subset} elapsed_s={report.elapsed_s:.2f}"
    )
    if args.push:
        from lerobotstream.sidecar._publish import push_sidecar

        where = push_sidecar(report.output, src)
        print(f"published {where}")
    return 0


def _inspect(args: argparse.Namespace) -> int:
    from lerobotstream.sidecar._archive import load_manifest

    m = load_manifest(args.path)
    srcs = m["sources"]
    print(f"sidecar      {args.path} ({os.path.getsize(args.path):,} bytes)")
    print(f"schema       {m['schema_version']}  created_by={m.get('created_by')}")
    print(f"repo         {m.get('repo_id')} ({m.get('repo_type')}) revision={m.get('revision')}")
    print(f"data_root    {m.get('data_root')}")
    eps = m.get("episodes")
    print(
        f"subset       {m.get('subset')}"
        + (
            f" ({len(eps)} of {m.get('total_episodes')} episodes: {eps[:10]}{' ...' if len(eps) > 10 else ''})"
            if eps
            else f" (all {m.get('total_episodes')} episodes)"
        )
    )
    print(f"fps          {m.get('fps')}  video_keys={m.get('video_keys')}")
    counts = srcs.column("num_samples")  # columns: no entry dict per source
    total = (
        int(counts.sum()) if counts is not None else sum(int(srcs.get(i, "num_samples") or 0) for i in range(len(srcs)))
    )
    codecs = Counter(srcs.get(i, "codec") for i in range(len(srcs)))
    print(f"sources      {len(srcs)} files, {total:,} samples, codecs {dict(codecs)}")
    for s in srcs[: args.limit]:  # entry dicts of the listed sources only
        edit = ""
        if s.get("media_time") or s.get("empty_edit_movie_ticks"):
            edit = f" edit(media_time={s.get('media_time')}, empty={s.get('empty_edit_movie_ticks')})"
        print(
            f"  {s['path']}: {s.get('num_samples')} samples, {s.get('size'):,} bytes, {s.get('codec')} "
            f"{s.get('width')}x{s.get('height')}, timescale {s.get('media_timescale')}/{s.get('movie_timescale')}, "
            f"ctts v{s.get('ctts_version')}{edit}, fingerprint={s.get('fingerprint')}"
        )
    if len(srcs) > args.limit:
        print(f"  ... {len(srcs) - args.limit} more")
    if args.index:
        from lerobotstream.mp4._index_file import Mp4Index

        idx = Mp4Index.open(args.path)
        print(f"index        {idx.index_path} ({idx.nbytes_stored():,} bytes) generation={idx.generation[:16]}")
    return 0


def _parser() -> argparse.ArgumentParser:
    from lerobotstream import constants
    from lerobotstream._version import __version__

    fmt = argparse.RawDescriptionHelpFormatter
    p = argparse.ArgumentParser(prog=_prog(), description=DESCRIPTION, epilog=EXAMPLES, formatter_class=fmt)
    p.add_argument("--version", action="version", version=f"lerobotstream {__version__}")
    sub = p.add_subparsers(dest="command", metavar="{build,inspect}")
    b = sub.add_parser(
        "build",
        help="build a schema-5 sidecar",
        description="Parse a dataset's MP4s into a "
        "schema-5 sidecar NPZ (written atomically: a failed build keeps the old file).",
    )
    where = b.add_mutually_exclusive_group()
    where.add_argument(
        "--root",
        help="local dataset folder (unset: --repo-id's local copy "
        "$HF_LEROBOT_HOME/<repo_id> if there is one, else the Hub, as LeRobot)",
    )
    where.add_argument(
        "--data-root", help="payload root URL (hf://datasets/OWNER/NAME@SHA, hf://buckets/..., fsspec URL)"
    )
    b.add_argument("--output", required=True, help="the .npz to write (replaced atomically)")
    b.add_argument(
        "--repo-id",
        default=None,
        help="repo id recorded in the sidecar (default: OWNER/NAME of an hf:// root, else "
        "local/<folder name>); alone, the dataset to build: $HF_LEROBOT_HOME/<repo_id> if "
        "there, else the Hub (as LeRobot)",
    )
    b.add_argument("--revision", default=None, help="commit the sidecar describes (default: the hf:// root's commit)")
    b.add_argument(
        "--repo-type",
        choices=("dataset", "bucket"),
        default="dataset",
        help="Hub repository type (default: dataset; an hf://buckets/ root is a bucket)",
    )
    b.add_argument("--workers", type=int, default=8, help="parse threads (default: 8)")
    b.add_argument("--max-pending", type=int, default=None, help="parse results held at once (default: 2 x workers)")
    b.add_argument(
        "--episodes", type=int, nargs="+", default=None, help="episode indices (a subset build; default: all)"
    )
    b.add_argument(
        "--tolerance-s",
        type=float,
        default=constants.DEFAULT_TOLERANCE_S,
        help="largest allowed difference between a frame's timestamp in the video and in the "
        f"metadata, seconds (default: {constants.DEFAULT_TOLERANCE_S:g}, as LeRobot)",
    )
    b.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    b.add_argument(
        "--push",
        action="store_true",
        help="after building and validating a complete sidecar, publish it (dataset: branch "
        "lerobot-sidecars; bucket: meta/mp4-sidecars/); needs write access",
    )
    b.add_argument("--endpoint", default=None, help="Hub URL (default: HF_ENDPOINT)")
    i = sub.add_parser(
        "inspect",
        help="print a sidecar's summary",
        description="Print a readable summary of a sidecar (and of its derived index with --index).",
    )
    i.add_argument("path", help="the sidecar .npz")
    i.add_argument("--limit", type=int, default=20, help="sources listed (default: 20)")
    i.add_argument("--index", action="store_true", help="also open (convert) its derived index")
    for sp in (b, i):
        sp.add_argument(
            "--debug", action="store_true", help="print the full traceback on errors (also LEROBOTSTREAM_DEBUG=1)"
        )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the sidecar CLI; returns the exit status (0 ok, 2 error, 141 stdout closed early)."""
    p = _parser()
    # the console script `lerobotstream-build-mp4-sidecar --root ...` means `build`
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] not in ("build", "inspect", "-h", "--help", "--version"):
        argv = ["build", *argv]
    args = p.parse_args(argv)
    if args.command is None:
        p.print_usage(sys.stderr)
        print(
            "error: give a command: build or inspect (build's options alone, e.g. --root DIR --output X.npz, "
            "mean build; see --help)",
            file=sys.stderr,
        )
        return 2
    from lerobotstream.errors import quiet_on_closed_stdout, run_cli

    body = quiet_on_closed_stdout(lambda: _build(args) if args.command == "build" else _inspect(args))
    return run_cli(body, debug=args.debug)


if __name__ == "__main__":
    sys.exit(main())
