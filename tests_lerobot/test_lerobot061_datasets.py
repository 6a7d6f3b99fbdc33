"""Datasets written by LeRobot 0.6.1 itself (``LeRobotDataset.create`` / ``add_frame`` /
``save_episode`` / ``finalize``, default encoders: RGB AV1, depth HEVC ``gray12le``), with an
``image`` feature, a float depth image feature and language columns (LeRobot's annotation writer):
one epoch of ``StreamingLeRobotDataset`` items equals LeRobot 0.6.1's map-style items key by key —
depth exactly in mm and m, images pixel-exact, everything else bitwise — and the metadata
(``camera_keys``, ``depth_keys``, rescaled depth stats, ``has_language_columns``, ``tools``) and
``lerobot_collate_fn`` agree.

Run: ``make setup-lerobot && cd tests_lerobot && ../.venv-lerobot/bin/pytest -q -p no:cacheprovider
test_lerobot061_datasets.py``.
"""

from __future__ import annotations

import io
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest

_HOME = tempfile.mkdtemp(prefix="lrs-lerobot061-")
os.environ.setdefault("HF_LEROBOT_HOME", str(Path(_HOME) / "hf_lerobot"))  # sidecars stay out of ~/.cache
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

lerobot = pytest.importorskip("lerobot")
from importlib.metadata import version as _version  # noqa: E402

if not _version("lerobot").startswith("0.6"):
    pytest.skip("datasets written by LeRobot 0.6's own writer", allow_module_level=True)
from lerobot.datasets.lerobot_dataset import LeRobotDataset  # noqa: E402

from lerobotstream import StreamingLeRobotDataset  # noqa: E402

FPS = 10
RGB, DEPTH, WRIST, WDEPTH = (
    "observation.images.rgb",
    "observation.images.depth",
    "observation.images.wrist",
    "observation.images.wrist_depth",
)
H, W = 48, 64
LENGTHS = (9, 12, 7, 11, 8)
DELTAS = {DEPTH: [-0.2, -0.1, 0.0], WRIST: [-0.1, 0.0], WDEPTH: [0.0], RGB: [-0.1, 0.0, 0.1], "action": [0.0, 0.1, 0.2]}


@pytest.fixture(scope="module", autouse=True)
def _cleanup():
    yield
    shutil.rmtree(_HOME, ignore_errors=True)


def _write(root: Path) -> Path:
    features = {
        RGB: {"dtype": "video", "shape": (H, W, 3), "names": ["height", "width", "channels"]},
        DEPTH: {
            "dtype": "video",
            "shape": (H, W, 1),
            "names": ["height", "width", "channels"],
            "info": {"is_depth_map": True},
        },
        WRIST: {"dtype": "image", "shape": (30, 40, 3), "names": ["height", "width", "channels"]},
        WDEPTH: {
            "dtype": "image",
            "shape": (24, 32, 1),
            "names": ["height", "width", "channels"],
            "info": {"is_depth_map": True},
        },
        "observation.state": {"dtype": "float32", "shape": (3,), "names": None},
        "action": {"dtype": "float32", "shape": (2,), "names": None},
    }
    # small file limits: several video and data files, several episodes per file, per-camera offsets
    ds = LeRobotDataset.create(
        "local/lerobot061",
        fps=FPS,
        features=features,
        root=root,
        use_videos=True,
        video_files_size_in_mb=0.05,
        data_files_size_in_mb=0.06,
    )
    rng = np.random.default_rng(0)
    y, x = np.arange(H)[:, None], np.arange(W)[None, :]
    for ep, n in enumerate(LENGTHS):
        for i in range(n):
            depth_mm = (10 + (x * 37 + y * 101 + i * 53 + ep * 997) % 9990).astype(np.uint16)[..., None]
            ds.add_frame(
                {
                    RGB: rng.integers(0, 256, (H, W, 3), dtype=np.uint8),
                    DEPTH: depth_mm,
                    WRIST: rng.integers(0, 256, (30, 40, 3), dtype=np.uint8),
                    WDEPTH: (rng.random((24, 32, 1), dtype=np.float32) * 3).astype(np.float32),  # metres (mode F)
                    "observation.state": rng.random(3, dtype=np.float32),
                    "action": rng.random(2, dtype=np.float32),
                    "task": f"task {ep % 2}",
                }
            )
        ds.save_episode()
    ds.finalize()
    _annotate(root)
    return root


