"""``speculab validate``: the control's exact law, the command end to end on the CPU (what CI runs), its JSON, its
section of the report, and its refusals (its G-test and power: ``tests/test_stats.py``)."""

import json
import math
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from conftest import model_device  # noqa: E402
from speculab.backends import Sampling, load_pair  # noqa: E402
from speculab.backends.pair import default_prompts  # noqa: E402
from speculab.cli import main  # noqa: E402
from speculab.methods import SD, Autoregressive, BatchSD, Biased, BlockVerification  # noqa: E402
from speculab.stats import ALPHA, LawRow  # noqa: E402
from speculab.validate import (  # noqa: E402
    CONTROL,
    METHODS,
    Validation,
    _lossless_methods,
    _uno_law,
    load_warning,
    validate,
    verdict,
)


def test_the_verdict_gates_on_each_law_test_and_each_gating_row():
    """``verdict``: every law test ok, every gating row with a finite z strictly inside 5 s.e. (|z| = 5 fails, either
    sign), every gating row without one holding (``holds`` null fails); a row that does not gate is never read."""
    row = lambda z, holds=None, gates=True: {"z": z, "holds": holds, "gates": gates}  # noqa: E731
    assert verdict([True, True], [row(4.99), row(-4.99), row(math.nan, True), row(math.inf, True)])
    assert verdict([], [row(99.0, gates=False), row(math.nan, gates=False), row(-math.inf, False, gates=False)])
    assert not verdict([True, False], [])
    for failing in [row(5.0), row(-5.0), row(math.nan), row(math.nan, False), row(math.inf, False)]:
        assert not verdict([True], [row(0.0), failing]), failing


@pytest.fixture(scope="module")
def pair():
    return load_pair("tiny", device=model_device())


def test_the_controls_law_is_decoding_unos_first_slot(pair):
    """``_uno_law`` is the one-step output law Biased(ε, "uno") reports at a round's first slot (its round law)."""
    ids = pair.tokenizer.encode(default_prompts()[0])
    x = torch.tensor([ids], device=pair.device)
    with torch.no_grad():
        p = torch.softmax(pair.draft.model(x).logits[0, -1, : pair.vocab_size].double(), -1).cpu()
        q = torch.softmax(pair.target.model(x).logits[0, -1, : pair.vocab_size].double(), -1).cpu()
    x = torch.zeros((1, 1, 1), dtype=torch.long)
    law = Biased(CONTROL, "uno", K=1).round_law(p[None, None, None], q.expand(1, 1, 2, -1), x, bonus=True)
    np.testing.assert_allclose(_uno_law(p.numpy(), q.numpy(), CONTROL), law.law[0, 0, 0].numpy(), atol=1e-15)


def test_the_controls_law_is_decoding_unos_where_it_biases():
    """The same identity where the draft exceeds the target by more than ε (the tiny pair's first prompt has no
    such token, so its test above sees only b = 1): pairs with disjoint, nested and close supports and a random one,
    each with some token over q + ε."""
    from speculab.certify import nasty_pairs

    rng = np.random.default_rng(3)
    pairs = [(p, q) for _, p, q in nasty_pairs(4)] + [(rng.dirichlet(np.ones(5) * 0.3), rng.dirichlet(np.ones(5)))]
    biased = 0
    for p, q in pairs:
        biased += bool(np.any(p > q + CONTROL))
        V = p.size
        law = Biased(CONTROL, "uno", K=1).round_law(
            np.broadcast_to(p, (1, 1, 1, V)), np.broadcast_to(q, (1, 1, 2, V)), np.zeros((1, 1, 1), int), bonus=True
        )
        np.testing.assert_allclose(_uno_law(p, q, CONTROL), law.law[0, 0, 0], atol=1e-15)
    assert biased >= 3


