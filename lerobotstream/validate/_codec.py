"""What an MP4's sample description says about its stream: codec, pixel format, NVDEC support.

Read from bytes the parser already fetched (``SampleTable.stsd``), never from the sample payload.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

#: sample-entry fourcc → codec name as LeRobot writes it in ``info.json`` (``video.codec``)
CODEC_NAMES = {"av01": "av1", "avc1": "h264", "avc3": "h264", "hev1": "hevc", "hvc1": "hevc"}
#: codec-name aliases found in ``info.json`` (FFmpeg encoder or long names)
_CODEC_ALIASES = {
    **dict.fromkeys(("libsvtav1", "libaom-av1", "av01"), "av1"),
    **dict.fromkeys(("libx264", "avc", "avc1", "h.264"), "h264"),
    **dict.fromkeys(("libx265", "h265", "h.265", "hev1", "hvc1"), "hevc"),
}
#: GPU families a training run commonly gets, and the codecs their NVDEC decodes (NVIDIA Video
#: Codec SDK 13 "NVDEC Hardware Capabilities": Turing/GA100/Hopper have no AV1 decode; GA10x,
#: Ada and Blackwell have it; H.264 High10/422 and HEVC 4:2:2 only on Blackwell).
GPU_FAMILIES = ("A100", "H100/H200", "A10/L4/L40/RTX 30-40", "Blackwell")


def normalise_codec(name: object) -> str | None:
    """``info.json``'s ``video.codec`` as one of ``av1``/``h264``/``hevc`` (or the lowercased name)."""
    text = None if name is None else str(name).strip().lower()
    return _CODEC_ALIASES.get(text, text)


def normalise_pix_fmt(name: object) -> str | None:
    """A pixel format name compared by what is stored: ``yuvj420p`` (full range) is ``yuv420p``."""
    return None if name is None else str(name).strip().lower().replace("yuvj", "yuv")


@dataclass(frozen=True)
class StreamFormat:
    """A video track's format from its sample description."""

    codec: str
    """``av1``/``h264``/``hevc``, or the fourcc of another codec."""
    fourcc: str
    pix_fmt: str | None
    """FFmpeg's name (``yuv420p``, ``yuv420p10le``, ``gray12le``...); None when not recognisable."""
    bit_depth: int | None
    chroma: str | None
    """``4:0:0``, ``4:2:0``, ``4:2:2`` or ``4:4:4``."""


def _child_boxes(data: bytes, start: int) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    pos = start
    while pos + 8 <= len(data):
        size, kind = struct.unpack_from(">I4s", data, pos)
        if size < 8 or pos + size > len(data):
            break
        out.setdefault(kind.decode("latin-1"), data[pos + 8 : pos + size])
        pos += size
    return out


_CHROMA = {0: "4:0:0", 1: "4:2:0", 2: "4:2:2", 3: "4:4:4"}


def _pix_fmt(chroma: str | None, depth: int | None) -> str | None:
    if chroma is None or depth is None:
        return None
    base = "gray" if chroma == "4:0:0" else "yuv" + chroma.replace(":", "")[:3] + "p"
    return base if depth == 8 else f"{base}{depth}le"


def stream_format(stsd: bytes, fourcc: str) -> StreamFormat:
    """The format of a track from its ``stsd`` payload (version/flags, entry count, first entry)."""
    codec = CODEC_NAMES.get(fourcc, fourcc)
    chroma = depth = None
    if fourcc not in CODEC_NAMES:  # an encrypted or other codec's entry: its boxes are not read
        return StreamFormat(codec, fourcc, None, None, None)
    entry = stsd[8:] if len(stsd) >= 16 else b""
    boxes = _child_boxes(entry, 8 + 78) if len(entry) >= 86 else {}  # sample entry header + VisualSampleEntry
    try:
        if "av1C" in boxes:
            b = boxes["av1C"]
            high, twelve, mono = (b[2] >> 6) & 1, (b[2] >> 5) & 1, (b[2] >> 4) & 1
            sx, sy = (b[2] >> 3) & 1, (b[2] >> 2) & 1
            depth = (12 if twelve else 10) if high else 8
            chroma = "4:0:0" if mono else {(1, 1): "4:2:0", (1, 0): "4:2:2", (0, 0): "4:4:4"}.get((sx, sy))
        elif "hvcC" in boxes:
            b = boxes["hvcC"]
            chroma, depth = _CHROMA.get(b[16] & 3), (b[17] & 7) + 8
        elif "avcC" in boxes:
            chroma, depth = _avc_format(boxes["avcC"])
    except (IndexError, ValueError, struct.error):  # a short configuration record: format unknown
        chroma = depth = None
    return StreamFormat(codec, fourcc, _pix_fmt(chroma, depth), depth, chroma)