def _annotate(root: Path) -> None:
    """Language columns the way LeRobot 0.6.1's annotation pipeline writes them (its writer's table
    materialisation, one row group per episode, and its info.json update)."""
    import pyarrow.parquet as pq
    from lerobot.annotations.steerable_pipeline.executor import Executor
    from lerobot.annotations.steerable_pipeline.writer import LanguageColumnsWriter, speech_atom
    from lerobot.datasets.io_utils import write_table_one_row_group_per_episode

    for path in sorted((root / "data").rglob("*.parquet")):
        table = pq.read_table(path)
        eps, ts = table.column("episode_index").to_pylist(), table.column("timestamp").to_pylist()
        persistent = [
            [
                {
                    "role": "assistant",
                    "content": f"plan {e}",
                    "style": "plan",
                    "timestamp": 0.0,
                    "camera": None,
                    "tool_calls": None,
                },
                {
                    "role": "assistant",
                    "content": "reach",
                    "style": "subtask",
                    "timestamp": 0.3,
                    "camera": None,
                    "tool_calls": None,
                },
            ]
            for e in eps
        ]
        events = []
        for e, t in zip(eps, ts):
            row = []
            if round(t * FPS) % 4 == 1:
                atom = speech_atom(t, f"hello {e}")
                atom.pop("timestamp")
                row.append(atom)
            if round(t * FPS) % 5 == 2:
                row.append(
                    {"role": "user", "content": "where is the cube?", "style": "vqa", "camera": RGB, "tool_calls": None}
                )
            events.append(row)
        new = LanguageColumnsWriter()._materialize_table(table, persistent, events, drop_old=True)
        tmp = path.with_suffix(".tmp.parquet")
        write_table_one_row_group_per_episode(new, tmp)
        tmp.replace(path)
    Executor._ensure_annotation_metadata_in_info(root)


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return _write(tmp_path_factory.mktemp("lerobot061") / "ds")


