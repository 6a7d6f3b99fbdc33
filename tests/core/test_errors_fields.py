"""An error's structured fields have a public view (``LeRobotStreamError.fields``): re-raising the
same error with a longer message keeps them, and the copy cannot change the error."""

from __future__ import annotations

import pickle

import pytest

from lerobotstream.errors import FrameTimestampError, naming


def test_fields_are_a_copy_kept_by_naming_and_pickling():
    err = FrameTimestampError("no frame near 1.5 s", episode_index=3, camera="front")
    assert err.fields == {"episode_index": 3, "camera": "front"}
    err.fields["episode_index"] = 9
    assert err.episode_index == 3 and err.fields["episode_index"] == 3
    with pytest.raises(FrameTimestampError) as info:
        with naming("dataset 1 (b/y)"):
            raise err
    assert info.value.message.startswith("dataset 1 (b/y): ") and info.value.fields == err.fields
    assert pickle.loads(pickle.dumps(info.value)).fields == err.fields
