"""``lerobotstream.testing`` holds only fixtures a user's tests import (issue 34): the CUDA parity
check is a tool (``tools/gpu_check.py``); the v2.1 converter stays, and the package says why."""

from __future__ import annotations

import lerobotstream.testing as testing

#: what a user's tests import: datasets and their exact values, a loopback Hub, the BMFF oracle
FIXTURES = {
    "make_dataset",
    "convert_v21_to_v30",
    "read_identity",
    "identity_frame",
    "depth_frame_mm",
    "quantize_depth",
    "expected_depth_codes",
    "image_frame",
    "expected_language",
    "DEPTH_QUANTIZER",
    "SAY_TOOL_SCHEMA",
    "CODECS",
    "LoopbackServer",
    "parse_reference",
    "RefError",
}


def test_the_package_exports_fixtures_only():
    assert set(testing.__all__) == FIXTURES
    assert not hasattr(testing, "check_gpu_parity")


def test_the_package_says_why_the_converter_stays():
    doc = " ".join(testing.__doc__.split())
    assert "It stays here, beside make_dataset" in doc.replace(":func:", "").replace("`", "")
    assert "python -m tools.gpu_check" in doc