def _equal(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    return type(a) is type(b) and a == b


def _compare_epoch(root: Path, **kw) -> int:
    ref = LeRobotDataset("local/lerobot061", root=root, **kw)
    ours = StreamingLeRobotDataset(root=root, **kw)
    got = {int(it["index"]): it for it in ours}
    assert sorted(got) == list(range(len(ref))) == list(range(sum(LENGTHS)))
    for i in range(len(ref)):
        want, have = ref[i], got[i]
        assert set(want) == set(have), (i, set(want) ^ set(have))
        bad = [k for k in want if not _equal(want[k], have[k])]
        assert not bad, (
            i,
            bad,
            {k: (getattr(want[k], "dtype", type(want[k])), getattr(have[k], "dtype", type(have[k]))) for k in bad},
        )
    return len(ref)


def test_layout_has_several_files_and_offsets(root):
    import pyarrow.parquet as pq

    eps = pq.read_table(next((root / "meta" / "episodes").rglob("*.parquet"))).to_pylist()
    for cam in (RGB, DEPTH):
        files = [e[f"videos/{cam}/file_index"] for e in eps]
        assert len(set(files)) >= 2 and len(files) > len(set(files)), (cam, files)  # several files, shared files
    assert [e[f"videos/{RGB}/file_index"] for e in eps] != [e[f"videos/{DEPTH}/file_index"] for e in eps]
    assert len({e["data/file_index"] for e in eps}) >= 2
    assert StreamingLeRobotDataset(root=root).meta.features[DEPTH]["info"]["video.pix_fmt"] == "gray12le"


@pytest.mark.parametrize("unit", ["mm", "m"])
def test_epoch_equals_map_style(root, unit):
    assert _compare_epoch(root, depth_output_unit=unit, delta_timestamps=DELTAS) == sum(LENGTHS)


def test_epoch_equals_map_style_uint8_no_windows(root):
    """``lerobot-train``'s setting: return_uint8=True (RGB uint8; depth and image features float32)."""
    _compare_epoch(root, return_uint8=True)


def test_metadata_and_stats_equal(root):
    from lerobot.datasets.dataset_metadata import LeRobotDatasetMetadata

    for unit in ("mm", "m"):
        ref = LeRobotDataset("local/lerobot061", root=root, depth_output_unit=unit).meta
        ours = StreamingLeRobotDataset(root=root, depth_output_unit=unit).meta
        for name in ("camera_keys", "video_keys", "image_keys", "depth_keys", "has_language_columns", "tools"):
            assert getattr(ours, name) == getattr(ref, name), name
        for key in ref.depth_keys:
            for stat, value in ref.stats[key].items():
                assert np.array_equal(np.asarray(ours.stats[key][stat]), value), (unit, key, stat)
    meta = LeRobotDatasetMetadata("local/lerobot061", root=root)
    q = StreamingLeRobotDataset(root=root).meta.depth_quantizer(DEPTH)
    from lerobot.configs import DepthEncoderConfig

    cfg = DepthEncoderConfig.from_video_info(meta.features[DEPTH]["info"])
    assert (q.depth_min, q.depth_max, q.shift, q.use_log) == (cfg.depth_min, cfg.depth_max, cfg.shift, cfg.use_log)


def test_collate_equals_lerobot(root):
    from lerobot.utils.collate import lerobot_collate_fn as theirs

    from lerobotstream.dataset._collate import lerobot_collate_fn as ours

    items = [it for _, it in zip(range(6), StreamingLeRobotDataset(root=root))]
    a, b = theirs(items + [None]), ours(items + [None])
    # ours is 0.6.1's: language columns dropped; LeRobot main (0.6.2.dev) keeps them as Python lists
    language = {"language_persistent", "language_events"}
    assert set(a) - language == set(b) and not set(b) & language
    assert all(_equal(a[k], b[k]) if isinstance(a[k], torch.Tensor) else a[k] == b[k] for k in b)


def test_packed_collate_over_lerobots_collate(root):
    """What lerobotstream-train gives LeRobot 0.6.1 on a dataset with language columns: PackedCollate
    over LeRobot's own lerobot_collate_fn, in 2 spawn DataLoader workers, equals LeRobot's collate."""
    from lerobot.utils.collate import lerobot_collate_fn as theirs

    from lerobotstream.dataset._collate import PackedCollate

    def batches(collate_fn):
        ds = StreamingLeRobotDataset(root=root, max_num_shards=2, batch_size=3, seed=5)
        return list(
            torch.utils.data.DataLoader(
                ds, batch_size=3, num_workers=2, collate_fn=collate_fn, multiprocessing_context="spawn"
            )
        )

    ref, got = batches(theirs), batches(PackedCollate(theirs))
    assert len(ref) == len(got) > 1
    for a, b in zip(ref, got):
        # the same keys (LeRobot main orders its list keys by a set, which differs between workers)
        assert set(a) == set(b)
        for k in a:
            assert _equal(a[k], b[k]) if isinstance(a[k], torch.Tensor) else a[k] == b[k], k


def _pil_cases():
    from PIL import Image

    rng = np.random.default_rng(3)
    rgb = rng.integers(0, 256, (13, 17, 3), dtype=np.uint8)
    cases = {}

    def save(img, fmt, **kw):
        buf = io.BytesIO()
        img.save(buf, format=fmt, **kw)
        return buf.getvalue()

    cases["RGB.png"] = save(Image.fromarray(rgb), "PNG")
    cases["L.png"] = save(Image.fromarray(rgb[..., 0]), "PNG")
    cases["LA.png"] = save(Image.fromarray(rgb).convert("LA"), "PNG")
    cases["RGBA.png"] = save(Image.fromarray(np.dstack([rgb, rgb[..., :1]])), "PNG")
    cases["P.png"] = save(Image.fromarray(rgb).convert("P"), "PNG")
    cases["1.png"] = save(Image.fromarray(rgb[..., 0] > 128), "PNG")
    cases["I16.png"] = save(Image.fromarray((rng.integers(0, 65536, (13, 17))).astype(np.uint16)), "PNG")
    cases["I16.tiff"] = save(
        Image.fromarray((rng.integers(0, 65536, (13, 17))).astype(np.uint16)), "TIFF", compression="raw"
    )
    cases["F.tiff"] = save(Image.fromarray(rng.random((13, 17), dtype=np.float32)), "TIFF", compression="raw")
    cases["I.tiff"] = save(Image.fromarray(rng.integers(-5, 70000, (13, 17)).astype(np.int32)), "TIFF")
    cases["RGB.jpg"] = save(Image.fromarray(rgb), "JPEG", quality=85)
    cases["CMYK.jpg"] = save(Image.fromarray(rgb).convert("CMYK"), "JPEG")
    exif = Image.Exif()
    exif[0x0112] = 6  # rotated 90 degrees: HF's decode applies exif_transpose
    cases["rot.jpg"] = save(Image.fromarray(rgb), "JPEG", exif=exif)
    return cases


@pytest.mark.parametrize("name", list(_pil_cases()))
def test_image_decode_equals_hf_and_lerobot(name):
    """Every PIL mode LeRobot can meet: HF ``datasets.Image`` decode + LeRobot's ``pil_to_chw_tensor``
    (``ToTensor``) versus our Pillow decode + float pass."""
    import datasets
    from lerobot.datasets.io_utils import pil_to_chw_tensor

    from lerobotstream.dataset._assemble import _image_value
    from lerobotstream.dataset._images import decode_image

    data = _pil_cases()[name]
    want = pil_to_chw_tensor(datasets.Image().decode_example({"bytes": data, "path": None}))
    got = _image_value([decode_image(data, key="k")], False)
    assert got.dtype == want.dtype and got.shape == want.shape, (name, got.dtype, want.dtype, got.shape, want.shape)
    assert torch.equal(got, want), name


def test_positional_arguments_are_lerobot_061s_streaming_dataset_order():
    """The constructor's positional arguments after repo_id, root are LeRobot 0.6.1's
    ``StreamingLeRobotDataset``'s, in its order; its arguments that are no option here have its defaults."""
    import inspect

    from lerobot.datasets.streaming_dataset import StreamingLeRobotDataset as LeRobots

    from lerobotstream.options import LEROBOT_ONLY, LEROBOT_POSITIONAL

    theirs = inspect.signature(LeRobots.__init__).parameters
    positional = [n for n, p in theirs.items() if p.kind == p.POSITIONAL_OR_KEYWORD][3:]
    assert tuple(positional) == LEROBOT_POSITIONAL
    for name, arg in LEROBOT_ONLY.items():
        assert theirs[name].default == arg.default, name
    ours = inspect.signature(StreamingLeRobotDataset.__init__).parameters
    assert [n for n, p in ours.items() if p.kind == p.POSITIONAL_OR_KEYWORD][3:] == positional
