"""The command line: tables, JSON, errors, and the Fig. 2(a) reproduction end to end."""

import json

import pytest

from conftest import Z_BOUND
from speculab.cli import main
from speculab.theory import MarkovInstance, sd_expected_rejections


def _json(capsys, argv):
    assert main(argv + ["--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_theory_rejections_json_matches_library(capsys):
    out = _json(capsys, ["theory", "rejections", "--T", "20", "--V", "5", "--seed", "3"])
    prof = sd_expected_rejections(MarkovInstance.random(20, 5, 3))
    assert out["expected_rejections"] == pytest.approx(prof.total, rel=1e-12)
    assert out["acceleration"] == pytest.approx(20 / prof.total)
    assert len(out["per_position"]) == 20


def test_theory_table_and_saved_instance(capsys, tmp_path):
    path = str(tmp_path / "i.npz")
    assert main(["instance", "--T", "8", "--V", "3", "--seed", "1", "--out", path]) == 0
    capsys.readouterr()
    assert main(["theory", "rejections", "--instance", path, "--per-position"]) == 0
    text = capsys.readouterr().out
    assert "E[N_rej]" in text and "E_q[TV(p_n, q_n)]" in text
    expected = sd_expected_rejections(MarkovInstance.load(path)).total
    assert f"{expected:.6f}" in text


def test_sim_reports_theory_and_z(capsys):
    out = _json(capsys, ["sim", "--T", "30", "--V", "5", "--seed", "2", "--n-runs", "20000"])
    assert abs(out["z"]["rejections"]) < Z_BOUND
    assert out["counts"]["n_runs"] == 20000
    again = _json(capsys, ["sim", "--T", "30", "--V", "5", "--seed", "2", "--n-runs", "20000"])
    assert again["counts"]["rejections"] == out["counts"]["rejections"]  # same seed, same result


def test_sim_finite_K_and_autoregressive(capsys):
    out = _json(capsys, ["sim", "--T", "10", "--V", "3", "--K", "2", "--n-runs", "500"])
    assert out["theory"] == {} and out["counts"]["bonus"]["mean"] > 0
    out = _json(capsys, ["sim", "--T", "10", "--V", "3", "--method", "ar", "--n-runs", "50"])
    assert out["counts"]["oracle_calls"]["mean"] == 10


@pytest.mark.parametrize(
    "argv, match",
    [
        (["sim", "--K", "0"], "K must be an integer >= 1"),
        (["sim", "--n-runs", "0"], "n_runs"),
        (["sim", "--method", "ar", "--K", "3"], "--K applies"),
        (["theory", "rejections", "--V", "1"], "V must be"),
        (["theory", "rejections", "--instance", "/nonexistent.npz"], "nonexistent"),
        (["repro", "no-such-figure"], "unknown figure"),
    ],
)
def test_errors_are_reported_not_raised(capsys, argv, match):
    assert main(argv) == 2
    assert match in capsys.readouterr().err


def test_repro_yin_fig2a_writes_png_and_json(capsys, tmp_path):
    out = _json(capsys, ["repro", "yin-fig2a", "--n-runs", "20000", "--out", str(tmp_path)])
    assert (tmp_path / "yin_fig2a.png").stat().st_size > 10_000
    saved = json.loads((tmp_path / "yin_fig2a.json").read_text())
    assert saved["theory"]["expected_rejections"] == out["theory"]["expected_rejections"]
    inst = MarkovInstance.load(tmp_path / "yin_fig2a_instance.npz")
    assert sd_expected_rejections(inst).total == pytest.approx(out["theory"]["expected_rejections"])
    assert abs(out["simulation"]["z"]) < Z_BOUND
    assert main(["repro", "--list"]) == 0 and "yin-fig2a" in capsys.readouterr().out