@pytest.mark.parametrize(
    "V, rows, prompts",
    [
        (2048, 1, 2730),  # 2^30 // (1 · (LAW_K + 1 = 3) · 2048 · 64 bytes) = 2,730
        (2048, 3, 910),  # three draft rows: a third as many
        (8, 1, 4096),  # 699,050, capped at 4,096
        (10**6, 1, 16),  # 5, raised to 16
    ],
)
def test_a_law_tests_batch_keeps_its_float64_laws_within_a_gibibyte(V, rows, prompts):
    from types import SimpleNamespace

    from speculab.validate import LAW_K, _law_batch

    assert LAW_K == 2 and _law_batch(SimpleNamespace(vocab_size=V), rows) == prompts


def test_the_law_tests_methods_are_the_ones_their_labels_name(pair):
    """Each lossless method a law test runs, by label; SpecDec++ with its constant head (threshold 0.5, the head's
    score 0.8 on the draft's hidden states), which needs a Hugging Face draft and is left out of an n-gram pair's."""
    from speculab.backends import ngram_draft

    methods = _lossless_methods(pair, METHODS, 2)
    specdecpp = methods.pop("specdecpp h=0.5 max_K=2 (head ≡ 0.8)")
    expected = {
        "ar": Autoregressive(),
        "sd K=2": SD(K=2),
        "batch M=4 K=2": BatchSD(4, K=2),
        "block K=2": BlockVerification(2),
    }
    assert methods == expected
    width = pair.draft.model.config.hidden_size
    assert (specdecpp.h, specdecpp.max_K) == (0.5, 2)
    assert float(specdecpp.head(torch.zeros(width))) == pytest.approx(0.8, abs=1e-6)
    ngram = load_pair(ngram_draft(pair.tokenizer, default_prompts(), n=2), "tiny-target", device=model_device())
    assert list(_lossless_methods(ngram, METHODS, 3)) == ["ar", "sd K=3", "batch M=4 K=3", "block K=3"]


def test_a_speed_row_of_no_time_has_no_rate():
    from speculab.validate import SpeedRow

    assert SpeedRow("x", 10, 2.0).tokens_per_second == 5.0 and math.isnan(SpeedRow("x", 10, 0.0).tokens_per_second)


@pytest.mark.slow
def test_validate_passes_on_the_cpu_and_refuses_the_control(pair):
    """What CI runs: every lossless method's first tokens have the target's law, the control is refused with a
    stated power above 0.99, the compare rows are within 5 standard errors, and the timings are there."""
    report = validate(
        pair, key=0, runs=2000, compare_runs=1, max_new_tokens=8, batch_prompts=16, speed_tokens=8, speed_prompts=8
    )
    assert report.passed, str(report)
    assert [r.lossless for r in report.laws] == [True] * 5 + [False]
    control = report.laws[-1]
    assert control.refused and control.power > 0.99
    assert all(not r.refused for r in report.laws[:-1]) and all(r.power == control.power for r in report.laws)
    assert all(0 < d < 0.2 for r in report.laws for d in r.detectable)
    assert report.compare and all(abs(r["z"]) < 5 for r in report.compare if r["gates"] and math.isfinite(r["z"]))
    assert {r.what.split(",")[0] for r in report.speed} >= {"Autoregressive()", "SD(K=4)"}
    assert report.latency is not None and math.isfinite(report.latency["error"])
    data = json.loads(report.to_json())
    assert data["passed"] and len(data["laws"]) == 6 and data["settings"]["device"] == str(pair.device)
    assert "PASSED" in str(report) and "control: biased uno" in str(report)


@pytest.mark.slow
def test_a_biased_method_posing_as_lossless_fails_the_validation(pair, monkeypatch):
    """The verdict has teeth: a lossy method in the lossless list is refused, and the command exits 1."""
    import speculab.validate as v

    original = v._lossless_methods
    monkeypatch.setattr(
        v,
        "_lossless_methods",
        lambda pair, names, k: {**original(pair, names, k), "a lossy one": Biased(0.3, "uno", K=2)},
    )
    report = validate(pair, key=1, runs=1000, methods=["sd"], compare_runs=0, speed=False)
    assert not report.passed and [r.ok for r in report.laws] == [True, False, True]
    assert (
        main(
            [
                "validate",
                "--device",
                str(pair.device),
                "--runs",
                "1000",
                "--methods",
                "sd",
                "--compare-runs",
                "0",
                "--no-speed",
                "--json",
            ]
        )
        == 1
    )


