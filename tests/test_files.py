"""``speculab._files.atomic_path``: whole files or none, and never written through a planted link."""

import os
from pathlib import Path

import numpy as np
import pytest

from speculab._files import atomic_folder, atomic_path


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


def test_a_folder_is_replaced_whole_or_left_as_it_was(tmp_path):
    """:func:`atomic_folder`: the folder filled beside takes the place of the old one (nothing of the old is left);
    an exception while filling leaves the old folder and nothing beside it."""
    path = tmp_path / "model"
    path.mkdir()
    (path / "old.bin").write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_folder(path) as tmp:
            (tmp / "half.bin").write_text("half")
            raise RuntimeError("boom")
    assert [p.name for p in tmp_path.iterdir()] == ["model"] and [p.name for p in path.iterdir()] == ["old.bin"]
    with atomic_folder(path) as tmp:
        assert tmp.parent == tmp_path and not tmp.is_symlink() and list(tmp.iterdir()) == []
        (tmp / "new.bin").write_text("new")
    assert [p.name for p in tmp_path.iterdir()] == ["model"] and [p.name for p in path.iterdir()] == ["new.bin"]


# -- every writer of the package, with a link planted at each name it chooses itself ------------------------------
def _sim_checkpoint_in_a_resumable_folder(tmp_path, victim):
    """A simulation's checkpoint ``sim-<digest>.jsonl`` inside ``resumable``: its name follows from the call."""
    from speculab.methods import SD
    from speculab.sim import simulate
    from speculab.sim.checkpoint import active_checkpoint, resumable
    from speculab.theory import MarkovInstance

    inst, folder = MarkovInstance.random(T=4, V=3, key=0), tmp_path / "ck"
    with resumable(folder):
        path, _ = active_checkpoint(inst, SD(), 50, np.random.default_rng(1))
    folder.mkdir()
    path.symlink_to(victim)
    with resumable(folder):
        simulate(inst, SD(), 50, np.random.default_rng(1))


def _sim_checkpoint_named_by_the_user(tmp_path, victim):
    from speculab.methods import SD
    from speculab.sim import simulate
    from speculab.theory import MarkovInstance

    (tmp_path / "sim.jsonl").symlink_to(victim)
    simulate(MarkovInstance.random(T=4, V=3, key=0), SD(), 50, 1, checkpoint=tmp_path / "sim.jsonl")


def _recorded_call(tmp_path, victim):
    from speculab._lines import call_file
    from speculab.sim.checkpoint import recorded, resumable

    folder = tmp_path / "ck"
    with resumable(folder):
        path = call_file(folder, ("a call", 1))
    folder.mkdir()
    path.symlink_to(victim)
    with resumable(folder):
        recorded(("a call", 1), lambda: [], [])


def _appended_line(tmp_path, victim):
    from speculab._lines import append_line

    (tmp_path / "j.jsonl").symlink_to(victim)
    append_line(tmp_path / "j.jsonl", {"format": "speculab-sim-1"})


def _cut_line(tmp_path, victim):
    """:func:`read_lines` cuts a line an interruption left short: through a link it cut the file pointed to."""
    from speculab._lines import read_lines

    (tmp_path / "j.jsonl").symlink_to(victim)
    read_lines(tmp_path / "j.jsonl")


def _decode_journal(tmp_path, victim):
    pytest.importorskip("torch")
    from speculab.backends.journal import DecodeJournal

    (tmp_path / "decode-0.jsonl").symlink_to(victim)
    DecodeJournal(tmp_path / "decode-0.jsonl", {"call": "decode-0"})


def _repro_resume_folder(tmp_path, victim):
    """``speculab repro NAME --out DIR`` keeps its checkpoints in ``DIR/.NAME.resume``."""
    from speculab.repro import runner

    out = tmp_path / "results"
    out.mkdir()
    runner.resume_folder(out, "yin-fig2a").symlink_to(victim, target_is_directory=True)
    runner.run_figure("yin-fig2a", out, n_runs=200)


WRITERS = {
    "a simulation checkpoint in resumable's folder": _sim_checkpoint_in_a_resumable_folder,
    "a simulation checkpoint named by the user": _sim_checkpoint_named_by_the_user,
    "a recorded call": _recorded_call,
    "a line appended to a checkpoint": _appended_line,
    "a checkpoint's cut line": _cut_line,
    "a decode journal": _decode_journal,
    "repro's resume folder": _repro_resume_folder,
}


@pytest.mark.parametrize("kept", [False, True], ids=["dangling", "to-a-file"])
@pytest.mark.parametrize("writer", list(WRITERS), ids=list(WRITERS))
def test_a_link_planted_at_a_name_speculab_chose_is_refused_never_followed(tmp_path, writer, kept):
    """A symbolic link planted at a checkpoint's, a journal's or a resume folder's predictable name made a run
    write outside its folder (and exit 0). Each writer now refuses the link, naming it; what it points to is left
    as it was — not created when missing, not appended to or cut when there."""
    folder = writer == "repro's resume folder"
    victim = tmp_path / "outside" / ("folder" if folder else "victim")
    victim.parent.mkdir()
    if kept and folder:
        victim.mkdir()
    elif kept:
        victim.write_bytes(b'{"format": "speculab-sim-1"}\n{"cut')  # a file of ours, its last line cut short
    before = sorted((p.name, p.read_bytes() if p.is_file() else None) for p in victim.parent.rglob("*"))
    with pytest.raises(ValueError, match=r" is a symbolic link: speculab does not write through"):
        WRITERS[writer](tmp_path, victim)
    assert sorted((p.name, p.read_bytes() if p.is_file() else None) for p in victim.parent.rglob("*")) == before


def test_a_built_pair_replaces_links_at_its_names(tmp_path, monkeypatch):
    """``models build-tiny --out DIR`` wrote ``DIR/target``, ``DIR/draft`` and three files with plain opens: a link
    planted at any of them was written through. Each is now filled beside its name and renamed over the link."""
    from speculab.backends.tiny import build
    from speculab.backends.tiny.build import write_pair

    class Saved:
        def __init__(self, name):
            self.name = name

        def to(self, *_):
            return self

        def save_pretrained(self, folder, **_):
            (Path(folder) / f"{self.name}.txt").write_text(self.name)

    outside, out = tmp_path / "outside", tmp_path / "pair"
    outside.mkdir()
    out.mkdir()
    (outside / "folder").mkdir()
    (out / "target").symlink_to(outside / "folder", target_is_directory=True)
    (out / "draft").symlink_to(outside / "missing")
    for name in ("metrics.json", "prompts.json", "MODEL_CARD.md"):
        (out / name).symlink_to(outside / name)
    monkeypatch.setattr(build, "model_card", lambda info: "card")
    write_pair(out, {"target": Saved("target"), "draft": Saved("draft")}, Saved("tok"), {"metrics": {}}, ["a prompt"])
    assert [p.name for p in outside.rglob("*")] == ["folder"]
    assert sorted(p.name for p in (out / "target").iterdir()) == ["target.txt", "tok.txt"]
    assert not any(p.is_symlink() for p in out.iterdir()) and (out / "MODEL_CARD.md").read_text() == "card"
