"""Shared pytest fixtures: the shipped test media (data/testmedia), markers for CUDA tests."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TESTDATA = REPO / "data" / "testmedia"
"""Public media the real-file tests read, shipped in the repository (see its MANIFEST.md)."""

# lerobotstream.constants reads its cache folders once, at import: point them at a private
# folder before any test module imports the package, so tests (and the subprocesses they start,
# which inherit the environment) never write sidecars or indexes into the user's home.
_TEST_HOME = Path(tempfile.mkdtemp(prefix="lerobotstream-tests-"))
os.environ["HF_LEROBOT_HOME"] = str(_TEST_HOME / "hf_lerobot_home")
os.environ.pop("LEROBOTSTREAM_INDEX_DIR", None)
os.environ.pop("LEROBOTSTREAM_SIDECAR_DIR", None)
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never touch the network


def pytest_unconfigure(config: pytest.Config) -> None:
    shutil.rmtree(_TEST_HOME, ignore_errors=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except Exception:
        has_cuda = False
    must_fail = os.environ.get("FAIL_WITHOUT_CUDA") == "1"
    for item in items:
        if "needs_cuda" in item.keywords and not has_cuda and not must_fail:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA device"))


@pytest.fixture(scope="session")
def testdata() -> Path:
    """``data/testmedia`` (real public media files and datasets; see its MANIFEST.md).

    It ships with the repository: a missing folder is a broken checkout and fails, never skips."""
    if not (TESTDATA / "MANIFEST.md").is_file():
        pytest.fail(f"the shipped test media is missing: {TESTDATA} (a partial checkout?)")
    return TESTDATA


@pytest.fixture(scope="session")
def make_generated_dataset(tmp_path_factory: pytest.TempPathFactory):
    """Factory ``make_generated_dataset(**make_dataset_kwargs) -> Path`` of generated v3 datasets
    (``lerobotstream.testing.make_dataset``), built once per session per distinct kwargs and shared by every
    test module. Treat the result as read-only (copy it before breaking it on purpose)."""
    import json as _json

    from lerobotstream.testing import make_dataset

    base = tmp_path_factory.mktemp("generated_datasets")
    cache: dict[str, Path] = {}

    def factory(**kwargs) -> Path:
        key = _json.dumps(kwargs, sort_keys=True, default=repr)
        if key not in cache:
            cache[key] = make_dataset(base / f"ds{len(cache):03d}", **kwargs)
        return cache[key]

    return factory


@pytest.fixture(scope="session")
def small_dataset(make_generated_dataset) -> Path:
    """The small generated dataset several suites stream (``tests/_streams.py``: five short AV1
    episodes, one camera, two episodes per video file; ``small_stream`` builds a stream over it)."""
    from tests._streams import SMALL_DATASET

    return Path(make_generated_dataset(**SMALL_DATASET))