@pytest.mark.slow
def test_a_wrong_bonus_law_fails_the_validation(pair, monkeypatch):
    """The first round's bonus token is among the tokens tested: an engine drawing the bonus from a wrong law (the
    target's shifted by one token, in the batched round's cut of the law) is refused, by the test of the first
    three tokens — the first token alone cannot see it."""
    from speculab.backends import batched

    original = batched.cut_law
    monkeypatch.setattr(batched, "cut_law", lambda law, q, length, bonus: original(law, q.roll(1, -1), length, bonus))
    report = validate(pair, key=4, runs=2000, methods=["sd"], compare_runs=0, speed=False)
    sd_row = report.laws[0]
    assert not report.passed and sd_row.refused and sd_row.joint[2] < ALPHA / 2 < sd_row.first[2]


@pytest.mark.slow
def test_the_command_writes_json_and_the_report_shows_it(tmp_path, capsys):
    """…with where its timings ran: ``--threads`` reaches torch, and the settings record it, the CPUs and the load."""
    out = tmp_path / "results"
    threads = torch.get_num_threads()
    assert (
        main(
            [
                "validate",
                "--device",
                "cpu",
                "--runs",
                "1000",
                "--methods",
                "sd",
                "block",
                "--compare-runs",
                "1",
                "--max-new-tokens",
                "6",
                "--batch-prompts",
                "8",
                "--speed-tokens",
                "6",
                "--threads",
                "1",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    torch.set_num_threads(threads)
    text = capsys.readouterr().out
    assert "PASSED" in text and "validation.json" in text and "torch on 1 thread, " in text
    data = json.loads((out / "validation.json").read_text())
    s = data["settings"]
    assert (s["threads"], s["cpus"]) == (1, os.cpu_count()) and s["load_at_start"] >= 0 and s["load_at_end"] >= 0
    assert data["passed"] and [r["method"] for r in data["laws"]][:2] == ["sd K=2", "block K=2"]
    assert main(["report", "--out", str(out)]) == 0
    page = (out / "report.html").read_text()
    assert "validation: the real-model backend on a device" in page and "block K=2" in page
    good = data
    bad = {
        "refused": dict(good, laws=[dict(good["laws"][0], refused="no")]),
        "power": dict(good, laws=[dict(good["laws"][0], power="x")]),
        "first": dict(good, laws=[dict(good["laws"][0], first=[1.0])]),
        "method": dict(good, compare=[{k: v for k, v in good["compare"][0].items() if k != "method"}]),
        "z": dict(good, compare=[dict(good["compare"][0], z="x")]),
        "latency": dict(good, latency={"predicted": 1.0}),
        "settings": dict(good, settings=[]),
        "passed": dict(good, passed="yes"),
        "threads": dict(good, settings=dict(good["settings"], threads=0)),
        "load_at_end": dict(good, settings=dict(good["settings"], load_at_end="busy")),
        "load_warning": dict(good, settings=dict(good["settings"], load_warning=3)),
    }
    for field, corrupt in bad.items():
        (out / "validation.json").write_text(json.dumps(corrupt))
        assert main(["report", "--out", str(out)]) == 2, field
        err = capsys.readouterr().err
        assert "validation.json is not what `speculab validate --out` writes" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--runs", "0"], "argument --runs: must be an integer >= 1"),
        (["--compare-runs", "-1"], "argument --compare-runs: must be an integer >= 0"),
        (["--temperature", "0"], "greedy"),
        (["--device", "cuda:7"], "device"),
        (["--methods", "fuzzy"], "invalid choice"),
        (["--dtype", "float64"], "invalid choice"),
        (["--threads", "0"], "argument --threads: must be an integer >= 1"),
        (["--threads", "two"], "argument --threads: invalid int value: 'two'"),
    ],
)
def test_bad_arguments_are_refused_in_one_line(argv, message, capsys):
    base = ["validate", "--no-speed"] + ([] if "--compare-runs" in argv else ["--compare-runs", "0"])
    assert main(base + argv) == 2  # argparse's own refusals too: main returns its exit status
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(methods=[]), "methods must name"),
        (dict(methods=None), "methods must name"),
        (dict(methods=["fuzzy"]), "no law test here"),
        (dict(sampling={"temperature": 1}), "sampling must be"),
        (dict(sampling=Sampling(0.0)), "greedy"),
        (dict(prompt=5), "prompt must be"),
        (dict(prompt=""), "prompt must be"),
        (dict(runs=0), "runs must be"),
        (dict(batch_size=0), "batch_size must be"),
    ],
)
def test_bad_arguments_from_python_are_refused_naming_them(pair, kwargs, message):
    with pytest.raises(ValueError, match=message):
        validate(pair, key=0, compare_runs=0, speed=False, **{"runs": 100, **kwargs})