_AVC_HIGH_PROFILES = (100, 110, 122, 244, 44, 83, 86, 118, 128, 138, 139, 134, 135)


def _sps_chroma_depth(nal: bytes) -> tuple[int, int]:
    """chroma_format_idc and luma bit depth of an H.264 SPS NAL unit (ITU-T H.264 7.3.2.1.1)."""
    rbsp = nal[1:].replace(b"\x00\x00\x03", b"\x00\x00")  # emulation prevention bytes
    bits = "".join(f"{x:08b}" for x in rbsp[3:40])  # after profile_idc, constraint flags, level_idc
    pos = 0

    def ue() -> int:
        nonlocal pos
        zeros = 0
        while bits[pos] == "0":
            zeros += 1
            pos += 1
        value = int(bits[pos : pos + zeros + 1], 2) - 1
        pos += zeros + 1
        return value

    ue()  # seq_parameter_set_id
    chroma = ue()
    if chroma == 3:
        pos += 1  # separate_colour_plane_flag
    return chroma, ue() + 8


def _avc_format(b: bytes) -> tuple[str | None, int | None]:
    """Chroma and bit depth from ``avcC``: its High-profile extension, else the first SPS."""
    profile = b[1]
    if profile not in _AVC_HIGH_PROFILES:
        return "4:2:0", 8  # Baseline/Main/Extended: always 8-bit 4:2:0
    pos = 5
    nsps = b[pos] & 0x1F
    pos += 1
    sps = []
    for _ in range(nsps):
        n = struct.unpack_from(">H", b, pos)[0]
        sps.append(b[pos + 2 : pos + 2 + n])
        pos += 2 + n
    npps = b[pos]
    pos += 1
    for _ in range(npps):
        pos += 2 + struct.unpack_from(">H", b, pos)[0]
    if pos + 2 <= len(b):
        return _CHROMA.get(b[pos] & 3), (b[pos + 1] & 7) + 8
    if sps:  # the extension is optional in practice (older writers omit it)
        chroma, depth = _sps_chroma_depth(sps[0])
        return _CHROMA.get(chroma), depth
    return None, None


def nvdec_support(fmt: StreamFormat, *, depth_map: bool = False) -> dict[str, str]:
    """Per GPU family (:data:`GPU_FAMILIES`): ``"nvdec"`` when its NVDEC decodes the stream,
    ``"cpu"`` when the decode falls back to the CPU."""
    if depth_map:  # depth maps decode with PyAV on the CPU (their 12-bit codes are kept exactly)
        return {g: "cpu" for g in GPU_FAMILIES}
    c, d = fmt.chroma, fmt.bit_depth or 8
    if fmt.codec == "h264":
        ok = {g: c in (None, "4:2:0") and d == 8 for g in GPU_FAMILIES}
        ok["Blackwell"] = c in (None, "4:2:0", "4:2:2") and d <= 10
    elif fmt.codec == "hevc":
        ok = {g: c in (None, "4:2:0", "4:4:4") and d <= 12 for g in GPU_FAMILIES}
        ok["Blackwell"] = c in (None, "4:2:0", "4:2:2", "4:4:4") and d <= 12
    elif fmt.codec == "av1":
        ok = {
            "A100": False,
            "H100/H200": False,
            "A10/L4/L40/RTX 30-40": c in (None, "4:2:0", "4:0:0") and d <= 10,
            "Blackwell": c in (None, "4:2:0", "4:0:0") and d <= 10,
        }
    else:
        ok = {g: False for g in GPU_FAMILIES}
    return {g: "nvdec" if v else "cpu" for g, v in ok.items()}
