"""Which cameras a dataset decodes, and how: RGB video, depth video, ``image`` features.

``camera_keys=`` selects among the dataset's camera keys as LeRobot 0.6.1 defines them (video and
image features, ``LeRobotDatasetMetadata.camera_keys``); a key that is not selected is never
fetched or decoded and is absent from the items (its Parquet column is not even read). Depth keys
(``is_depth_map``) get no image transforms, as in LeRobot; depth video is dequantised to
``depth_output_unit`` with the camera's quantiser from ``info.json``; depth *images* (16-bit
TIFF/PNG in the rows) are converted from their recorded ``depth_unit`` the way map-style converts
them.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass, field

from lerobotstream.dataset._images import image_depth_factor
from lerobotstream.errors import MetadataError, StreamingConfigError
from lerobotstream.meta import LANGUAGE_COLUMNS, DatasetMeta

__all__ = ["CameraPlan", "plan_cameras"]


@dataclass
class CameraPlan:
    """The decoded cameras of one dataset (info order)."""

    video_keys: list[str]  # decoded video features (RGB and depth): each gets a mini-MP4 per episode
    image_keys: list[str]  # decoded ``image`` features (bytes in the Parquet rows)
    depth_keys: list[str]  # decoded depth video features (PyAV ``gray12le`` codes, dequantised)
    transform_keys: list[str]  # decoded camera keys ``image_transforms`` apply to (all but depth keys)
    #: depth video key → :class:`~lerobotstream.decode._depth.DepthDequantizer`
    dequantizers: dict = field(default_factory=dict)
    #: depth image key → unit conversion (``"mul"`` / ``"div"`` / None: ``_images.image_depth_factor``)
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
            ``string`` feature;
            a selected depth video without PyAV, or image features without Pillow, installed.
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
            plan.image_depth[key] = image_depth_factor(meta.depth_unit(key), depth_output_unit)
    return plan