def test_a_test_of_too_few_runs_fails_for_want_of_power():
    """Ten runs: no outcome has an expected count of 5, so every outcome shares one cell — nothing can be refused,
    not even the control, so the validation fails, and the stated power and detectable TV (above 1) say why."""
    report = validate(
        load_pair("tiny", device=model_device()), key=0, runs=10, methods=["sd"], compare_runs=0, speed=False
    )
    sd_row, control = report.laws
    assert sd_row.ok and sd_row.joint[1] == 1 and sd_row.detectable[1] > 1
    assert not control.refused and control.power < 1e-3 and not report.passed


@pytest.mark.slow
def test_sampling_warps_are_validated_too(pair):
    """Top-k and top-p warp p and q alike: the laws are still the target's (warped) law."""
    report = validate(
        pair,
        key=2,
        runs=1500,
        methods=["sd", "batch"],
        sampling=Sampling(0.8, top_k=40, top_p=0.9),
        compare_runs=0,
        speed=False,
    )
    assert report.passed, str(report)


@pytest.mark.slow
def test_a_bfloat16_pair_is_validated_with_laws_formed_from_its_logits():
    """``--dtype bfloat16``: the models' weights in bfloat16, ``p`` and ``q`` formed in float64 from their logits —
    the laws decode samples from, and so the laws the test holds them to."""
    half = load_pair("tiny", device=model_device(), dtype=torch.bfloat16)
    assert next(half.target.model.parameters()).dtype == torch.bfloat16
    report = validate(half, key=3, runs=1500, methods=["sd", "block"], compare_runs=0, speed=False)
    assert report.passed and report.settings["dtype"] == "bfloat16", str(report)


@pytest.mark.slow
def test_the_printed_table_is_the_json_row_by_row(pair):
    """Each law row printed is its JSON row (G, df, p of both tests, the verdict, power, detectable TVs), and each
    compare row its z: a row printing another row's value fails."""
    report = validate(pair, key=5, runs=1500, methods=["sd", "block"], compare_runs=1, max_new_tokens=6, speed=False)
    data = json.loads(report.to_json())
    text = str(report).splitlines()
    for row in data["laws"]:
        g1, df1, p1, gj, dfj, pj, refused, power, tv1, tvj, ok = _row_numbers(str(report), row["method"])
        assert (float(g1), int(df1), float(p1)) == pytest.approx(tuple(row["first"]), rel=5e-2, abs=0.05)
        assert (float(gj), int(dfj), float(pj)) == pytest.approx(tuple(row["joint"]), rel=5e-2, abs=0.05)
        assert (refused == "yes") == row["refused"] and (ok == "✓") == row["ok"]
        assert float(power) == pytest.approx(row["power"], abs=5e-4)
        assert (float(tv1), float(tvj)) == pytest.approx(tuple(row["detectable"]), abs=5e-4)
    assert len({tuple(r["first"]) for r in data["laws"]}) == len(data["laws"])  # rows differ: a swap would show
    for row in data["compare"]:
        line = next(line for line in text if row["quantity"] in line and line.strip().startswith(row["method"]))
        if math.isfinite(row["z"]):
            assert float(line.split("z =")[1].split()[0]) == pytest.approx(row["z"], abs=5e-3)


