"""Bad input is a typed ``lerobotstream.errors`` class naming the field, file or flag (issue 35
item 7): an info.json of 100k nested brackets (was ``RecursionError``), a symlink loop (a bare
``OSError``), a ``gopher://`` root (``ValueError: Protocol not known``), ``tolerance_s=nan``
(``ValueError: cannot convert NaN to integer ratio``). Each class also inherits the built-in
callers caught before."""

from __future__ import annotations

import math
import shutil
import time
from pathlib import Path

import pytest

from lerobotstream.errors import (
    LeRobotStreamError,
    MetadataError,
    MetadataReadError,
    SourceError,
    SourceProtocolError,
    StreamingConfigError,
)
from lerobotstream.meta import DatasetMeta
from lerobotstream.validate.__main__ import main as validate_main

REPO = Path(__file__).resolve().parents[2]
G1 = REPO / "data" / "g1_v30"


def _err_line(capsys) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize("name", ["info.json", "stats.json"])
def test_json_nested_deeper_than_the_parser_allows(tmp_path, capsys, name):
    root = tmp_path / "ds"
    shutil.copytree(G1, root)
    (root / "meta" / name).write_text("[" * 100_000)
    with pytest.raises(
        MetadataError, match=rf"meta/{name} nests arrays/objects deeper than the JSON parser allows"
    ) as e:
        DatasetMeta.load(root)
    assert isinstance(e.value, ValueError) and e.value.path == f"meta/{name}" and e.value.__cause__ is None
    assert validate_main([str(root)]) == 2
    assert _err_line(capsys).startswith(f"error: MetadataError: {root}/meta/{name} nests arrays/objects deeper")


def test_a_symlink_loop_is_a_metadata_read_error(tmp_path, capsys):
    root = tmp_path / "ds"
    shutil.copytree(G1, root)
    info = root / "meta" / "info.json"
    info.unlink()
    info.symlink_to(info.name)  # a link to itself
    with pytest.raises(MetadataReadError) as e:
        DatasetMeta.load(root)
    assert isinstance(e.value, OSError) and isinstance(e.value, MetadataError)
    assert (
        str(e.value)
        == f"could not read meta/info.json {root}/meta/info.json: Too many levels of symbolic links (ELOOP)"
    )
    assert e.value.path == "meta/info.json"
    assert validate_main([str(root)]) == 2
    assert _err_line(capsys).startswith("error: MetadataReadError: could not read meta/info.json")


def test_an_unknown_url_protocol_is_a_source_protocol_error(capsys):
    from lerobotstream.sources import open_source

    with pytest.raises(SourceProtocolError) as e:
        open_source("gopher://user:secret@example.org/ds")
    assert isinstance(e.value, ValueError) and isinstance(e.value, SourceError) and isinstance(e.value, OSError)
    assert e.value.protocol == "gopher" and "secret" not in str(e.value)
    assert str(e.value).startswith("root 'gopher://example.org/ds': no fsspec filesystem serves the protocol 'gopher'")
    assert validate_main(["--root", "gopher://example.org/ds"]) == 2
    assert _err_line(capsys).startswith("error: SourceProtocolError: root 'gopher://example.org/ds'")


def test_a_known_fsspec_protocol_still_opens(tmp_path):
    from lerobotstream.sources import open_source

    assert type(open_source("memory://lrs-test-root")).__name__ == "FsspecSource"


@pytest.mark.parametrize("value", [math.nan, math.inf, -1.0, 0, "1e-4"])
def test_validate_dataset_refuses_a_bad_tolerance_by_name(value):
    from lerobotstream.validate import validate_dataset

    with pytest.raises(StreamingConfigError, match=r"^tolerance_s must be a number > 0 \(seconds\), got ") as e:
        validate_dataset(root=G1, tolerance_s=value)
    assert isinstance(e.value, ValueError) and e.value.option == "tolerance_s"


def test_episode_ranges_are_bounded_before_they_are_expanded():
    t0 = time.process_time()
    with pytest.raises(MetadataError, match=r"episodes \['2\.\.999999999999'\] are not in ") as e:
        DatasetMeta.load(G1, episodes=[range(0, 10**12)])
    assert e.value.code == "episodes_unknown" and time.process_time() - t0 < 30
    assert [ep.episode_index for ep in DatasetMeta.load(G1, episodes=[range(0, 2)]).episodes] == [0, 1]
    assert [ep.episode_index for ep in DatasetMeta.load(G1, episodes=[1, range(1, 2)]).episodes] == [1]


def test_every_new_class_is_a_lerobotstream_error():
    for cls in (MetadataReadError, SourceProtocolError):
        assert issubclass(cls, LeRobotStreamError)
