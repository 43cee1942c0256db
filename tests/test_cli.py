"""The command line: tables, JSON, errors, and the Fig. 2(a) reproduction end to end."""

import dataclasses
import math
import re
import json

import numpy as np
import pytest

from conftest import agrees_json, claims_of
from speculab import repro
from speculab.cli import jsonable, main
from speculab.repro import yin_fig2a
from speculab.theory import MarkovInstance, sd_expected_rejections


def _json(capsys, argv):
    assert main(argv + ["--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_theory_rejections_json_matches_library(capsys):
    out = _json(capsys, ["theory", "rejections", "--T", "20", "--V", "5", "--seed", "3"])
    prof = sd_expected_rejections(MarkovInstance.random(20, 5, 3))
    assert out["rejections"] == pytest.approx(prof.rejections, rel=1e-12)
    assert out["acceleration"] == pytest.approx(20 / prof.rejections)
    assert len(out["rejections_per_position"]) == 20


def test_json_is_printed_indented_two_spaces(capsys):
    """``--json`` prints one JSON document, laid out by ``json.dumps(…, indent=2)`` (a diff or a pager reads it)."""
    assert main(["theory", "rejections", "--T", "4", "--V", "3", "--json"]) == 0
    out = capsys.readouterr().out
    assert out == json.dumps(json.loads(out), indent=2) + "\n"
    assert '\n  "rejections": ' in out


def test_certify_searches_unless_told_not_to(monkeypatch, capsys):
    """``certify`` searches for a worse pair by default; ``--no-search`` gives ``search=False`` to the API."""
    import speculab.certify

    seen = []
    real = speculab.certify.certify
    monkeypatch.setattr(speculab.certify, "certify", lambda *a, **kw: seen.append(kw["search"]) or real(*a, **kw))
    for flags in (["--no-search"], []):
        assert main(["certify", "--method", "ar", "--V", "2", *flags, "--json"]) == 0
    assert seen == [False, True]


def test_an_output_folder_that_cannot_be_made_is_named_with_the_systems_reason(tmp_path, capsys):
    """``build-tiny`` checks its ``--out`` before training: a folder under a file cannot be made, and the one line
    says which flag, which folder and the system's reason (its ``strerror``, not the whole exception)."""
    (tmp_path / "file").write_text("")
    folder = tmp_path / "file" / "models"
    assert main(["models", "build-tiny", "--quick", "--out", str(folder)]) == 1
    assert capsys.readouterr().err == f"speculab: error: cannot write to --out {folder}: Not a directory\n"


@pytest.mark.parametrize("flags", [[], ["--quick"], ["--seed", "7"], ["--quick", "--seed", str(2**64 - 1)]])
def test_build_tiny_trains_with_its_seed_and_quick_settings(flags, monkeypatch, tmp_path, capsys):
    """``build-tiny`` gives its ``--seed`` to the build (default 0: the shipped pair) and, with ``--quick``, the
    step counts its help states (:data:`QUICK`); it makes ``--out`` (nested folders too, again if they exist) before
    training."""
    import re

    import speculab.backends.tiny.build as build_module
    from speculab.backends.tiny.build import QUICK, BuildConfig
    from speculab.cli import build_parser

    given = []
    metrics = {"target_perplexity": 9.0, "draft_perplexity": 12.0, "mean_tv": 0.25}
    monkeypatch.setattr(build_module, "build", lambda out, cfg, log: given.append((out, cfg)) or {"metrics": metrics})
    out = tmp_path / "a" / "b"
    for _ in range(2):
        assert main(["models", "build-tiny", "--out", str(out), *flags]) == 0
    assert out.is_dir() and [o for o, _ in given] == [str(out)] * 2
    seed = int(flags[flags.index("--seed") + 1]) if "--seed" in flags else 0
    expected = BuildConfig(seed=seed, **(QUICK if "--quick" in flags else {}))
    assert [cfg for _, cfg in given] == [expected] * 2
    assert (
        capsys.readouterr().out.splitlines()[-1] == f"wrote {out}: target ppl 9.0, draft ppl 12.0, mean TV(p, q) 0.250"
    )
    models = next(a for a in build_parser()._actions if a.dest == "command").choices["models"]
    tiny = next(a for a in models._actions if a.dest == "action").choices["build-tiny"]
    stated = next(a.help for a in tiny._actions if a.dest == "quick")
    assert [int(n.replace(",", "")) for n in re.findall(r"\d[\d,]*", stated)] == [
        QUICK["target_steps"],
        QUICK["draft_steps"],
        QUICK["eval_tokens"],
    ]


def test_theory_table_and_saved_instance(capsys, tmp_path):
    path = str(tmp_path / "i.npz")
    assert main(["instance", "--T", "8", "--V", "3", "--seed", "1", "--out", path]) == 0
    capsys.readouterr()
    assert main(["theory", "rejections", "--instance", path, "--per-position"]) == 0
    text = capsys.readouterr().out
    assert "E[N_rej]" in text and "E_q[TV(p_n, q_n)]" in text
    expected = sd_expected_rejections(MarkovInstance.load(path)).rejections
    assert f"{expected:.6f}" in text


def test_sim_reports_theory_and_z(capsys, agrees):
    out = _json(capsys, ["sim", "--T", "30", "--V", "5", "--seed", "2", "--n-runs", "20000"])
    agrees_json(agrees, out, ["rejections"])
    assert out["counts"]["n_runs"] == 20000
    again = _json(capsys, ["sim", "--T", "30", "--V", "5", "--seed", "2", "--n-runs", "20000"])
    assert again["counts"]["rejections"] == out["counts"]["rejections"]  # same seed, same result


def test_sim_finite_K_and_autoregressive(capsys, agrees):
    out = _json(capsys, ["sim", "--T", "10", "--V", "3", "--K", "2", "--n-runs", "2000"])
    assert out["counts"]["bonus"]["mean"] > 0  # finite K: the exact lookahead counts are the theory
    assert set(out["theory"]) == {
        "rejections",
        "oracle_calls",
        "draft_calls",
        "accepted",
        "discarded",
        "bonus",
        "tokens",
    }
    assert out["theory_source"] == "exact lookahead counts (SPEC L)"
    agrees_json(agrees, out, ["bonus"])
    out = _json(capsys, ["sim", "--T", "10", "--V", "3", "--method", "ar", "--n-runs", "50"])
    assert out["counts"]["oracle_calls"]["mean"] == 10


@pytest.mark.parametrize(
    "argv, match",
    [
        (["sim", "--K", "0"], "argument --K: must be an integer >= 1"),
        (["sim", "--n-runs", "0"], "argument --n-runs: must be an integer >= 1"),
        (["sim", "--method", "ar", "--K", "3"], "--K does not apply to --method ar"),
        (["sim", "--method", "biased"], "needs --eps"),
        (["theory", "rejections", "--V", "1"], "argument --V: must be"),
        (["theory", "rejections", "--instance", "/nonexistent.npz"], "nonexistent"),
        (["repro", "no-such-figure"], "unknown figure"),
    ],
)
def test_errors_are_reported_not_raised(capsys, argv, match):
    assert main(argv) == 2
    assert match in capsys.readouterr().err


def test_repro_yin_fig2a_writes_png_and_json(capsys, tmp_path, agrees):
    out = _json(capsys, ["repro", "yin-fig2a", "--n-runs", "20000", "--out", str(tmp_path)])
    assert (tmp_path / "yin_fig2a.png").stat().st_size > 10_000
    saved = json.loads((tmp_path / "yin_fig2a.json").read_text())
    assert saved["theory"]["rejections"] == out["theory"]["rejections"]
    inst = MarkovInstance.load(tmp_path / "yin_fig2a_instance.npz")
    assert sd_expected_rejections(inst).rejections == pytest.approx(out["theory"]["rejections"])
    sim = out["simulation"]["rejections"]
    agrees(sim["mean"], out["theory"]["rejections"], "rejections (repro yin-fig2a)", se=sim["se"])
    assert out["simulation"]["z"] == pytest.approx((sim["mean"] - out["theory"]["rejections"]) / sim["se"])
    rows = claims_of(yin_fig2a, out)
    assert rows[0]["theory"] == f"{out['theory']['rejections']:.3f}" and rows[0]["paper"].startswith("16.41")
    z = f"{out['simulation']['z']:+.2f}".replace("-", "−")
    assert rows[0]["simulation"] == f"{sim['mean']:.3f} ± {sim['se']:.3f} (z = {z})"
    assert rows[1]["theory"] == f"{out['theory']['acceleration']:.2f}" and rows[1]["paper"] == "3.05"
    assert main(["repro", "--list"]) == 0 and "yin-fig2a" in capsys.readouterr().out


def test_theory_batch_json(capsys):
    out = _json(capsys, ["theory", "batch", "--T", "20", "--V", "4", "--M", "1", "3", "inf"])
    t1 = _json(capsys, ["theory", "rejections", "--T", "20", "--V", "4"])
    assert out["M"]["1"]["rejections"] == pytest.approx(t1["rejections"], rel=1e-12)
    assert out["M"]["inf"]["rejections"] <= out["M"]["3"]["rejections"] <= t1["rejections"]
    assert list(_json(capsys, ["theory", "batch", "--T", "4", "--V", "3"])["M"]) == ["1", "2", "4", "8", "inf"]


def test_sim_batch_reports_t3(capsys, agrees):
    out = _json(capsys, ["sim", "--method", "batch", "--M", "3", "--T", "30", "--V", "5", "--n-runs", "20000"])
    agrees_json(agrees, out, ["rejections"])
    assert out["method"] == "BatchSD(M=3, K=None)"
    assert main(["sim", "--method", "batch"]) == 2 and "needs --M" in capsys.readouterr().err
    assert main(["sim", "--M", "3"]) == 2 and "--M does not apply" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize(
    "figure, runs", [("yin-fig2b", 3000), ("yin-fig2c", 1000), ("yin-fig3", None), ("yin-fig5", 3000)]
)
def test_batch_reproductions(capsys, tmp_path, figure, runs):
    argv = ["repro", figure, "--out", str(tmp_path)] + (["--n-runs", str(runs)] if runs else [])
    out = _json(capsys, argv)
    stem = figure.replace("-", "_")
    assert (tmp_path / f"{stem}.png").stat().st_size > 10_000
    assert json.loads((tmp_path / f"{stem}.json").read_text())["figure"] == out["figure"]
    rows = claims_of(repro.get(figure), out)
    if figure == "yin-fig2b":
        assert rows[2]["quantity"] == "E[N_rej], batch SD M = 5 (Thm 3)"
        assert rows[2]["theory"] == f"{out['M']['5']['theory']['rejections']:.3f}"
        assert rows[2]["simulation"].startswith(f"{out['M']['5']['simulation']['mean']:.3f} ± ")
    if figure == "yin-fig5":
        assert rows[1]["theory"] == f"{out['batch_M2']['theory']:.3f}"
        assert rows[1]["simulation"].startswith(f"{out['batch_M2']['mean']:.3f} ± {out['batch_M2']['se']:.3f} (z = ")
        assert rows[3]["theory"] == f"{out['vs_M']['limit']:.3f}"
    if figure == "yin-fig3":
        assert out["max_abs_gap"] < 1e-12
        assert rows[0]["theory"] == f"{out['max_abs_gap']:.1e}"
        assert rows[2]["theory"].startswith(f"r = 1.5: {out['uniform']['1.5']['closed_form'][-1]:.3f} → 0.333; ")
        assert main(["repro", figure, "--n-runs", "5", "--out", str(tmp_path)]) == 2
        assert "does not apply to yin-fig3" in capsys.readouterr().err
    if figure == "yin-fig2c":
        gap = out["regimes"]["support_gap"]
        assert gap["limit"] == pytest.approx(gap["theory"][0])  # no improvement at all
        assert out["regimes"]["paper"]["limit"] < out["regimes"]["paper"]["theory"][-1]
        assert rows[0]["theory"] == f"{out['regimes']['paper']['theory'][0]:.3f}"
        assert rows[2]["quantity"].startswith("E[N_rej], limit")
        assert rows[2]["theory"] == f"{out['regimes']['paper']['limit']:.3f}"
        assert rows[4]["theory"].startswith("25.000 at M = 1") and "(1,000 runs each)" in rows[4]["simulation"]


@pytest.mark.slow
def test_sim_on_the_jax_engine(capsys, agrees):
    pytest.importorskip("jax")
    out = _json(
        capsys,
        [
            "sim",
            "--method",
            "sd",
            "--K",
            "3",
            "--T",
            "15",
            "--V",
            "4",
            "--seed",
            "2",
            "--n-runs",
            "20000",
            "--engine",
            "jax",
            "--json",
        ],
    )
    assert out["engine"] == "jax" and out["theory_source"]
    agrees_json(agrees, out)
    out = _json(
        capsys,
        [
            "sim",
            "--method",
            "specdecpp",
            "--h",
            "0.5",
            "--T",
            "15",
            "--V",
            "4",
            "--seed",
            "2",
            "--n-runs",
            "2000",
            "--engine",
            "jax",
            "--json",
        ],
    )
    assert out["engine"] == "jax" and out["counts"]["discarded"]["mean"] > 0  # SpecDec++ runs on the JAX engine too
    # but from per-token tables: 50 · 70 · 70² entries exceed TABLE_BUDGET, refused with the way out
    assert main(["sim", "--method", "specdecpp", "--h", "0.5", "--V", "70", "--engine", "jax"]) == 2
    assert "TABLE_BUDGET" in (err := capsys.readouterr().err) and "engine='numpy'" in err
    # a table run says why it is slower than numpy's the first time (the round compiles); --json stays quiet
    assert main(["sim", "--T", "4", "--V", "3", "--n-runs", "100", "--engine", "jax"]) == 0
    assert "the jax engine compiles its round first" in capsys.readouterr().err


def test_out_of_memory_is_one_line(capsys, monkeypatch):
    """A (T, V, V) instance too large to hold ends with one line and exit code 1, not a traceback."""
    from speculab.theory import MarkovInstance

    def too_big(*args, **kwargs):
        raise MemoryError("Unable to allocate 373. GiB")

    monkeypatch.setattr(MarkovInstance, "random", too_big)
    assert main(["sim", "--T", "5", "--V", "100000"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "out of memory" in err and "--V" in err


def test_an_instance_past_numpys_size_limit_says_how_many_values_it_needed(capsys, monkeypatch):
    """numpy refuses an array past its size limit with a ``ValueError`` ("array is too big"), not a ``MemoryError``:
    the command reads it as out of memory and counts what the flags asked for, 2·T·V² float64 values."""
    from speculab.theory import MarkovInstance

    def too_big(*args, **kwargs):
        raise ValueError("array is too big; `arr.size * arr.dtype.itemsize` is larger than the maximum possible size.")

    monkeypatch.setattr(MarkovInstance, "random", too_big)
    assert main(["sim", "--T", "5", "--V", "100000"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "out of memory" in err
    assert "--T 5 --V 100000: the instance's 2·T·V² = 100,000,000,000 float64 values" in err


def test_the_top_level_help_opens_with_the_modules_first_line(capsys):
    """``speculab --help`` describes the tool by the module docstring's first line (its summary), code marks
    removed."""
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "\nThe speculab command line: theory, simulation and reproductions side by side.\n" in out


def test_an_unexpected_error_is_one_line_and_exit_1_unless_debug(capsys, monkeypatch):
    import speculab.cli as cli

    def broken(args):
        raise RuntimeError("something deep\nsecond line")

    monkeypatch.setattr(cli, "cmd_methods", broken)
    assert main(["methods"]) == 1
    err = capsys.readouterr().err
    assert err == "speculab: error: unexpected RuntimeError: something deep (rerun with --debug for the traceback)\n"
    with pytest.raises(RuntimeError, match="something deep"):
        main(["methods", "--debug"])


@pytest.mark.parametrize(
    "stop, code", [(SystemExit(0), 0), (SystemExit(2), 2), (SystemExit("bad"), 2), (SystemExit(), 2)]
)
def test_the_parsers_exit_becomes_mains_return_code(stop, code, monkeypatch):
    """``main`` returns what the parser exits with (``--help``: 0, a refused command line: 2) instead of exiting; an
    exit with a message instead of a number (``sys.exit("…")`` in a parser action) is a refused command line, 2."""
    import speculab.cli as cli

    class Parser:
        def parse_args(self, argv):
            raise stop

    monkeypatch.setattr(cli, "build_parser", Parser)
    assert main(["methods"]) == code


@pytest.mark.parametrize(
    "exc, code",
    [
        (ValueError("bad --T"), 2),
        (FileNotFoundError("no file x.npz"), 2),
        (PermissionError("cannot write /x"), 1),
        (MemoryError(), 1),
    ],
)
def test_exit_codes_separate_bad_input_from_failed_runs(capsys, monkeypatch, exc, code):
    import speculab.cli as cli

    def fails(args):
        raise exc

    monkeypatch.setattr(cli, "cmd_methods", fails)
    assert main(["methods"]) == code
    err = capsys.readouterr().err
    assert err.startswith("speculab: error: ") and err.count("\n") == 1


# Ctrl-C as a terminal's process gets it: a job started in the background by a non-interactive shell (nohup, a
# CI runner, a mutation tool) inherits SIGINT ignored, and Python then never raises KeyboardInterrupt.
# "ready" is printed once the command runs (inside main, its handlers set): a busy machine may take seconds to get
# there, and a signal that comes earlier stops Python before main can catch it.
_RUN_UNTIL_SIGNALLED = """
import signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
from speculab import sim
from speculab.cli import main
simulate = sim.simulate
def announced(*args, **kwargs):
    print("ready", flush=True)
    return simulate(*args, **kwargs)
sim.simulate = announced
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow
@pytest.mark.parametrize("signame, code", [("SIGINT", 130), ("SIGTERM", 143)])
def test_a_real_signal_stops_a_long_simulation_with_one_line(signame, code):
    """A real process, a real signal midway through a simulation that would take minutes: one line on stderr, no
    traceback, exit 128 + the signal."""
    import signal
    import subprocess
    import sys
    import time

    argv = ["sim", "--T", "50", "--V", "7", "--n-runs", "100000000"]
    proc = subprocess.Popen(
        [sys.executable, "-c", _RUN_UNTIL_SIGNALLED, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline() == "ready\n"
        time.sleep(0.2)  # simulating
        proc.send_signal(getattr(signal, signame))
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == code, err
    assert err.strip().splitlines()[-1].startswith("speculab: interrupted") and "Traceback" not in err
    assert out == ""


def test_a_reader_that_leaves_early_ends_the_command_quietly():
    """``speculab repro --list --json | head``: output to a pipe nobody reads any more stops the command with the
    shell's SIGPIPE status (141) and nothing on stderr, not a BrokenPipeError traceback or an error line."""
    import subprocess
    import sys

    closed_pipe = (
        "import os, sys; r, w = os.pipe(); os.close(r); os.dup2(w, 1)\n"
        "from speculab.cli import main; sys.exit(main(['repro', '--list', '--json']))"
    )
    proc = subprocess.run([sys.executable, "-c", closed_pipe], capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stderr) == (141, "")


def test_python_dash_m_speculab_is_the_command():
    """``python -m speculab`` runs the ``speculab`` command, its exit status and its one-line errors included
    (found by review: the package had no ``__main__``)."""
    import subprocess
    import sys
    from pathlib import Path

    import speculab

    home, python = Path(speculab.__file__).parents[1], [sys.executable]
    where = [*python, "-c", "import importlib.util; print(importlib.util.find_spec('speculab.__main__').origin)"]
    found = subprocess.run(where, capture_output=True, text=True, cwd=home).stdout.strip()
    assert Path(found) == home / "speculab" / "__main__.py"  # this checkout's (an editable install may map another's)
    run = lambda *argv: subprocess.run([*python, "-m", "speculab", *argv], capture_output=True, text=True, cwd=home)  # noqa: E731
    ok = run("repro", "--list", "--json")
    assert ok.returncode == 0 and json.loads(ok.stdout) and ok.stderr == ""
    bad = run("sim", "--T", "0")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--T" in bad.stderr


def test_files_are_replaced_whole_or_not_at_all(tmp_path):
    """An interruption while a result is written leaves the previous file as it was and no temporary file beside
    it; a value JSON refuses writes nothing."""
    from speculab._files import atomic_path
    from speculab.repro._io import write_json

    path = tmp_path / "out" / "result.json"
    write_json({"n": 1}, path)
    with pytest.raises(KeyboardInterrupt):
        with atomic_path(path) as tmp:
            tmp.write_text('{"n": 2, "half')
            raise KeyboardInterrupt
    assert json.loads(path.read_text()) == {"n": 1} and sorted(p.name for p in path.parent.iterdir()) == ["result.json"]
    with pytest.raises(TypeError):
        write_json({"n": object()}, path)
    assert json.loads(path.read_text()) == {"n": 1} and len(list(path.parent.iterdir())) == 1
    write_json({"n": 3}, path)
    assert json.loads(path.read_text()) == {"n": 3} and len(list(path.parent.iterdir())) == 1


@pytest.mark.slow
def test_a_simulation_killed_midway_resumes_to_the_same_numbers(tmp_path, capsys):
    """A real process, interrupted by a real SIGINT after two chunks are on disk; ``--resume`` finishes it and
    prints the numbers of an uninterrupted run with the same seed."""
    import signal
    import subprocess
    import sys
    import time

    path = tmp_path / "sim.jsonl"
    argv = ["sim", "--T", "300", "--V", "5", "--n-runs", str(6 * 32768), "--seed", "4", "--K", "3", "--json"]
    proc = subprocess.Popen(
        [sys.executable, "-c", _RUN_UNTIL_SIGNALLED, *argv, "--checkpoint", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            if path.exists() and path.read_text().count("\n") >= 3:  # the header and two finished chunks
                break
            time.sleep(0.05)
        assert proc.poll() is None, "the simulation ended before it could be interrupted"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130 and err.strip() == (
        f"speculab: interrupted (its finished chunks are kept in {path}: add --resume to continue)"
    ), err
    finished = path.read_text().count("\n") - 1
    assert 2 <= finished < 6
    resumed = _json(capsys, argv[:-1] + ["--checkpoint", str(path), "--resume"])
    whole = _json(capsys, argv[:-1])
    assert resumed["counts"] == whole["counts"] and resumed["z"] == whole["z"]


def test_every_command_shows_examples_that_parse(capsys):
    """``--help`` of every command ends with examples, and each example is a command line the parser accepts."""
    import shlex

    from speculab.cli import EXAMPLES, _leaves, build_parser

    parser = build_parser()
    assert main(["--help"]) == 0 and "``" not in capsys.readouterr().out
    leaves = dict(_leaves(parser))
    assert set(leaves) == set(EXAMPLES)
    for words, examples in EXAMPLES.items():
        assert main([*words.split(), "--help"]) == 0
        shown = capsys.readouterr().out
        assert "examples:" in shown and "--json prints one JSON object" in shown, words
        assert "``" not in shown, words  # reST code marks are for the docs, not a terminal
        for example in examples:
            assert example in shown
            argv = shlex.split(example, comments=True)
            assert argv[0] == "speculab" and " ".join(argv[1 : 1 + len(words.split())]) == words, example
            parser.parse_args(argv[1:])  # SystemExit (exit 2) on an example that does not parse


def test_theory_batch_prints_each_ms_own_theory_row_by_row(capsys):
    """Every row of ``theory batch --M …``, in the table and in ``--json``, is the Python API's value for its own
    M (a row printing another M's theory fails), with several M, the limit included."""
    from speculab.theory import MarkovInstance, batch_expected_rejections

    argv = ["theory", "batch", "--T", "20", "--V", "4", "--seed", "5", "--M", "1", "2", "4", "8", "inf"]
    out = _json(capsys, argv)
    inst = MarkovInstance.random(20, 4, 5)
    assert main(argv) == 0
    table = [line.split() for line in capsys.readouterr().out.splitlines()[3:]]
    assert [row[0] for row in table] == ["1", "2", "4", "8", "inf"]
    for row, M in zip(table, [1, 2, 4, 8, float("inf")]):
        prof = batch_expected_rejections(inst, M)
        got = out["M"][row[0]]
        assert got["rejections"] == pytest.approx(prof.rejections, rel=1e-12)
        assert got["batch_improvement"] == pytest.approx(prof.improvement, rel=1e-12, abs=1e-15)
        assert got["oracle_calls"] == pytest.approx(prof.oracle_calls, rel=1e-12)
        np.testing.assert_allclose(got["rejections_per_position"], prof.rejections_per_position, rtol=1e-12)
        assert [float(v) for v in row[1:]] == pytest.approx(
            [
                prof.rejections,
                prof.sd_rejections_per_position.sum(),
                prof.improvement,
                prof.oracle_calls,
                prof.acceleration,
            ],
            abs=1e-4,
        )
    assert len({out["M"][m]["rejections"] for m in out["M"]}) == 5  # five different values: rows cannot coincide


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "--pair", "tiny", "--batch-size", "0"],
        ["run", "--pair", "tiny", "--max-new-tokens", "-1"],
        ["run", "--pair", "tiny", "--seed", "-1"],
        ["run", "--pair", "tiny", "--top-k", "0"],
        ["compare", "--pair", "tiny", "--runs-per-prompt", "0"],
        ["compare", "--pair", "tiny", "--batch-size", "x"],
        ["validate", "--runs", "0"],
        ["validate", "--compare-runs", "-1"],
        ["validate", "--batch-prompts", "0"],
        ["validate", "--speed-tokens", "0"],
        ["sim", "--n-runs", "0"],
        ["sim", "--T", "0"],
        ["run", "--pair", "tiny", "--seed", str(1 << 64)],
    ],
)
def test_a_bad_count_is_refused_by_its_flag_before_any_model_loads(argv, capsys, monkeypatch):
    """Counts are checked as the command line is read: the error names the flag, and no model is loaded first (the
    tiny pair's loading took seconds before a refusal of ``--batch-size 0``)."""
    import speculab.backends

    monkeypatch.setattr(speculab.backends, "load_pair", _no_models)
    flag = next(a for a in reversed(argv) if a.startswith("--"))
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"error: argument {flag}: " in err and err.count("\n") == 1


@pytest.mark.parametrize(
    "argv, match",
    [
        (
            ["run", "--pair", "tiny", "--method", "sd", "--K", "0"],
            "argument --K: must be an integer >= 1 (omit --K for ∞)",
        ),
        (["compare", "--pair", "tiny", "--method", "block", "--K", "0"], "K"),
        (["run", "--pair", "tiny", "--temperature", "-1"], "argument --temperature: must be a finite number >= 0"),
        (["compare", "--pair", "tiny", "--resume"], "--resume needs --checkpoint"),
        (["validate", "--top-p", "2"], "argument --top-p: must be a number in (0, 1]"),
    ],
)
def test_a_bad_method_or_sampling_is_refused_before_any_model_loads(argv, match, capsys, monkeypatch):
    """The method, the sampling and the journal are built from the command line before the models load."""
    import speculab.backends

    monkeypatch.setattr(speculab.backends, "load_pair", _no_models)
    assert main(argv) == 2
    assert match in capsys.readouterr().err


def _no_models(*args, **kwargs):
    pytest.fail("a model was loaded")


def test_the_guard_against_loading_models_does_catch_a_load(monkeypatch):
    """The tests above would pass vacuously if the patched loader were not the one the command line calls."""
    import speculab.backends

    monkeypatch.setattr(speculab.backends, "load_pair", _no_models)
    with pytest.raises(pytest.fail.Exception, match="a model was loaded"):
        main(["run", "--pair", "tiny", "--max-new-tokens", "1", "--debug"])


# -- the learned methods on real models: a head from --head FILE ---------------------------------------------
@pytest.fixture(scope="module")
def head_file(tmp_path_factory):
    """A head scoring 0.9 whatever the draft's hidden state, saved as a reproduction saves its heads."""
    pytest.importorskip("torch")
    from speculab.backends import load_pair
    from speculab.backends.heads import constant_head, save_head

    width = load_pair("tiny").draft.model.config.hidden_size
    return str(save_head(constant_head(width, 0.9), tmp_path_factory.mktemp("heads") / "head.safetensors"))


@pytest.mark.slow
@pytest.mark.parametrize(
    "argv, method",
    [
        (["--method", "sprinter"], "Sprinter(verifier=HEAD, threshold=0.5)"),
        (["--method", "specdecpp", "--h", "0.5", "--max-K", "5"], "SpecDecPP(0.5, head=HEAD, max_K=5)"),
    ],
)
def test_a_head_file_runs_the_learned_methods_from_the_command_line(argv, method, head_file, capsys):
    """``--head FILE`` decodes what the Python API decodes with the loaded head, token for token and count for
    count. The constant score 0.9 makes the two methods' counts differ from SD's and from each other: SPRINTER
    passes every slot (0.9 ≥ τ: no target call), SpecDec++ drafts until 1 − 0.9^L > h (L = 7, capped at 5)."""
    from speculab.backends import decode, load_pair
    from speculab.backends.heads import load_head
    from speculab.methods import SpecDecPP, Sprinter

    out = _json(capsys, ["run", "--pair", "tiny", "--max-new-tokens", "12", "--seed", "3", "--head", head_file] + argv)
    expected = eval(method, {"HEAD": load_head(head_file), "Sprinter": Sprinter, "SpecDecPP": SpecDecPP})
    res = decode(load_pair("tiny"), ["Return the"], expected, max_new_tokens=12, key=3)
    assert out["tokens"] == res.tokens and out["counts"] == json.loads(json.dumps(jsonable(res.counts.to_dict())))
    calls, drafts = res.counts.oracle_calls[0], res.counts.draft_calls[0]
    if argv[1] == "sprinter":
        assert calls == 0 and drafts == 12
    else:
        assert drafts >= 5 * calls - 5 and calls >= 3  # full rounds of 5 drafts (the last cut by the horizon)


@pytest.mark.parametrize(
    "argv, match",
    [
        (["--method", "sprinter"], "--method sprinter on real models needs --head FILE"),
        (["--method", "specdecpp", "--h", "0.5"], "`speculab repro specdecpp-pareto --out DIR` saves them"),
        (["--method", "sprinter", "--head", "HEAD", "--eta-tp", "0.9"], "--eta-tp does not apply with --head"),
        (
            ["--method", "sprinter", "--head", "HEAD", "--eta-fp", "0.1", "--eta-tp", "0.9"],
            "--eta-fp, --eta-tp does not apply with --head",
        ),
        (
            ["--method", "sd", "--head", "HEAD"],
            "--head does not apply to --method sd: it reads no trained head (methods that do: sprinter, specdecpp)",
        ),
        (["--method", "specdecpp", "--head", "HEAD"], "--method specdecpp needs --h"),
        (["--method", "sprinter", "--head", "/no/such/head"], "--head /no/such/head: no head file at"),
        (["--method", "sprinter", "--head", "README.md"], "--head README.md: README.md is not a safetensors file"),
        (["--method", "sprinter", "--head", "docs"], "--head docs: docs is a folder, not a head file"),
    ],
)
def test_a_missing_or_misplaced_head_is_refused_before_any_model_loads(argv, match, head_file, capsys, monkeypatch):
    import speculab.backends

    monkeypatch.setattr(speculab.backends, "load_pair", _no_models)
    for command in ("run", "compare"):
        assert main([command, "--pair", "tiny"] + [head_file if a == "HEAD" else a for a in argv]) == 2
        err = capsys.readouterr().err
        assert match in err and err.count("\n") == 1, err


def test_each_learned_method_names_the_reproduction_that_saves_its_heads(capsys):
    """The message of a missing ``--head`` points at a reproduction that exists and writes files of that name."""
    import dataclasses
    import inspect

    from speculab.cli import HEAD_SOURCES
    from speculab.methods import REGISTRY
    from speculab.methods.capabilities import DraftHead, has

    learned = {name for name, cls in REGISTRY.items() if has(cls, DraftHead)}
    assert learned == set(HEAD_SOURCES) == {"sprinter", "specdecpp"}
    for name in learned:
        assert REGISTRY[name].head_param in {f.name for f in dataclasses.fields(REGISTRY[name])}
        reproduction, files = HEAD_SOURCES[name]
        source = inspect.getsource(repro.get(reproduction).run)
        assert files.split("*")[0].rstrip("abcdefghijklmnopqrstuvwxyz") in source  # "sprinter_verifier_{name}"
    assert main(["methods"]) == 0
    assert "real models (with --head FILE, from `speculab repro sprinter-roc`)" in capsys.readouterr().out


def test_a_running_mean_is_drawn_at_a_few_thousand_points_of_its_exact_values():
    """[Yin] Fig. 2(a)'s 500,000 runs were drawn point by point (a 6.6 MB PDF): the curve now has at most
    ``PLOT_POINTS`` points, evenly spaced on the log axis, each the exact running mean, the first and last included."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from speculab.repro._plots import PLOT_POINTS, log_grid, plot_running, running_mean

    x = np.random.default_rng(0).poisson(3.0, size=100_000)
    fig, ax = plt.subplots()
    checks = plot_running(ax, x, 3.0, color="g", theory_color="k", label="sim", theory_label="theory")
    plt.close(fig)
    k, mean, _ = running_mean(x)
    line = ax.get_lines()[0]
    at = np.asarray(line.get_xdata(), dtype=np.int64) - 1
    assert PLOT_POINTS / 2 <= at.size <= PLOT_POINTS and at[0] == 0 and at[-1] == x.size - 1
    np.testing.assert_array_equal(line.get_ydata(), mean[at])
    gaps = np.diff(np.log(at[at >= 100] + 1))
    assert gaps.max() <= 2 * np.log(x.size) / PLOT_POINTS  # evenly spread on the log axis (above the integers)
    assert checks["100000"] == mean[-1] and checks["10"] == mean[9]  # the JSON's checkpoints: every run
    np.testing.assert_array_equal(log_grid(5), np.arange(5))


def test_a_method_whose_exact_theory_is_past_its_budget_is_simulated_with_the_reason(capsys):
    """``sim --method block --K 30`` simulated, then exited 2 on the theory's path cap; now the theory is asked
    first, and past its budget (a ``TooLarge``, still a ``ValueError``) the run says "theory: none" and why."""
    from speculab._validate import TooLarge
    from speculab.methods import BlockVerification

    with pytest.raises(TooLarge, match="MAX_PATHS"):
        BlockVerification(10).expected(MarkovInstance.random(T=10, V=7, key=0))
    argv = ["sim", "--method", "block", "--K", "10", "--T", "10", "--V", "7", "--n-runs", "500"]
    out = _json(capsys, argv)
    assert out["theory"] == {} and out["theory_source"].startswith(
        "none (exact block counts (V^(K+2) = 7^12 block prefixes) would take 13,841,287,201 prefixes"
    )
    assert out["counts"]["rejections"]["mean"] > 0 and out["z"] == {}
    assert main(argv) == 0
    assert "theory: none (exact block counts (V^(K+2) = 7^12" in capsys.readouterr().out


def test_a_theory_whose_size_has_thousands_of_digits_is_none_and_the_run_simulated(capsys):
    """``sim --method rrs --tree 100000`` and ``sim --method block --K 9500 --T 9500`` were refused: the theory's
    refusal crashed printing its size (an integer past Python's 4,300 digits), so no "theory: none" was shown."""
    from speculab._validate import TooLarge
    from speculab.methods import BlockVerification

    with pytest.raises(TooLarge, match=r"V\^\(K\+2\) = 3\^9502 .* more than 1e3010 prefixes"):
        BlockVerification(9500).expected(MarkovInstance.random(T=9500, V=3, key=0))
    out = _json(capsys, ["sim", "--method", "rrs", "--tree", "10000", "--T", "1", "--V", "3", "--n-runs", "2"])
    assert out["theory"] == {} and out["theory_source"].startswith("none (exact RRS counts")
    assert "more than 1e3010 children" in out["theory_source"] and out["counts"]["draft_calls"]["mean"] == 10_000


@pytest.mark.parametrize(
    "argv, match",
    [
        (["certify", "--method", "batch", "--M", "100000"], "the exact output law (1 × 3^200000 drafted blocks"),
        (["certify", "--remaining", "100000"], "the law of the stream's first 100001 tokens"),
        (["certify", "--V", "1000000"], "the law of the stream's first 3 tokens"),
        (["sim", "--method", "rrs", "--tree", ",".join(["2"] * 30)], "argument --tree: must fit the node budget"),
        (["certify", "--method", "rrs", "--tree", ",".join(["2"] * 30)], "argument --tree: must fit the node budget"),
    ],
)
def test_a_size_past_its_budget_is_one_line_before_any_work(capsys, argv, match):
    """Each ended in a crash of the refusal's message, numpy's MemoryError or a generic out-of-memory line after
    seconds of work; each is now refused first, in one line saying how to raise the budget."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert match in err and "--budget k" in err and len(err.strip().splitlines()) == 1


def test_sim_budget_scales_the_exact_theorys_budget(capsys):
    """``sim --budget K`` multiplies the work budgets: ``--K 8`` on ``V = 4`` (4^10 = 1,048,576 prefixes, within
    MAX_PATHS) has its theory at the default and none below 1,048,576 / 16,777,216 = 0.0625 of it (SpecDec++'s
    draft tree likewise: the next test). A scale that is not a finite number > 0 is refused by the flag."""
    base = ["sim", "--method", "block", "--K", "8", "--T", "10", "--V", "4", "--n-runs", "200"]
    assert _json(capsys, base)["theory_source"] == _json(capsys, base + ["--budget", "0.0625"])["theory_source"]
    out = _json(capsys, base + ["--budget", "0.06"])
    assert out["theory"] == {} and out["theory_source"] == (
        "none (exact block counts (V^(K+2) = 4^10 block prefixes) would take 1,048,576 prefixes, over the budget of "
        "1,006,632 prefixes (MAX_PATHS, times 0.06): use a smaller block size or vocabulary (the simulator has no such "
        "limit), or raise the budget: speculab.work_budget(k) in Python, --budget k on the command line (sim, "
        "certify))"
    )
    for bad in ("0", "-1", "nan", "inf", "x"):
        assert main(base + ["--budget", bad]) == 2
        assert "argument --budget: " in capsys.readouterr().err


@pytest.mark.slow
def test_sim_budget_scales_the_draft_trees_budget(capsys):
    """SpecDec++'s draft tree (2 × 2^16 leaves of 66 values: 8,650,752 values) has no theory at the default budget
    and its exact counts at 1.375 of it (seconds of exact computation: the full tier)."""
    tree = ["sim", "--method", "specdecpp", "--h", "0.5", "--max-K", "16", "--T", "60", "--V", "2", "--n-runs", "50"]
    assert _json(capsys, tree)["theory"] == {}
    assert _json(capsys, tree + ["--budget", "1.375"])["theory"]["rejections"] > 0


# -- each command's table and JSON against the Python API, row by row ----------------------------------------
#: Every method the command line builds, its options there and the same method built in Python.
SIM_METHODS = {
    "ar": ([], "Autoregressive()"),
    "sd": (["--K", "3"], "SD(K=3)"),
    "batch": (["--M", "2", "--K", "2"], "BatchSD(2, K=2)"),
    "biased": (["--eps", "0.1", "--rejection", "uno", "--K", "2"], "Biased(0.1, 'uno', K=2)"),
    "fuzzy": (["--theta", "0.2", "--div", "kl", "--K", "2"], "Fuzzy(0.2, 'kl', K=2)"),
    "typical": (
        ["--eps", "0.3", "--delta", "0.6", "--correction", "argmax", "--K", "2"],
        "Typical(0.3, 0.6, 'argmax', K=2)",
    ),
    "sprinter": (["--eta-tp", "0.8", "--eta-fp", "0.3"], "Sprinter(0.8, 0.3)"),
    "specdecpp": (["--h", "0.4", "--max-K", "3"], "SpecDecPP(0.4, max_K=3)"),
    "block": (["--K", "3"], "BlockVerification(3)"),
    "optimal-batch": (["--M", "2", "--K", "2"], "OptimalMultiDraft(2, K=2)"),
    "rrs": (["--tree", "2,1", "--draws", "distinct"], "RRS((2, 1), draws='distinct')"),
    "traversal": (["--tree", "parents=0,0,1"], "Traversal('parents=0,0,1')"),
    "greedy-draft": (["--K", "2"], "GreedyDraft(K=2)"),
    "synthetic": (["--rates", "0.8,0.5"], "Synthetic(rates=(0.8, 0.5), draft_sample='probabilistic')"),
}


def _cells(text: str, first: str) -> list[str]:
    """The cells of the table row whose first cell is ``first`` (no cell of ``sim``'s table holds a space)."""
    rows = [line.split() for line in text.splitlines() if line.split()[:1] == [first]]
    assert len(rows) == 1, (first, text)
    return rows[0][1:]


@pytest.mark.parametrize("name", sorted(SIM_METHODS))
def test_sim_prints_the_apis_simulation_and_theory_row_by_row_for_every_method(name, capsys):
    """``sim``'s JSON is ``simulate`` and ``expected`` for the same method, instance and seed, and each table row
    prints its own count's mean, s.e., theory and z — a row showing another row's value, or z with the other sign,
    fails here. The instance (T = 5, V = 3, seed 4) gives every count a different value."""
    import speculab.methods as methods
    from speculab.methods import names
    from speculab.sim import simulate

    assert set(SIM_METHODS) == set(names(cli=True))  # a new method gets a line above
    options, python = SIM_METHODS[name]
    argv = ["sim", "--method", name, *options, "--T", "5", "--V", "3", "--seed", "4", "--n-runs", "400"]
    out = _json(capsys, argv)
    assert main(argv) == 0
    text = capsys.readouterr().out
    inst, method = MarkovInstance.random(5, 3, 4), eval(python, vars(methods))
    counts, expected = simulate(inst, method, 400, 4), method.expected(inst)
    theory = dict(expected.items())
    assert out["method"] == repr(method) and out["counts"] == json.loads(json.dumps(jsonable(counts.to_dict())))
    assert out["theory"] == json.loads(json.dumps(jsonable(theory)))
    shown = 0
    for quantity, est in counts.summary().items():
        mean, se, *rest = _cells(text, quantity)
        assert (mean, se) == (f"{est.mean:.4f}", f"{est.se:.4f}"), quantity
        if quantity in theory:
            z = (est.mean - theory[quantity]) / est.se if est.se > 0 else 0.0  # no noise: exact (AR's counts are T)
            assert rest == [f"{theory[quantity]:.4f}", f"{z:+.2f}"] and out["z"][quantity] == pytest.approx(z), quantity
            shown += 1
    assert shown >= 3


@pytest.mark.slow
@pytest.mark.parametrize(
    "name",
    ["ar", "sd", "batch", "biased", "fuzzy", "typical", "block", "rrs", "traversal", "greedy-draft", "synthetic"],
)
def test_run_prints_the_apis_decoding_for_every_method_on_real_models(name, capsys):
    """``run``'s JSON is ``decode`` for the same method, prompts and seed, and its text shows each prompt's own
    counts (two prompts of different lengths, so that swapped prompts show)."""
    pytest.importorskip("torch")
    import speculab.methods as methods
    from speculab.backends import decode, load_pair
    from speculab.methods import names

    # every method that runs on real models: here, or with --head in the test above (the learned two)
    assert set(names(real_models=True, cli=True)) == {
        "ar",
        "sd",
        "batch",
        "biased",
        "fuzzy",
        "typical",
        "block",
        "sprinter",
        "specdecpp",
        "rrs",
        "traversal",
        "greedy-draft",
        "synthetic",
    }
    options, python = SIM_METHODS[name]
    prompts = ["Return the", "It was a bright cold day in April"]
    argv = [
        "run",
        "--pair",
        "tiny",
        "--method",
        name,
        *options,
        "--max-new-tokens",
        "10",
        "--seed",
        "5",
        "--prompt",
        prompts[0],
        "--prompt",
        prompts[1],
    ]
    out = _json(capsys, argv)
    assert main(argv) == 0
    text = capsys.readouterr().out
    res = decode(load_pair("tiny"), prompts, eval(python, vars(methods)), max_new_tokens=10, key=5)
    assert out["tokens"] == res.tokens and out["texts"] == res.texts
    assert out["counts"] == json.loads(json.dumps(jsonable(res.counts.to_dict())))
    c = res.counts
    for i, prompt in enumerate(prompts):
        line = (
            f"tokens {c.tokens[i]}, target calls {c.oracle_calls[i]}, rejections {c.rejections[i]}, "
            f"draft tokens {c.draft_calls[i]}, bonus {c.bonus[i]}"
        )
        assert f"[{prompt}]{res.texts[i]}\n  {line}" in text, (prompt, text)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["sd", "block"])
def test_compare_prints_the_apis_rows_in_its_table_and_json(name, capsys):
    """``compare``'s JSON is ``speculab.compare.compare`` for the same arguments, and each table row shows its own
    row's prediction, measurement, z and power."""
    pytest.importorskip("torch")
    import speculab.methods as methods
    from speculab.backends import load_pair
    from speculab.compare import compare

    options, python = SIM_METHODS[name]
    argv = [
        "compare",
        "--pair",
        "tiny",
        "--method",
        name,
        *options,
        "--runs-per-prompt",
        "2",
        "--max-new-tokens",
        "8",
        "--seed",
        "6",
    ]
    out = _json(capsys, argv)
    assert main(argv) == 0
    text = capsys.readouterr().out
    comp = compare(load_pair("tiny"), eval(python, vars(methods)), runs_per_prompt=2, max_new_tokens=8, key=6)
    assert out == json.loads(json.dumps(jsonable(comp.to_dict())))
    assert len(comp.rows) >= 3
    quantities = [row.quantity for row in comp.rows]  # every method here drafts: both paired rows are there
    assert "rejections per run (paired: Σ r_n)" in quantities
    assert "accepted drafts per round (paired: E[τ | block])" in quantities
    lines = text.splitlines()
    header = next(line for line in lines if line.startswith("quantity  "))
    starts = [0] + [m.start() for m in re.finditer(r"(?<=  )\S", header)]  # each column's first character
    assert [header[a:b].strip() for a, b in zip(starts, starts[1:] + [None])][:5] == [
        "quantity",
        "theory / prediction",
        "measured",
        "z",
        "power (10%)",
    ]

    def pm(value, se):
        if not math.isfinite(value):
            return "—"
        return f"{value:.4f}" if se == 0 or not math.isfinite(se) else f"{value:.4f} ± {se:.4f}"

    for row in comp.rows:
        line = next(line for line in lines if line.startswith(row.quantity + "  "))
        cells = [line[a:b].strip() for a, b in zip(starts, starts[1:] + [None])]
        if row.upper_bound:
            z = "≤ ✓" if row.holds else "≤ ✗"
        elif row.holds is not None:
            z = "exact ✓" if row.holds else "exact ✗"
        else:
            z = f"{row.z:+.2f}" if math.isfinite(row.z) else ("" if math.isnan(row.z) else str(row.z))
        power = "" if math.isnan(row.power()) else f"{row.power():.3f}"
        want = [row.quantity, pm(row.predicted, row.predicted_se), pm(row.measured, row.measured_se), z, power]
        assert cells == want + [row.note], (cells, want)


def test_a_head_for_another_draft_is_named_by_its_flag_and_file(tmp_path, capsys):
    """A head of the wrong width loads (the file is a head) but cannot read this draft's states: one line naming
    ``--head`` and the file, exit 2."""
    pytest.importorskip("torch")
    from speculab.backends.heads import constant_head, save_head

    path = save_head(constant_head(3, 0.5), tmp_path / "narrow.safetensors")
    for command in ("run", "compare"):
        assert main([command, "--pair", "tiny", "--method", "sprinter", "--head", str(path)]) == 2
        err = capsys.readouterr().err
        assert f"--head {path}: the head reads 3 features but the draft's hidden states have 64" in err
        assert err.count("\n") == 1


@pytest.mark.parametrize(
    "options, api",
    [
        ([], dict(T=50, V=7, key=0)),
        (["--T", "6", "--V", "3", "--seed", "2"], dict(T=6, V=3, key=2)),
        (["--T", "5", "--V", "4", "--row-law", "uniform", "--seed", "9"], dict(T=5, V=4, key=9, row_law="uniform")),
        (
            ["--T", "7", "--V", "2", "--concentration", "0.3", "--instance-seed", "4", "--seed", "1"],
            dict(T=7, V=2, key=4, concentration=0.3),
        ),
    ],
    ids=["defaults", "T V seed", "uniform rows", "concentration, instance seed"],
)
def test_theory_rejections_and_instance_print_the_apis_values_row_by_row(options, api, capsys, tmp_path):
    """``theory rejections`` (table, ``--per-position`` and ``--json``) and ``instance`` for several instance flags:
    every number is the Python API's for the instance those flags name (a row printing another position's value, or
    a flag read into the wrong argument, fails)."""
    inst = MarkovInstance.random(api.pop("T"), api.pop("V"), api.pop("key"), **api)
    prof = sd_expected_rejections(inst)
    out = _json(capsys, ["theory", "rejections", *options])
    assert (out["instance"]["T"], out["instance"]["V"]) == (inst.T, inst.V)
    assert out["rejections"] == prof.rejections and out["oracle_calls"] == prof.oracle_calls
    assert out["acceleration"] == inst.T / prof.rejections
    assert out["rejections_per_position"] == prof.rejections_per_position.tolist()
    assert main(["theory", "rejections", *options, "--per-position"]) == 0
    lines = capsys.readouterr().out.splitlines()
    value = {line.split("  ")[0].strip(): line.split()[-1] for line in lines[3:6]}
    assert value == {
        "E[N_rej]": f"{prof.rejections:.6f}",
        "E[oracle calls]": f"{prof.oracle_calls:.6f}",
        "acceleration T / E[N_rej]": f"{inst.T / prof.rejections:.4f}",
    }
    head = next(i for i, line in enumerate(lines) if line.split() == ["n", "E_q[TV(p_n,", "q_n)]"])
    per_position = [line.split() for line in lines[head + 2 :]]
    assert per_position == [[str(n + 1), f"{v:.6f}"] for n, v in enumerate(prof.rejections_per_position)]
    path = tmp_path / "saved.npz"
    assert main(["instance", *options, "--out", str(path)]) == 0
    saved = MarkovInstance.load(path)
    for name in ("P", "Q", "rho"):
        np.testing.assert_array_equal(getattr(saved, name), getattr(inst, name), err_msg=name)


def test_methods_lists_each_methods_own_options_and_reach(capsys):
    """``methods`` (table and ``--json``): each method's row names its own class, options and reach, written out
    here by hand (a row showing another method's options fails; a new method must be added here)."""
    from speculab.methods import REGISTRY

    options = {
        "ar": [],
        "sd": ["--K"],
        "batch": ["--M", "--K"],
        "rejection": ["--K"],
        "biased": ["--eps", "--rejection", "--K"],
        "fuzzy": ["--theta", "--div", "--K"],
        "typical": ["--eps", "--delta", "--correction", "--K"],
        "sprinter": ["--eta-tp", "--eta-fp"],
        "specdecpp": ["--h", "--max-K"],
        "block": ["--K"],
        "optimal-batch": ["--M", "--K"],
        "rrs": ["--tree", "--draws"],
        "traversal": ["--tree", "--draws"],
        "greedy-draft": ["--K"],
        "synthetic": ["--rates", "--draft-sample"],
    }
    simulation_only = {"optimal-batch"}
    out = _json(capsys, ["methods"])
    assert list(out) == list(options) == list(REGISTRY)
    assert main(["methods"]) == 0
    text = capsys.readouterr().out
    blocks = dict(zip(out, re.split(r"\n(?=\S)", text.strip())))
    for name, entry in out.items():
        cls = REGISTRY[name]
        assert entry["class"] == cls.__name__ and list(entry["options"]) == options[name], name
        assert entry["real_models"] == (name not in simulation_only) and entry["cli"] == (name != "rejection"), name
        assert entry["summary"] == cls.__doc__.strip().splitlines()[0].replace("``", ""), name
        for flag, help_text in entry["options"].items():
            field = {f.name: f for f in dataclasses.fields(cls)}[flag[2:].replace("-", "_")]
            assert help_text == field.metadata["help"], (name, flag)
        block = blocks[name]
        assert block.startswith(f"{name} ") and f"{cls.__name__}: {entry['summary']}" in block, name
        assert block.endswith(
            "options: " + (", ".join(options[name]) or "none") + ("" if entry["cli"] else " (Python only)")
        ), name
        reach = "simulation" if name in simulation_only else "simulation + real models"
        after = ";" if name not in ("sprinter", "specdecpp") else " (with --head FILE, from `speculab repro "
        assert block.split("\n")[1].strip().startswith(reach + after), name


def test_repro_without_a_figure_lists_them_and_only_and_skip_belong_to_all(capsys):
    """``repro`` alone lists the figures as ``repro --list`` does; ``--only`` or ``--skip`` (either one) with one
    figure is refused by name. Found by mutation testing of cli.py (each condition's other connective survived)."""
    assert main(["repro"]) == 0
    listed = capsys.readouterr().out
    assert all(name in listed for name in repro.FIGURES) and "all " in listed
    for flag in ("--only", "--skip"):
        assert main(["repro", "yin-fig2a", flag, "yin-fig3"]) == 2
        assert "--only and --skip apply to `speculab repro all`" in capsys.readouterr().err


def test_the_jax_engines_compile_note_is_printed_for_the_jax_engine_only(capsys):
    """The note on stderr belongs to ``--engine jax`` without ``--json``: the numpy engine prints none."""
    assert main(["sim", "--T", "4", "--V", "3", "--n-runs", "50"]) == 0
    assert "compiles" not in capsys.readouterr().err
    assert main(["sim", "--T", "4", "--V", "3", "--n-runs", "50", "--engine", "jax", "--json"]) == 0
    assert "compiles" not in capsys.readouterr().err  # --json: the output is the JSON alone


@pytest.mark.parametrize("checkpoint", [False, True], ids=["alone", "with a checkpoint"])
def test_an_interrupted_simulation_says_where_its_chunks_are_only_when_they_are_kept(checkpoint, tmp_path, capsys):
    """Ctrl-C during ``sim``: exit 130 and one line, which names the checkpoint (and ``--resume``) only when one
    is written."""
    import speculab.sim

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    path = tmp_path / "sim.jsonl"
    argv = ["sim", "--T", "4", "--V", "3", "--n-runs", "50"] + (["--checkpoint", str(path)] if checkpoint else [])
    with pytest.MonkeyPatch.context() as m:
        m.setattr(speculab.sim, "simulate", interrupted)
        assert main(argv) == 130
    kept = f" (its finished chunks are kept in {path}: add --resume to continue)" if checkpoint else ""
    assert capsys.readouterr().err == f"speculab: interrupted{kept}\n"


def test_the_batch_sizes_bounds_are_inclusive():
    """``--M`` takes 1 and 2^53 themselves (float64 counts hold every M up to 2^53) and refuses 0 and 2^53 + 1."""
    import argparse

    from speculab import cli
    from speculab.theory.batch import MAX_M

    assert cli._parse_M("1") == 1 and cli._parse_M(str(MAX_M)) == MAX_M == 2**53
    for bad in ("0", str(MAX_M + 1)):
        with pytest.raises(argparse.ArgumentTypeError, match="must be a whole number in"):
            cli._parse_M(bad)


def test_the_json_names_the_seed_that_drew_the_instance(capsys):
    """``--instance-seed`` draws the instance when given, ``--seed`` otherwise: the JSON says which."""
    base = ["sim", "--T", "4", "--V", "3", "--n-runs", "20", "--seed", "3"]
    assert _json(capsys, base)["instance"]["seed"] == 3
    assert _json(capsys, base + ["--instance-seed", "7"])["instance"]["seed"] == 7


def test_repro_all_refuses_one_figures_flags(capsys):
    for flags in (["--n-runs", "5"], ["--draft", "x"], ["--target", "y"]):
        assert main(["repro", "all", *flags]) == 2
        assert "applies to one figure, not to `speculab repro all`" in capsys.readouterr().err


def test_main_sets_its_sigterm_handler_in_the_main_thread_only(monkeypatch, capsys):
    """In the main thread a SIGTERM stops the command cleanly (its handler is set, then the previous one put back);
    in another thread no handler can be set, and none is tried."""
    import signal
    import threading

    calls = []
    real = signal.signal
    monkeypatch.setattr(signal, "signal", lambda sig, handler: calls.append((sig, handler)) or real(sig, handler))
    assert main(["methods"]) == 0
    assert [c[0] for c in calls] == [signal.SIGTERM, signal.SIGTERM]  # set, then restored
    calls.clear()
    worker = threading.Thread(target=lambda: main(["methods"]))
    worker.start()
    worker.join()
    assert calls == []
    capsys.readouterr()


def test_every_default_the_help_states_is_the_parsers():
    """Each option whose help says "(default X)" parses to X when it is left out (found by mutation testing:
    changing a default in the parser, e.g. sim's --n-runs or certify's --V and --remaining, left every test
    green)."""
    import argparse
    import os

    from speculab.cli import build_parser

    checked = 0

    def walk(parser, path):
        nonlocal checked
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, path + [name])
                continue
            said = re.search(r"\(default ([^)\s,;]+)\)", action.help or "")
            if said and action.default is not None and not isinstance(action.default, bool):
                want = said.group(1).replace(",", "")
                try:
                    same = float(want) == float(action.default)
                except (TypeError, ValueError):  # a name, or a path ("./results" is "results")
                    same = os.path.normpath(str(action.default)) == os.path.normpath(want)
                assert same, (path, action.dest, action.default, want)
                checked += 1

    walk(build_parser(), [])
    assert checked >= 10


def test_a_command_and_a_quantity_are_required(capsys):
    assert main([]) == 2 and "required" in capsys.readouterr().err
    assert main(["theory"]) == 2 and "required" in capsys.readouterr().err
    assert main(["models"]) == 2 and "required" in capsys.readouterr().err


@pytest.mark.parametrize("argv, flag", [(["instance"], "--out"), (["models", "build-tiny", "--quick"], "--out")])
def test_a_command_without_its_output_is_refused_before_it_works(argv, flag, capsys):
    """``instance`` and ``models build-tiny`` write a file: without ``--out`` they are refused in one line."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"the following arguments are required: {flag}" in err and len(err.strip().splitlines()) == 1


def test_a_batch_size_that_is_not_a_number_is_refused():
    import argparse

    from speculab import cli

    for bad in ("x", "", "2.5"):
        with pytest.raises(argparse.ArgumentTypeError, match="must be a whole number in"):
            cli._parse_M(bad)


def test_a_tables_columns_are_as_wide_as_their_widest_cell():
    from speculab import cli

    text = cli._table([["a", "1.5"], ["much longer", "2"]], ["n", "value"])
    lines = text.splitlines()
    assert len({len(line) for line in lines}) == 1 and lines[1] == "-" * 11 + "  " + "-" * 5
    assert lines[2] == "a              1.5" and lines[3] == "much longer      2"


def test_progress_is_shown_in_text_mode_only(monkeypatch, capsys):
    """sim, repro NAME and repro all ask for progress without --json and for none with it."""
    import speculab.sim as sim
    from speculab.repro import runner

    seen = []
    real = sim.simulate
    monkeypatch.setattr(sim, "simulate", lambda *a, **k: seen.append(("sim", k["progress"])) or real(*a, **k))
    monkeypatch.setattr(
        runner,
        "run_figure",
        lambda *a, **k: seen.append(("figure", k["progress"])) or (_ for _ in ()).throw(KeyboardInterrupt),
    )
    monkeypatch.setattr(
        runner,
        "run_all",
        lambda *a, **k: seen.append(("all", k["progress"], k["skip"])) or (_ for _ in ()).throw(KeyboardInterrupt),
    )
    for json_flag in ([], ["--json"]):
        main(["sim", "--T", "3", "--V", "2", "--n-runs", "10", *json_flag])
        main(["repro", "yin-fig2a", "--out", "/nonexistent-speculab", *json_flag])
        main(["repro", "all", "--out", "/nonexistent-speculab", *json_flag])
    capsys.readouterr()
    assert seen == [
        ("sim", True),
        ("figure", True),
        ("all", True, ()),
        ("sim", False),
        ("figure", False),
        ("all", False, ()),
    ]


def test_validate_and_compare_pass_the_command_lines_choices(monkeypatch, capsys):
    """validate's runs default by device (20,000 on CUDA, 4,000 elsewhere) and --no-speed; compare's --prompt."""
    from types import SimpleNamespace

    import speculab.cli as cli
    import speculab.compare as compare_module
    import speculab.validate as validate_module

    calls = []

    def fake_validate(pair, **kwargs):
        calls.append((pair.device.type, kwargs["runs"], kwargs["speed"], kwargs["compare_runs"]))
        raise KeyboardInterrupt

    monkeypatch.setattr(validate_module, "validate", fake_validate)
    for device in ("cpu", "cuda"):
        monkeypatch.setattr(cli, "_pair", lambda args, d=device: SimpleNamespace(device=SimpleNamespace(type=d)))
        main(["validate"])
        main(["validate", "--no-speed", "--runs", "7", "--compare-runs", "0"])
    assert calls == [("cpu", 4000, True, 4), ("cpu", 7, False, 0), ("cuda", 20000, True, 4), ("cuda", 7, False, 0)]

    prompts = []
    monkeypatch.setattr(cli, "_check_head_fits", lambda *a: None)
    monkeypatch.setattr(
        compare_module,
        "compare",
        lambda pair, method, p, **k: prompts.append(p) or (_ for _ in ()).throw(KeyboardInterrupt),
    )
    main(["compare", "--pair", "tiny"])
    main(["compare", "--pair", "tiny", "--prompt", "Hello there"])
    assert prompts == [None, ["Hello there"]]
    capsys.readouterr()


@pytest.mark.parametrize(
    "raised, code, message",
    [("KeyboardInterrupt", 130, "speculab: interrupted"), ("_Terminated", 143, "speculab: interrupted (terminated)")],
)
def test_an_interrupted_command_exits_with_the_shells_status_for_its_signal(raised, code, message, monkeypatch, capsys):
    """Interrupted (SIGINT) or terminated (SIGTERM, through main's handler), a command stops with one line and the
    status a shell gives a process the signal ended: 128 + the signal's number."""
    from speculab import cli

    error = KeyboardInterrupt if raised == "KeyboardInterrupt" else cli._Terminated

    def interrupted(args):
        raise error

    monkeypatch.setattr(cli, "cmd_methods", interrupted)
    assert main(["methods"]) == code
    assert capsys.readouterr().err == message + "\n"


#: The least value of each whole-number flag (``certify --V``: a pair needs two tokens to differ).
LEAST = {
    "T": 1,
    "V": 1,
    "instance_seed": 0,
    "seed": 0,
    "max_new_tokens": 1,
    "top_k": 1,
    "batch_size": 1,
    "n_runs": 1,
    "remaining": 1,
    "runs_per_prompt": 1,
    "runs": 1,
    "compare_runs": 0,
    "batch_prompts": 1,
    "speed_tokens": 1,
    "prompts": 1,
    "law_runs": 1,
    "sampler_draws": 0,
    "per_prompt": 1,
    "confirm": 0,
    "confirm_runs": 1,
    "max_nodes": 0,
    "threads": 1,
}


#: Every command's whole-number flags (a flag that stops checking its bounds, in any command, fails).
INSTANCE = {"T", "V", "instance_seed", "seed"}
DECODING = {"seed", "max_new_tokens", "top_k", "batch_size", "threads"}
FLAGS = {
    *(("theory " + q, d) for q in ("rejections", "batch") for d in INSTANCE),
    *(("sim", d) for d in INSTANCE | {"n_runs"}),
    *(("certify", d) for d in ("seed", "V", "remaining")),
    *(("instance", d) for d in INSTANCE),
    *(("run", d) for d in DECODING),
    *(("compare", d) for d in DECODING | {"runs_per_prompt"}),
    *(("validate", d) for d in DECODING - {"batch_size"} | {"runs", "compare_runs", "batch_prompts", "speed_tokens"}),
    ("models build-tiny", "seed"),
    *(("repro", d) for d in ("seed", "n_runs")),
    *(
        ("engine vllm", d)
        for d in DECODING - {"batch_size"} | {"prompts", "runs_per_prompt", "law_runs", "sampler_draws"}
    ),
    *(
        ("plan", d)
        for d in DECODING - {"batch_size"} | {"prompts", "per_prompt", "confirm", "confirm_runs", "max_nodes"}
    ),
}


def test_each_whole_number_flag_takes_its_least_value_and_refuses_one_less():
    """Walking every command's parser: each whole-number flag parses its least value and refuses the one below it,
    in terms of the bound (``--seed`` also its largest, ``2**64 − 1``, and not ``2**64``)."""
    import argparse

    from speculab.cli import build_parser

    seen = set()

    def walk(parser, path):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, path + [name])
            elif getattr(action.type, "__qualname__", "") == "_count.<locals>.parse":
                least = 2 if (path, action.dest) == (["certify"], "V") else LEAST[action.dest]
                assert action.type(str(least)) == least, (path, action.dest)
                with pytest.raises(argparse.ArgumentTypeError, match=f"must be an integer (>= |in \\[){least}"):
                    action.type(str(least - 1))
                if action.dest == "seed":
                    assert action.type(str(2**64 - 1)) == 2**64 - 1
                    with pytest.raises(argparse.ArgumentTypeError, match="18,446,744,073,709,551,616"):
                        action.type(str(2**64))
                seen.add((" ".join(path), action.dest))

    walk(build_parser(), [])
    assert seen == FLAGS


@pytest.mark.parametrize(
    "argv, message",
    [
        (["compare", "--method", "ar"], "argument --method: invalid choice: 'ar'"),  # the reference, not a method
        (["report", "--seed", "3"], "unrecognized arguments: --seed 3"),  # a report draws nothing
        (["methods", "--seed", "3"], "unrecognized arguments: --seed 3"),  # nor does a list of the methods
    ],
)
def test_a_flag_a_command_does_not_take_is_refused_by_the_parser(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("command", ["run", "compare", "validate", "plan", "engine vllm"])
def test_each_real_model_command_refuses_a_thread_count_below_one_in_one_line(command, capsys):
    assert main([*command.split(), "--threads", "0"]) == 2
    err = capsys.readouterr().err
    assert "argument --threads: must be an integer >= 1" in err and len(err.strip().splitlines()) == 1


def test_threads_reach_torch_before_the_models_decode():
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    try:
        assert main(["run", "--threads", "1", "--max-new-tokens", "1", "--json"]) == 0
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_output_to_a_closed_pipe_ends_with_sigpipes_status_in_process(monkeypatch, capfd):
    """A reader that left (``BrokenPipeError``): status 128 + SIGPIPE, nothing on stderr (in process; the real pipe
    is tested on a real process above)."""
    import signal

    from speculab import cli

    def closed(args):
        raise BrokenPipeError

    monkeypatch.setattr(cli, "cmd_methods", closed)
    assert main(["methods"]) == 128 + signal.SIGPIPE
    assert capfd.readouterr().err == ""


def test_run_and_compare_show_progress_in_text_mode_only(monkeypatch, capsys):
    """``run`` and ``compare`` open a display in which each decode is a part (:func:`speculab._progress.expect`);
    neither shows with ``--json``."""
    import contextlib
    from types import SimpleNamespace

    import speculab.backends as backends
    import speculab.compare as compare_module
    from speculab import cli

    seen = []

    @contextlib.contextmanager
    def fake_progress(desc, *, total=None, unit="token", enabled=True):
        seen.append((desc, total, enabled))
        yield None

    def stop(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "progress", fake_progress)
    monkeypatch.setattr(cli, "_pair", lambda args: SimpleNamespace())
    monkeypatch.setattr(cli, "_check_head_fits", lambda *a: None)
    monkeypatch.setattr(backends, "decode", stop)
    monkeypatch.setattr(compare_module, "compare", stop)
    for json_flag in ([], ["--json"]):
        assert main(["run", "--prompt", "a", "--prompt", "b", "--max-new-tokens", "5", *json_flag]) == 130
        assert main(["compare", *json_flag]) == 130
    capsys.readouterr()
    assert seen == [
        ("decoding", None, True),
        ("decoding (all runs)", None, True),
        ("decoding", None, False),
        ("decoding (all runs)", None, False),
    ]


def test_a_head_is_checked_against_the_drafts_width():
    """``--head FILE`` must read as many features as the draft's hidden states have: one that does is taken, one
    trained on another width is refused naming the flag and file."""
    from types import SimpleNamespace

    from speculab import cli
    from speculab.backends import load_pair
    from speculab.backends.heads import constant_head
    from speculab.methods import SpecDecPP

    pair = load_pair("tiny")
    width = pair.draft.model.config.hidden_size
    args = SimpleNamespace(head="head.safetensors")
    cli._check_head_fits(args, SpecDecPP(0.5, head=constant_head(width, 0.9)), pair)
    with pytest.raises(ValueError, match=rf"--head head.safetensors: the head reads {width + 1} features but"):
        cli._check_head_fits(args, SpecDecPP(0.5, head=constant_head(width + 1, 0.9)), pair)


@pytest.mark.parametrize("passed", [True, False], ids=["passed", "failed"])
def test_validates_exit_status_and_file_are_its_reports(passed, tmp_path, capsys, monkeypatch):
    """``speculab validate --out DIR``: exit 0 when the validation passed and 1 when it failed, the report's JSON in
    ``DIR/validation.json`` and named on the last line (the validation itself stubbed: its tests are its own)."""
    import speculab.validate

    class Report:
        def to_dict(self):
            return {"passed": passed}

        def to_json(self):
            return json.dumps({"passed": passed})

        def __str__(self):
            return "passed" if passed else "FAILED"

    Report.passed = passed
    monkeypatch.setattr(speculab.validate, "validate", lambda *args, **kwargs: Report())
    assert main(["validate", "--pair", "tiny", "--runs", "10", "--out", str(tmp_path)]) == (0 if passed else 1)
    assert json.loads((tmp_path / "validation.json").read_text()) == {"passed": passed}
    assert capsys.readouterr().out.rstrip().endswith(f"wrote {tmp_path / 'validation.json'}")


@pytest.mark.parametrize(
    "exc, code, told",
    [
        (ValueError("max_new_tokens must be at most 3"), 2, "argument --max-new-tokens: must be at most 3"),
        (RuntimeError("max_new_tokens must be at most 3"), 1, "unexpected RuntimeError: max_new_tokens must be"),
    ],
    ids=["a refusal", "a failure"],
)
def test_a_decodes_refusal_is_told_by_its_flag_and_a_failure_is_not(exc, code, told, capsys, monkeypatch):
    """A command with ``--max-new-tokens``: the library's refusal of ``max_new_tokens`` is bad input, told by the
    flag (exit 2); another error naming it is a failed run, told as it is (exit 1)."""
    import speculab.cli as cli

    def fails(args):
        raise exc

    monkeypatch.setattr(cli, "cmd_run", fails)
    assert main(["run", "--pair", "tiny"]) == code
    assert told in capsys.readouterr().err


@pytest.mark.parametrize(
    "command, prompts, told",
    [
        (["run"], [""], "argument --prompt: is empty; give at least one token"),
        (["run"], ["ok", ""], "argument --prompt (#2 of 2): is empty; give at least one token"),
        (["run"], ["ok", "word " * 300], "argument --prompt (#2 of 2): is 600 tokens, which leaves no room for a new"),
        (
            ["run", "--max-new-tokens", "10"],
            ["word " * 125],
            "argument --max-new-tokens: must be at most 6 for --prompt (",
        ),
        (
            ["run", "--max-new-tokens", "10"],
            ["ok", "word " * 125, "z"],
            "argument --max-new-tokens: must be at most 6 for --prompt #2 of 3 (250 tokens, the longest",
        ),
        # compare decodes each prompt --runs-per-prompt times: the refusal names the prompt, not a run
        (["compare", "--runs-per-prompt", "2"], ["ok", "", "z"], "argument --prompt (#2 of 3): is empty; give"),
        (["compare"], ["ok", ""], "argument --prompt (#2 of 2): is empty; give at least one token"),
        (
            ["compare", "--max-new-tokens", "10", "--runs-per-prompt", "3"],
            ["ok", "word " * 125],
            "argument --max-new-tokens: must be at most 6 for --prompt #2 of 2 (",
        ),
    ],
    ids=[
        "empty",
        "the second empty",
        "the second past the context",
        "one prompt, too many tokens",
        "the second of three, too many tokens",
        "compare: the second of three empty",
        "compare: the second empty",
        "compare: too many tokens",
    ],
)
def test_a_decodes_refusal_of_a_prompt_is_told_by_the_prompt_flag(command, prompts, told, capsys):
    """Found by review: a prompt longer than the context was told as "argument --max-new-tokens: must be at most
    -144 … shorten it", an empty one as "prompt 0", and compare named a run ("prompt 8") or the wrong --prompt:
    each is now told by the ``--prompt`` that gave it, counted from 1 as given."""
    argv = [command[0], "--pair", "tiny", *command[1:], *(a for p in prompts for a in ("--prompt", p))]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"speculab: error: {told}") and err.count("\n") == 1, err


def test_a_refusal_of_a_prompt_says_which_and_where_from_the_api_too():
    """The library's refusal names the prompt by its index among those given (``decode``'s ``prompt i``; the plan's
    ``held-out prompt i``) and carries the index for a caller that names prompts otherwise."""
    from speculab.backends import load_pair
    from speculab.backends.decode import PromptRefused, encode_prompts

    pair = load_pair("tiny")
    with pytest.raises(PromptRefused, match=r"^held-out prompt 1 is empty; give at least one token$") as refused:
        encode_prompts(pair, ["ok", ""], 4, what="held-out prompt")
    assert (
        refused.value.index == 1
        and refused.value.naming("--prompt #2") == "--prompt #2 is empty; give at least one token"
    )


def test_the_engine_commands_models_are_folders_on_disk(capsys):
    """``speculab engine vllm`` loads no model itself: its --draft and --target are local folders (an engine loads
    them), and it samples (--temperature > 0), as its help says."""
    assert main(["engine", "vllm", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "draft model: a local Hugging Face model folder" in out and "--temperature TEMPERATURE > 0" in out


def test_a_prompt_that_is_not_utf8_is_refused_quoting_it_as_given(capsys):
    """The refusal names the flag and quotes the prompt untouched, even where it holds the check's own words."""
    assert main(["run", "--prompt", "the text must be \udcff"]) == 2
    err = capsys.readouterr().err
    assert "argument --prompt: must be UTF-8 text; got 'the text must be \\udcff' (character 17 is not)" in err


def test_the_tiny_ngram_pair_is_the_tiny_target_with_an_ngram_draft_of_its_tokenizer(monkeypatch):
    """``--pair tiny-ngram``: the tiny target beside an n-gram draft counted with the tiny target's tokenizer (its
    counting on the training text is stood in for by a count on the default prompts), named as the flag names it."""
    from types import SimpleNamespace

    import speculab.backends.pair
    from speculab.backends import ngram_draft
    from speculab.backends.models import NGramModel
    from speculab.backends.pair import TINY_DIR, default_prompts
    from speculab.cli import _pair

    tokenizers = []

    def counted(tokenizer):
        tokenizers.append(tokenizer)
        return ngram_draft(tokenizer, default_prompts(), n=3)

    monkeypatch.setattr(speculab.backends.pair, "training_ngram_draft", counted)
    args = SimpleNamespace(pair="tiny-ngram", draft=None, target=None, device="cpu", threads=None, dtype="float32")
    pair = _pair(args)
    assert pair.name == "tiny-ngram" and isinstance(pair.draft, NGramModel) and hasattr(pair.target, "model")
    assert len(tokenizers) == 1 and tokenizers[0].name_or_path == str(TINY_DIR / "target")
    assert pair.target.model.name_or_path == str(TINY_DIR / "target")
