"""\
Check a LeRobotDataset v3 before training: meta/, the data/ Parquet footers and their small
per-row columns (episode_index, frame_index, index, timestamp) and the MP4 headers are read (never
the video payload, unless --decode-sample asks for frames), and every defect is reported once,
where it is, with a fix hint; then a per-camera summary.

Exit status: 0 no error, 1 at least one error finding, 2 usage error or unreadable dataset."""

# python -m lerobotstream.validate, console script lerobotstream-validate: the docstring above is its
# --help. A usage error or an unreadable dataset prints one line "error: <Type>: <message>" (--debug
# or LEROBOTSTREAM_DEBUG=1: the traceback); a reader closing stdout early ends it quietly (141).

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

EXAMPLES = """\
examples:
  %(prog)s /data/my_dataset
  %(prog)s --repo-id lerobot/pusht --revision main --json report.json
  %(prog)s http://host/datasets/x/ --episodes 0-9 20 --decode-sample 2
  %(prog)s hf://datasets/lerobot/pusht --headers-only
  lerobot-train --dataset.episodes="$(%(prog)s /data/my_dataset --print-good-episodes)" ..."""


def _prog() -> str:
    name = os.path.basename(sys.argv[0] if sys.argv and sys.argv[0] else "")
    return name if name.startswith("lerobotstream-") else "python -m lerobotstream.validate"


def parse_episodes(tokens: Sequence[str] | None) -> list[int | range] | None:
    """``["0-9", "20,22"]`` → ``[range(0, 10), 20, 22]`` (ranges are not expanded here: the
    dataset's episode count bounds them first, in ``DatasetMeta.load``); None stays None.

    Raises:
        StreamingConfigError: a token is not an index or an ``a-b`` range (names the token).
    """
    from lerobotstream.errors import StreamingConfigError

    if tokens is None:
        return None
    out: list[int | range] = []
    for token in tokens:
        for part in str(token).split(","):
            part = part.strip()
            if not part:
                continue
            try:
                a, dash, b = part.partition("-") if "-" in part[1:] else (part, "", part)
                lo, hi = int(a), int(b)
                if hi < lo or lo < 0:
                    raise ValueError
                out.append(range(lo, hi + 1) if dash else lo)
            except ValueError:
                text = f"--episodes: {part!r} is not an episode index or a range a-b (e.g. --episodes 0-9 20)"
                raise StreamingConfigError(text, option="--episodes", value=part) from None
    return out


