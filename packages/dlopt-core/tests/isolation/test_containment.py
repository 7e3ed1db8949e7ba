"""A decision's containment: the temp directory a plan sees while it is brought into this
process, and everything put back after."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from dlopt.platform.containment import INDUCTOR_CACHE_ENV, TEMP_ENV, Containment, private_temp_dir


@pytest.fixture
def temp_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "tmp"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    for name in TEMP_ENV:
        monkeypatch.setenv(name, str(root))
    monkeypatch.delenv(INDUCTOR_CACHE_ENV, raising=False)
    return root


def test_the_body_sees_the_private_directory_and_the_rest_is_put_back(temp_root, tmp_path):
    private = tmp_path / "private"
    private.mkdir()
    with private_temp_dir(private):
        assert tempfile.gettempdir() == str(private)
        assert [os.environ[name] for name in TEMP_ENV] == [str(private)] * len(TEMP_ENV)
        # What torch does on its first compile: it pins its cache in the environment.
        os.environ[INDUCTOR_CACHE_ENV] = str(private / "torchinductor_me")
    assert tempfile.gettempdir() == str(temp_root)
    assert [os.environ[name] for name in TEMP_ENV] == [str(temp_root)] * len(TEMP_ENV)
    assert INDUCTOR_CACHE_ENV not in os.environ


def test_a_cache_dir_you_set_is_kept(temp_root, tmp_path, monkeypatch):
    mine = str(tmp_path / "my-inductor-cache")
    monkeypatch.setenv(INDUCTOR_CACHE_ENV, mine)
    with private_temp_dir(tmp_path):
        assert os.environ[INDUCTOR_CACHE_ENV] == mine
    assert os.environ[INDUCTOR_CACHE_ENV] == mine


def test_it_is_put_back_when_the_body_raises(temp_root, tmp_path):
    with pytest.raises(RuntimeError), private_temp_dir(tmp_path):
        raise RuntimeError("a build failed")
    assert tempfile.gettempdir() == str(temp_root) and os.environ["TMPDIR"] == str(temp_root)


def test_release_removes_what_was_written_inside(temp_root):
    containment = Containment()
    assert containment.temp_dir is None  # nothing made before a plan is brought in
    with containment.inside():
        handle, written = tempfile.mkstemp()
        os.close(handle)
        with open(os.path.join(os.environ["TMPDIR"], ".ses"), "w", encoding="utf-8") as f:
            f.write("native")
    own = containment.temp_dir
    assert own is not None and own.parent == temp_root
    assert Path(written).parent == own and (own / ".ses").is_file()
    assert containment.release() == []
    assert containment.temp_dir is None and list(temp_root.iterdir()) == []
    assert containment.release() == []  # idempotent