def _row_numbers(text: str, method: str) -> list[str]:
    """The numbers printed after a law row's method: G₁, df, p₁, G₁₂₃, df, p₁₂₃, refused, power, TV₁, TV₁₂₃, ok."""
    line = next(line for line in text.splitlines() if line.strip().startswith(method))
    return line[line.index(method) + len(method) :].replace("(", " ").replace(")", " ").split()


def test_a_reports_table_prints_each_law_rows_own_numbers_in_their_columns():
    """A report built by hand, every number distinct: each column of the printed table is its own field (the slow
    test holds validate's report to its JSON), and the JSON file is indented by two spaces."""
    settings = {"pair": "tiny", "device": "cpu", "dtype": "float32", "torch": "x", "law_tokens": 3, "runs": 10}
    settings |= {"law_K": 2}
    rows = [
        LawRow("sd", 10, True, (12.5, 7, 0.25), (40.5, 30, 0.75), False, 0.875, (0.125, 0.0625)),
        LawRow("control", 10, False, (99.5, 6, 0.001), (150.5, 29, 0.002), True, 0.5, (0.25, 0.375)),
    ]
    report = Validation(settings, rows)
    text = str(report)
    assert _row_numbers(text, "sd") == ["12.5", "7", "0.25", "40.5", "30", "0.75", "no", "0.875", "0.125", "0.062", "✓"]
    control = ["99.5", "6", "0.001", "150.5", "29", "0.002", "yes", "0.500", "0.250", "0.375", "✓"]
    assert _row_numbers(text, "control") == control and report.passed
    assert report.to_json().splitlines()[1].startswith('  "settings": {')


def test_the_load_warning_says_how_many_cpus_other_work_held():
    """The warning's numbers: other work held ``load − threads`` CPUs where ``cpus − threads`` were free; one thread
    is one thread."""
    assert load_warning(3.1, 2, 1) == (
        "warning: the machine was busy during the timings (load average 3.1 on 2 CPUs, torch on 1 thread): other "
        "work held about 2.1 CPUs where 1 were free of the timed threads, so the speed rows measure the contention, "
        "not the decoding; rerun on an idle machine or with fewer --threads"
    )
    assert "torch on 2 threads): other work held about 3.0 CPUs where 2 were free" in load_warning(5.0, 4, 2)


@pytest.mark.parametrize(
    "load, cpus, threads, warned",
    [
        (2.5, 2, 2, False),  # our two threads alone: the load is ours
        (2.6, 2, 2, True),  # more than half a CPU of other work on a machine ours fill
        (2.4, 2, 1, False),  # one other busy thread: each has its core
        (3.1, 2, 1, True),  # two others for the one core left
        (0.0, 2, 3, True),  # more threads than CPUs, however idle
        (9.0, None, 2, False),  # no CPU count: nothing said
        (16.4, 16, 4, False),
        (16.6, 16, 4, True),
    ],
)
def test_the_load_warning_comes_past_the_cpus_left_free_of_the_timed_threads(load, cpus, threads, warned):
    """The rule: other work (``load − threads``) beyond the ``cpus − threads`` the timed threads leave, by 0.5."""
    warning = load_warning(load, cpus, threads)
    assert (warning is not None) == warned
    if warned:
        assert warning.startswith("warning: ") and "speed rows" in warning and "\n" not in warning


def test_a_busy_machine_makes_validate_warn_that_its_speed_rows_mean_nothing(pair, monkeypatch):
    """Under a faked load of 5 on 2 CPUs the timings' settings record it and the printed report warns; at a load
    of 0.5 neither warns."""
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    small = dict(key=0, runs=200, methods=["sd"], compare_runs=0, batch_prompts=2, speed_tokens=2, speed_prompts=2)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # within the faked 2 CPUs whatever the machine's
    try:
        for load, warned in ((5.0, True), (0.5, False)):
            monkeypatch.setattr("os.getloadavg", lambda load=load: (load, 1.0, 1.0))
            report = validate(pair, **small)
            s = report.settings
            assert (s["cpus"], s["threads"], s["load_at_start"], s["load_at_end"]) == (2, 1, load, load)
            assert (s["load_warning"] is not None) == warned
            text = str(report)
            assert f"torch on 1 thread, 2 CPUs, load average {load:.1f} → {load:.1f}" in text
            assert ("warning: the machine was busy during the timings (load average 5.0 on 2 CPUs" in text) == warned
            assert json.loads(report.to_json())["settings"]["load_warning"] == s["load_warning"]
        no_speed = validate(pair, **dict(small, runs=100), speed=False).settings
        assert (no_speed["load_at_start"], no_speed["load_at_end"], no_speed["load_warning"]) == (None, None, None)
    finally:
        torch.set_num_threads(threads)


