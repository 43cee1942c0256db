"""``speculab repro all`` and every reproduction's provenance (``speculab.repro.runner``)."""

import importlib.util
import json

import pytest

from speculab import repro
from speculab.cli import main
from speculab.repro import runner

FAST = ["yin-fig3", "sprinter-fig6"]  # a closed form, and a simulation that takes a second


def _provenance(folder):
    return json.loads((folder / runner.PROVENANCE).read_text())


def test_repro_all_writes_every_figure_with_its_provenance(tmp_path, capsys):
    assert main(["repro", "all", "--only", *FAST, "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "done    yin-fig3" in out and "done    sprinter-fig6" in out
    assert f"2 run, 0 kept, {len(repro.FIGURES) - 2} skipped, 0 failed" in out
    data = _provenance(tmp_path)
    assert data["all"]["ran"] == FAST and data["all"]["wall_seconds"] > 0
    assert data["all"]["skipped"]["yin-fig2a"] == "left out by --only/--skip"  # the report lists it
    for name in FAST:
        entry = data["figures"][name]
        stem = name.replace("-", "_")
        assert entry["status"] == "ok" and entry["seconds"] > 0
        assert {f"{stem}.png", f"{stem}.pdf", f"{stem}.json"} <= set(entry["files"])
        assert (tmp_path / f"{stem}.pdf").read_bytes().startswith(b"%PDF")
        assert entry["parameters"] == runner.parameters(name)
        env = entry["environment"]
        assert env["libraries"]["numpy"] and env["python"] and env["machine"]["cpus"] >= 1
    assert data["figures"]["sprinter-fig6"]["parameters"] == {"key": 0, "n_runs": 200_000}  # the seed is recorded
    assert not any(p.name.startswith(".") for p in tmp_path.iterdir())  # resume folders removed when finished


def test_a_figure_whose_requirements_are_missing_is_skipped_with_a_line(tmp_path, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "jax" else real(name, *a))
    assert runner.missing("draft-design") == "needs jax (pip install -e '.[jax]')"
    assert runner.missing("yin-table1") is None and runner.needs("yin-table1") == runner.REAL_MODELS
    assert runner.needs("yin-fig2a") == ()
    lines = []
    run = runner.run_all(tmp_path, only=["draft-design", "yin-fig3"], progress=False, echo=lines.append)
    assert run["skipped"]["draft-design"] == "needs jax (pip install -e '.[jax]')" and run["ran"] == ["yin-fig3"]
    assert lines[0] == "skipped draft-design: needs jax (pip install -e '.[jax]')"
    assert not (tmp_path / "draft_design.json").exists()
    assert _provenance(tmp_path)["figures"]["draft-design"]["status"] == "skipped"


def test_a_failing_figure_is_recorded_and_the_others_still_run(tmp_path, monkeypatch, capsys):
    def broken(**kwargs):
        raise RuntimeError("a broken reproduction")

    monkeypatch.setattr(repro.get("yin-fig3"), "run", broken)
    assert main(["repro", "all", "--only", *FAST, "--out", str(tmp_path)]) == 1
    captured = capsys.readouterr()
    assert "FAILED  yin-fig3: RuntimeError: a broken reproduction" in captured.out
    assert "1 reproduction(s) failed: yin-fig3" in captured.err
    data = _provenance(tmp_path)
    assert data["figures"]["yin-fig3"]["status"] == "failed" and "a broken" in data["figures"]["yin-fig3"]["error"]
    assert data["figures"]["sprinter-fig6"]["status"] == "ok" and data["all"]["failed"] == {
        "yin-fig3": "RuntimeError: a broken reproduction"
    }


@pytest.mark.slow
def test_resume_keeps_finished_figures_and_reruns_changed_ones(tmp_path):
    runner.run_all(tmp_path, only=FAST, progress=False, echo=lambda line: None)
    before = {p.name: p.stat().st_mtime_ns for p in tmp_path.iterdir()}
    run = runner.run_all(tmp_path, only=FAST, progress=False, resume=True, echo=lambda line: None)
    assert run["kept"] == FAST and run["ran"] == []
    assert all(p.stat().st_mtime_ns == before[p.name] for p in tmp_path.iterdir() if p.name != runner.PROVENANCE)
    (tmp_path / "sprinter_fig6.png").unlink()  # a finished figure whose files are gone runs again
    run = runner.run_all(tmp_path, only=FAST, progress=False, resume=True, echo=lambda line: None)
    assert run["kept"] == ["yin-fig3"] and run["ran"] == ["sprinter-fig6"]
    run = runner.run_all(tmp_path, only=["sprinter-fig6"], key=3, progress=False, resume=True, echo=lambda line: None)
    assert run["ran"] == ["sprinter-fig6"]  # another seed is another run
    assert _provenance(tmp_path)["figures"]["sprinter-fig6"]["parameters"]["key"] == 3
    run = runner.run_all(tmp_path, only=FAST, progress=False, echo=lambda line: None)
    assert run["ran"] == FAST  # without resume everything runs


@pytest.mark.parametrize(
    "argv, message",
    [
        (["repro", "all", "--only", "no-such"], "unknown figure 'no-such'"),
        (["repro", "all", "--skip", "no-such"], "unknown figure 'no-such'"),
        (["repro", "all", "--n-runs", "5"], "--n-runs applies to one figure"),
        (["repro", "all", "--draft", "x"], "--draft applies to one figure"),
        (["repro", "yin-fig3", "--only", "yin-fig2a"], "--only and --skip apply to `speculab repro all`"),
        (["repro", "all", "--only", "yin-fig3", "--skip", "yin-fig3"], "nothing to run"),
        (["repro", "all", "--only", "yin-fig3", "--out", str(__file__)], "is a file, not a folder"),
        (["repro", "all", "--only", "yin-fig3", "--out", str(__file__) + "/sub"], "a part of its path is a file"),
    ],
)
def test_repro_all_refuses_bad_options_before_running(argv, message, tmp_path, capsys):
    assert main([*argv, "--out", str(tmp_path / "out")] if "--out" not in argv else argv) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out" / runner.PROVENANCE).exists()


def test_a_foreign_provenance_file_is_refused_before_running(tmp_path, capsys):
    (tmp_path / runner.PROVENANCE).write_text('{"something": "else"}')
    assert main(["repro", "yin-fig3", "--out", str(tmp_path)]) == 2
    assert "is not a speculab provenance file" in capsys.readouterr().err
    assert not (tmp_path / "yin_fig3.json").exists()
    assert json.loads((tmp_path / runner.PROVENANCE).read_text()) == {"something": "else"}


def test_one_figure_adds_its_entry_to_the_provenance(tmp_path, capsys):
    assert main(["repro", "sprinter-fig6", "--seed", "2", "--n-runs", "1000", "--out", str(tmp_path)]) == 0
    assert main(["repro", "yin-fig3", "--out", str(tmp_path)]) == 0
    figures = _provenance(tmp_path)["figures"]
    assert set(figures) == {"sprinter-fig6", "yin-fig3"}
    assert figures["sprinter-fig6"]["parameters"] == {"key": 2, "n_runs": 1000}
    assert "provenance in" in capsys.readouterr().out


@pytest.mark.slow
def test_the_seed_goes_to_the_figures_that_take_one(tmp_path):
    run = runner.run_all(tmp_path, only=FAST, key=5, progress=False, echo=lambda line: None)
    assert run["ran"] == FAST
    figures = _provenance(tmp_path)["figures"]
    assert figures["yin-fig3"]["parameters"] == {} and figures["sprinter-fig6"]["parameters"]["key"] == 5


@pytest.mark.slow
def test_resume_reruns_a_figure_finished_by_other_code(tmp_path):
    """A figure recorded as finished by another speculab commit is not kept: its numbers may differ."""
    runner.run_all(tmp_path, only=["yin-fig3"], progress=False, echo=lambda line: None)
    data = _provenance(tmp_path)
    data["figures"]["yin-fig3"]["environment"]["git"] = {"commit": "0" * 40, "modified": False}
    (tmp_path / runner.PROVENANCE).write_text(json.dumps(data))
    run = runner.run_all(tmp_path, only=["yin-fig3"], progress=False, resume=True, echo=lambda line: None)
    assert run["ran"] == ["yin-fig3"] and run["kept"] == []


@pytest.mark.slow
def test_resume_reruns_a_figure_whose_files_were_edited(tmp_path):
    """A finished figure is kept only while its files are the ones its run wrote: one whose JSON was edited (a
    number times 1,000) runs again, and the rerun writes the computed numbers back."""
    runner.run_all(tmp_path, only=["yin-fig3"], progress=False, echo=lambda line: None)
    path = tmp_path / "yin_fig3.json"
    computed = path.read_text()
    assert _provenance(tmp_path)["figures"]["yin-fig3"]["sha256"]["yin_fig3.json"] == runner.sha256(path)
    edited = json.loads(computed)
    key = next(k for k, v in edited.items() if isinstance(v, (int, float)) and not isinstance(v, bool) and v)
    edited[key] *= 1000
    path.write_text(json.dumps(edited))
    run = runner.run_all(tmp_path, only=["yin-fig3"], progress=False, resume=True, echo=lambda line: None)
    assert run["ran"] == ["yin-fig3"] and run["kept"] == []
    assert json.loads(path.read_text()) == json.loads(computed)


@pytest.mark.slow
@pytest.mark.parametrize(
    "files", [["../secret.png"], ["/etc/passwd"], ["sub/x.png"], [".x.png"], ["x\\y.png"], [5], "yin_fig3.json"]
)
def test_a_record_naming_files_outside_its_folder_is_refused(tmp_path, files):
    """Provenance is data: a figure's files must be plain names inside the results folder."""
    runner.run_all(tmp_path, only=["yin-fig3"], progress=False, echo=lambda line: None)
    data = _provenance(tmp_path)
    data["figures"]["yin-fig3"]["files"] = files
    (tmp_path / runner.PROVENANCE).write_text(json.dumps(data))
    with pytest.raises(ValueError, match="not plain names in its folder"):
        runner.read_provenance(tmp_path)


def test_a_record_without_a_digest_for_each_file_is_refused(tmp_path):
    runner.run_all(tmp_path, only=["yin-fig3"], progress=False, echo=lambda line: None)
    for edit in (
        lambda e: e["sha256"].popitem(),
        lambda e: e["sha256"].update({"other.png": "0" * 64}),
        lambda e: e["sha256"].update({"yin_fig3.json": "not hex"}),
        lambda e: e.update(sha256=[]),
        lambda e: e.pop("sha256"),
    ):
        data = _provenance(tmp_path)
        edit(data["figures"]["yin-fig3"])
        (tmp_path / runner.PROVENANCE).write_text(json.dumps(data))
        with pytest.raises(ValueError, match="no valid sha256 for each of its files"):
            runner.read_provenance(tmp_path)