def _parser() -> argparse.ArgumentParser:
    from lerobotstream import constants
    from lerobotstream._version import __version__

    p = argparse.ArgumentParser(
        prog=_prog(), description=__doc__, epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--version", action="version", version=f"lerobotstream {__version__}")
    p.add_argument(
        "root_arg",
        nargs="?",
        metavar="ROOT",
        help="the dataset: a local folder or URL, as --root (either form; not both)",
    )
    p.add_argument("--repo-id", help="Hub dataset OWNER/NAME (read from the Hub unless a root is given)")
    p.add_argument("--root", help="local folder or URL (http(s)://, hf://, any fsspec URL)")
    p.add_argument("--revision", help="branch, tag or commit of a Hub dataset (default: main)")
    p.add_argument("--endpoint", help="Hub URL (default: HF_ENDPOINT)")
    p.add_argument(
        "--episodes", nargs="+", metavar="E", help="episodes to check: indices and ranges, e.g. 0-9 20 (default: all)"
    )
    p.add_argument(
        "--headers-only",
        action="store_true",
        help="read only headers (footers, statistics, MP4 headers): fewer bytes on a very large remote "
        "dataset, but the per-row checks (row counts, frame_index, index, timestamps) are skipped",
    )
    p.add_argument(
        "--json",
        metavar="OUT",
        help="also write the findings and summary as JSON to the "
        "file OUT, atomically (layout: docs/validate.md; - for stdout)",
    )
    p.add_argument(
        "--print-good-episodes",
        action="store_true",
        help="print only the checked episodes no error finding names, as a list --dataset.episodes takes "
        "(e.g. [0,1,3]); the report is not printed",
    )
    p.add_argument(
        "--decode-sample",
        type=int,
        default=0,
        metavar="N",
        help="decode N random frames per MP4 and check them against their timestamps (default: 0)",
    )
    p.add_argument(
        "--tolerance-s",
        type=float,
        default=constants.DEFAULT_TOLERANCE_S,
        help=f"allowed timestamp error, seconds (default: {constants.DEFAULT_TOLERANCE_S:g}, as LeRobot)",
    )
    p.add_argument(
        "--workers", type=int, help="threads reading headers (default: 8 on a local folder, 32 on a remote store)"
    )
    p.add_argument("--examples", type=int, default=3, help="examples printed per finding code (default: 3)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.add_argument("--quiet", action="store_true", help="print only the last line (the counts)")
    p.add_argument(
        "--debug", action="store_true", help="print the full traceback on errors (also LEROBOTSTREAM_DEBUG=1)"
    )
    return p


#: the keywords of ``validate_dataset`` a library message may name → this command's flags
FLAGS = {
    "root": "--root",
    "repo_id": "--repo-id",
    "revision": "--revision",
    "endpoint": "--endpoint",
    "tolerance_s": "--tolerance-s",
    "decode_sample": "--decode-sample",
    "workers": "--workers",
    "headers_only": "--headers-only",
}


def _check_args(args: argparse.Namespace) -> None:
    """Every flag's rule, before anything is read (each error names the flag and its value)."""
    from lerobotstream._atomic import check_output_file
    from lerobotstream.errors import StreamingConfigError
    from lerobotstream.options import require
    from lerobotstream.validate._scan import check_arguments

    if args.root_arg is not None and args.root is not None and args.root_arg != args.root:
        text = f"give the dataset once: ROOT {args.root_arg!r} and --root {args.root!r} differ"
        raise StreamingConfigError(text, option="--root", value=args.root)
    args.root = args.root if args.root is not None else args.root_arg
    if args.root is None and args.repo_id is None:
        raise StreamingConfigError(
            "give ROOT or --root (a dataset folder or URL) and/or --repo-id (a Hub dataset); see --help"
        )
    check_arguments(decode_sample=args.decode_sample, workers=args.workers, tolerance_s=args.tolerance_s, cli=True)
    require("--examples", args.examples, args.examples >= 0, "an int >= 0")
    if args.print_good_episodes and args.json == "-":
        text = "--print-good-episodes and --json - both write to stdout: give --json a file"
        raise StreamingConfigError(text, option="--print-good-episodes", value=True)
    if args.json not in (None, "-"):
        check_output_file(args.json, flag="--json")


def _run(args: argparse.Namespace) -> int:
    from lerobotstream._atomic import write_text_atomic
    from lerobotstream.errors import MetadataError, StreamingConfigError, as_flags
    from lerobotstream.validate import validate_dataset
    from lerobotstream.validate._findings import render

    _check_args(args)
    try:
        with as_flags(FLAGS):  # "pass root= a local copy" reads "pass --root a local copy"
            report = validate_dataset(
                args.repo_id,
                root=args.root,
                revision=args.revision,
                endpoint=args.endpoint,
                episodes=parse_episodes(args.episodes),
                tolerance_s=args.tolerance_s,
                decode_sample=args.decode_sample,
                workers=args.workers,
                headers_only=args.headers_only,
                progress=not args.no_progress and sys.stderr.isatty(),
            )
    except MetadataError as e:
        if getattr(e, "code", None) == "episodes_unknown":
            raise StreamingConfigError(f"--episodes: {e.message}", option="--episodes") from e
        raise
    if args.json:
        text = json.dumps(report.to_json(), indent=2)
        if args.json == "-":
            print(text)
        else:
            write_text_atomic(args.json, text + "\n")
    if args.print_good_episodes:
        print(json.dumps(report.good_episodes(), separators=(",", ":")))
        wide = [f.code for f in report.errors if not f.episodes]
        if wide:
            print(
                f"note: {len(wide)} error(s) name no episode ({', '.join(sorted(set(wide)))}): leaving episodes out "
                "does not fix them",
                file=sys.stderr,
            )
    elif args.json != "-":
        text = render(report, examples=args.examples)
        print(text.splitlines()[-1] if args.quiet else text)
    return report.exit_status


def main(argv: Sequence[str] | None = None) -> int:
    """Run the validator CLI; returns the exit status (0 no error, 1 errors found, 2 usage error)."""
    args = _parser().parse_args(argv)
    from lerobotstream.errors import run_cli

    return run_cli(lambda: _run(args), debug=args.debug)


if __name__ == "__main__":
    sys.exit(main())