def test_each_lossless_method_is_tested_and_compared_but_the_reference_and_heads(pair, monkeypatch):
    """Three lossless methods and the control: four law tests; ``compare`` runs for the methods it can compare
    (autoregressive decoding is its reference; a head's stopping has no theory there), and keeps the rows with a z or
    a verdict; only the model check (Leviathan's i.i.d. acceptance) does not gate. Each law test, the compare runs
    and the timings draw from a key of their own."""
    import speculab.backends
    import speculab.compare
    import speculab.validate

    keys, real_decode, real_compare = [], speculab.backends.decode, speculab.compare.compare
    comparing = []

    def law_decode(*args, **kwargs):
        if not comparing:  # compare's own runs spawn their keys from its key
            keys.append(("law", kwargs["key"]))
        return real_decode(*args, **kwargs)

    def compare(*args, **kwargs):
        keys.append(("compare", kwargs["key"]))
        comparing.append(1)
        try:
            return real_compare(*args, **kwargs)
        finally:
            comparing.pop()

    monkeypatch.setattr("speculab.backends.decode", law_decode)
    monkeypatch.setattr("speculab.compare.compare", compare)
    monkeypatch.setattr(
        speculab.validate, "_speed", lambda report, pair, sampling, key, *a: keys.append(("speed", key))
    )
    report = validate(pair, key=0, runs=100, methods=["ar", "sd", "specdecpp"], compare_runs=1, max_new_tokens=4)
    assert [r.method for r in report.laws] == [
        "ar",
        "sd K=2",
        "specdecpp h=0.5 max_K=2 (head ≡ 0.8)",
        "control: biased uno ε=0.1 K=2",
    ]
    assert [what for what, _ in keys] == ["law"] * 4 + ["compare", "speed"]
    assert len({key for _, key in keys}) == len(keys)
    rows = real_compare(pair, SD(K=4), runs_per_prompt=1, max_new_tokens=4, key=0).rows
    name = lambda quantity: quantity.split(" (")[0]  # noqa: E731  (without the α estimated from the runs)
    kept = [name(r.quantity) for r in rows if math.isfinite(r.z) or r.holds is not None]
    assert 0 < len(kept) < len(rows)  # the filter has something to drop and something to keep
    assert {r["method"] for r in report.compare} == {"sd K=4"}
    assert [name(r["quantity"]) for r in report.compare] == kept
    assert [r["gates"] for r in report.compare] == [not q.startswith("target calls per run") for q in kept]
    assert not all(r["gates"] for r in report.compare)


@pytest.mark.parametrize("batch_size", [None, 7])
def test_the_law_tests_decode_in_the_batches_asked_for(pair, monkeypatch, batch_size):
    """A given ``batch_size`` is each law test's; without one, the batch that keeps a round's laws within 1 GiB."""
    import speculab.backends
    from speculab.validate import _law_batch

    seen, real = [], speculab.backends.decode
    monkeypatch.setattr(
        "speculab.backends.decode", lambda *a, **kw: seen.append((a[2], kw["batch_size"])) or real(*a, **kw)
    )
    validate(pair, key=0, runs=14, methods=["sd", "batch"], compare_runs=0, speed=False, batch_size=batch_size)
    assert len(seen) == 3
    assert [size for _, size in seen] == [batch_size or _law_batch(pair, method.rows) for method, _ in seen]
    assert batch_size or len({size for _, size in seen}) > 1  # batch SD's four rows a prompt make its batch smaller


