"""``speculab._files.atomic_path``: whole files or none, and never written through a planted link."""

import os

import pytest

from speculab._files import atomic_path


def test_a_link_planted_at_a_predictable_temporary_name_is_not_followed(tmp_path):
    """The temporary name was ``.NAME.PID.tmp``: a link planted there (in a shared folder) sent the write to the
    file it points to. The temporary file is now made exclusively under a random name."""
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    out = tmp_path / "shared"
    out.mkdir()
    for pid in {os.getpid(), os.getpid() + 1}:
        (out / f".inst.npz.{pid}.tmp").symlink_to(victim)
    with atomic_path(out / "inst.npz") as tmp:
        assert not tmp.is_symlink() and tmp.parent == out and tmp.name.startswith(".inst.npz.")
        tmp.write_text("new")
    assert victim.read_text() == "keep me" and (out / "inst.npz").read_text() == "new"


def test_a_link_at_the_destination_is_replaced_not_written_through(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    path = tmp_path / "result.json"
    path.symlink_to(victim)
    with atomic_path(path) as tmp:
        tmp.write_text("{}")
    assert victim.read_text() == "keep me"
    assert not path.is_symlink() and path.read_text() == "{}"


@pytest.mark.parametrize("mask", [0o022, 0o077, 0o002])
def test_the_file_gets_the_mode_a_plain_open_gives(tmp_path, mask):
    """The result's mode is ``0o666`` less the umask in force when it is written (not one read earlier)."""
    before = os.umask(mask)
    try:
        with atomic_path(tmp_path / "a.txt") as tmp:
            tmp.write_text("x")
        (tmp_path / "b.txt").write_text("x")
    finally:
        os.umask(before)
    assert (tmp_path / "a.txt").stat().st_mode & 0o777 == (tmp_path / "b.txt").stat().st_mode & 0o777 == 0o666 & ~mask


def test_a_failed_write_leaves_nothing_beside_the_old_file(tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_path(path) as tmp:
            tmp.write_text("half")
            raise RuntimeError("boom")
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["a.txt"]