def test_the_speed_rows_time_the_runs_they_name(pair, monkeypatch):
    """The batched rows decode ``batch_prompts`` prompts cycling through the defaults, the one-at-a-time rows
    ``speed_prompts`` of them in batches of one; each row's seconds are the time it took (within the whole call's),
    assisted generation's row is there, and the latency model is fitted and tested on ``max(speed_prompts, 8)``
    prompts. The load warning comes from the busier end of the timings."""
    import time

    import speculab.backends
    from speculab.validate import _speed

    prompts = default_prompts()
    calls, real = [], speculab.backends.decode
    monkeypatch.setattr(
        "speculab.backends.decode", lambda *a, **kw: calls.append((a[1], kw.get("batch_size"))) or real(*a, **kw)
    )
    loads = iter([5.0])  # busy at the start, calm at the end
    monkeypatch.setattr("os.getloadavg", lambda: (next(loads, 0.5), 1.0, 1.0))
    report = Validation({"cpus": 2, "threads": 1})
    many = len(prompts) + 2  # the batched rows go round the defaults and on
    t0 = time.perf_counter()
    _speed(report, pair, Sampling(), 0, many, 3, 3)
    wall = time.perf_counter() - t0
    timed = calls[1:]  # after the warm-up
    assert timed == [(prompts + prompts[:2], None)] * 2 + [(prompts[:3], 1)] * 2
    assert len(report.speed) == 5 and report.speed[-1].what.startswith("Hugging Face assisted generation")
    assert all(0 < row.seconds <= wall for row in report.speed)
    assert report.latency["fit_prompts"] + report.latency["test_prompts"] == 8
    s = report.settings
    assert (s["load_at_start"], s["load_at_end"]) == (5.0, 0.5) and s["load_warning"] is not None


def test_assisted_generation_counts_its_tokens_and_the_targets_calls(pair):
    """Its row's tokens are the new ones (at most ``tokens`` a prompt) and its target calls those the target's
    forward hook sees; a pair without a Hugging Face draft or target has no such row."""
    from types import SimpleNamespace

    from speculab.validate import _assisted

    seen, new, generate = [], [], pair.target.model.generate

    def generated(ids, **kwargs):
        out = generate(ids, **kwargs)
        new.append(out.shape[1] - ids.shape[1])
        return out

    hook = pair.target.model.register_forward_pre_hook(lambda module, args: seen.append(1))
    pair.target.model.generate = generated
    try:
        row = _assisted(pair, default_prompts()[:3], 3, Sampling(), 0)
    finally:
        hook.remove()
        del pair.target.model.generate
    assert len(new) == 3 and row.tokens == sum(new) and all(1 <= n <= 3 for n in new)
    assert row.target_calls == len(seen) >= 3 and row.seconds > 0
    assert _assisted(SimpleNamespace(draft=object(), target=pair.target), ["a"], 3, Sampling(), 0) is None
    assert _assisted(SimpleNamespace(draft=pair.draft, target=object()), ["a"], 3, Sampling(), 0) is None


def test_an_ngram_drafts_control_law_is_formed_from_its_own_next_token_law(pair, monkeypatch):
    """A history draft has no Hugging Face model: the control's law is formed from the draft's next-token law after
    the prompt (its logits are log p), and the pair's law tests run."""
    import speculab.validate
    from speculab.backends import ngram_draft

    ngram = load_pair(ngram_draft(pair.tokenizer, default_prompts(), n=2), "tiny-target", device=model_device())
    seen, real = [], speculab.validate._uno_law
    monkeypatch.setattr(speculab.validate, "_uno_law", lambda p, q, eps: seen.append(p) or real(p, q, eps))
    report = validate(ngram, key=0, runs=50, methods=["sd"], compare_runs=0, speed=False)
    ids = tuple(ngram.tokenizer.encode(default_prompts()[0]))
    law = torch.softmax(ngram.draft.logits(ids).double(), -1).numpy()
    assert len(seen) == 1 and seen[0].shape == (ngram.vocab_size,)
    np.testing.assert_allclose(seen[0], law, rtol=1e-12, atol=1e-15)
    assert [r.method for r in report.laws] == ["sd K=2", "control: biased uno ε=0.1 K=2"]
