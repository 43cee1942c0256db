"""``plan``: each candidate's round along real contexts (the estimator against exact enumeration and closed forms),
the cost model's arithmetic, the ranking and the command."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from conftest import Z_BOUND, progress_parts
from speculab.backends import Sampling
from speculab.backends.latency import ForwardFit, LatencyModel
from speculab.backends.models import HistoryModel
from speculab.backends.pair import ModelPair
from speculab.cli import main
from speculab.methods import SD, Autoregressive, Biased, BlockVerification, GreedyDraft
from speculab.planning import candidates, exact_yield, round_yields, run_cost


class _Constant(HistoryModel):
    """A model whose next-token law is ``law`` whatever the history: an i.i.d. instance."""

    def __init__(self, law):
        super().__init__(len(law))
        self.law = torch.tensor(law, dtype=torch.float64)

    def probs(self, history):
        return self.law


class _NoTokenizer:
    eos_token_id = None


def _iid_pair(seed: int, V: int = 4):
    rng = np.random.default_rng(seed)
    p, q = rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V))
    return p, q, ModelPair(_Constant(p), _Constant(q), _NoTokenizer(), V, "iid")


@pytest.mark.parametrize("K", [1, 3])
def test_exact_yield_is_leviathans_geometric_sum_for_sd_and_greedy_drafts(K):
    """On an i.i.d. instance a slot is kept with ``α`` independently: ``E[τ + 1] = (1 − α^{K+1}) / (1 − α)``, with
    ``α = 1 − TV(p, q)`` for SD and ``α = q(argmax p)`` for greedy drafts — a closed form the enumeration must meet
    exactly."""
    p, q, _ = _iid_pair(1)
    for method, alpha in ((SD(K=K), 1 - 0.5 * np.abs(p - q).sum()), (GreedyDraft(K=K), q[np.argmax(p)])):
        tokens, bias = exact_yield(method, p, q)
        assert tokens == pytest.approx((1 - alpha ** (K + 1)) / (1 - alpha), rel=1e-12) and bias == 0.0


def test_exact_yield_gives_a_biased_rules_per_token_bias():
    """Decoding-UNO with one draft: each output token's law is its one-step law, so the per-token bias is that
    law's TV from ``q`` on every round — the first slot's, weighted by reaching it (always)."""
    p, q, _ = _iid_pair(2)
    method = Biased(0.2, K=1)
    tokens, bias = exact_yield(method, p, q)
    law = method.round_law(
        torch.tensor(p)[None, None], torch.tensor(np.stack([q, q]))[None], torch.tensor([[0]]), bonus=True
    )
    assert law.law is not None
    # the output law at slot 1 does not depend on the drafted token: the round's marginal is one law
    one = 0.5 * float((law.law[0, 0] - torch.tensor(q)).abs().sum())
    assert bias == pytest.approx(one / tokens, rel=1e-9) and bias > 0.01
    # two drafts: slot 2 is output only when slot 1's draft was kept (α), so the bias is TV (1 + α) / E[τ + 1],
    # α from E[τ + 1] = 1 + α + α² (i.i.d. slots)
    tokens2, bias2 = exact_yield(Biased(0.2, K=2), p, q)
    alpha = (-1 + math.sqrt(1 + 4 * (tokens2 - 1))) / 2
    assert bias2 == pytest.approx(one * (1 + alpha) / tokens2, rel=1e-9)


@pytest.mark.parametrize("seed", [0, pytest.param(3, marks=pytest.mark.slow)])
def test_the_estimator_along_contexts_meets_the_enumeration(seed):
    """The Rao–Blackwellised estimator on a pair whose models are i.i.d. laws (600 contexts, fixed seed): within 5
    standard errors of the exact ``E[τ + 1]`` for every rule and ``K`` sharing a block, exactly for greedy drafts
    (a deterministic block), and the biased rule's bias to the enumeration's. Power: the s.e. is held below 4 % of
    the mean, so an estimator 20 % off is refused with probability ≥ 0.5, 30 % off almost surely."""
    p, q, pair = _iid_pair(seed)
    methods = [SD(K=3), SD(K=1), BlockVerification(K=3), GreedyDraft(K=2), Biased(0.2, K=2), Autoregressive()]
    ys = round_yields(pair, methods, [[0, 1]] * 600, sampling=Sampling(1.0), key=seed)
    for m, y in zip(methods, ys):
        if not m.drafting:
            assert (y.tokens, y.full, y.K) == (1.0, 1.0, 0)
            continue
        tokens, bias = exact_yield(m, p, q)
        if isinstance(m, GreedyDraft):
            assert y.tokens == pytest.approx(tokens, rel=1e-6) and y.se < 1e-9
        else:
            assert abs(y.tokens - tokens) < Z_BOUND * y.se and y.se < 0.04 * tokens, (m, y, tokens)
        assert y.bias == pytest.approx(bias, abs=5 * y.se / tokens + 1e-6)
        assert (y.drafted == np.arange(m.K + 1)).all() and y.contexts == 600
        # a round of L < K drafts is the first L slots of the same block: SD(K=1)'s rounds are SD(K=3)'s row 1
        if repr(m) == "SD(K=1)":
            assert np.array_equal(y.outcome[:, 1, :2], ys[0].outcome[:, 1, :2])


def _model(**loop) -> LatencyModel:
    draft = ForwardFit(0.001, 0.0005, 1.0, 100)  # t_p(k) = 1 ms + 0.5 ms k
    target = ForwardFit(0.01, 0.002, 1.0, 100)  # t_q(k) = 10 ms + 2 ms k
    terms = dict(per_round=0.0, per_draft=0.0, per_token=0.0, per_run=0.0, per_drafting_run=0.0) | loop
    terms.setdefault("per_drafting_round", 0.0)
    return LatencyModel(draft, target, **terms)


def test_run_cost_of_autoregressive_decoding_is_its_rounds_by_hand():
    """N rounds of one target call of one token, the first the prefill (priced per run)."""
    N = 30
    m = _model(per_round=1e-4, per_token=2e-5, per_run=0.05, per_drafting_run=0.3, per_drafting_round=0.7)
    cost = run_cost(m, Autoregressive(), np.ones((1, 1)), np.zeros(1), N)  # no drafting run or round to pay for
    assert cost.seconds == pytest.approx(0.05 + (N - 1) * 0.012 + N * (1e-4 + 2e-5)) and cost.calls == N


def test_a_fully_kept_block_is_caught_up_on_only_when_a_round_follows():
    """SD(K=1) keeping every draft, 4 tokens: two rounds of 2 tokens; only the first is followed by a round, whose
    draft catches up on two tokens: 2 t_p(1) + (t_p(2) − t_p(1)) + one target call of 2 (the other is the prefill)."""
    m = _model()
    cost = run_cost(m, SD(K=1), np.array([[1.0, 0.0], [0.0, 1.0]]), np.array([0.0, 1.0]), 4)
    assert cost.calls == 2 and cost.seconds == pytest.approx(2 * 0.0015 + 0.0005 + 0.014, rel=1e-12)


def test_run_cost_meets_a_simulation_of_its_rounds():
    """SD(K=3) with a fixed law of τ per round length: the dynamic program's expected seconds and target calls
    against 20,000 simulated runs of the same rounds (horizon included), within 5 standard errors."""
    K, N = 3, 12
    rng = np.random.default_rng(0)
    outcome = np.zeros((K + 1, K + 1))
    outcome[0, 0] = 1.0
    for L in range(1, K + 1):
        outcome[L, : L + 1] = rng.dirichlet(np.ones(L + 1))
    drafted = np.arange(K + 1, dtype=float)
    m = _model(
        per_round=1e-4, per_draft=2e-4, per_token=3e-5, per_run=0.05, per_drafting_run=0.004, per_drafting_round=6e-5
    )
    cost = run_cost(m, SD(K=K), outcome, drafted, N)
    seconds, calls = [], []
    for _ in range(20_000):
        n, t, c, first = N, 0.05 + 0.004, 0, True
        while n:
            L = min(K, n)
            tau = rng.choice(L + 1, p=outcome[L, : L + 1])
            out = min(tau + 1, n)
            t += L * m.draft(1) + (tau == L and n > out) * (m.draft(2) - m.draft(1)) + 1e-4 + 6e-5 + L * 2e-4
            t += out * 3e-5
            t += 0.0 if first else m.target(L + 1)
            first, n, c = False, n - out, c + 1
        seconds.append(t)
        calls.append(c)
    for want, got in ((cost.seconds, seconds), (cost.calls, calls)):
        assert abs(np.mean(got) - want) < Z_BOUND * np.std(got) / math.sqrt(len(got)), (want, np.mean(got))


def test_candidates_are_lossless_unless_a_budget_lets_lossy_rules_in():
    lossless = candidates([1, 4], 0.0)
    assert isinstance(lossless[0], Autoregressive) and all(m.unbiased for m in lossless)
    assert "BlockVerification(K=1)" not in {repr(m) for m in lossless}  # SD(K=1)'s law: ranked once
    assert {repr(m) for m in lossless} >= {"SD(K=4)", "GreedyDraft(K=1)", "BlockVerification(K=4)"}
    lossy = candidates([2], 0.05)
    assert any(not m.unbiased for m in lossy) and all(getattr(m, "K", 2) in (None, 2) for m in lossy[1:])


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--k", "0"], "--k: expected distinct integers in 1..16"),
        (["--k", "2,2"], "--k: expected distinct integers in 1..16"),
        (["--k", "a"], "--k: expected comma-separated integers; got 'a'"),
        (["--bias-budget", "2"], "--bias-budget: a per-token TV in"),
        (["--bias-budget", "x"], "--bias-budget: expected a number"),
        (["--prompts", "30"], "--prompts 30: at most 24"),
        (["--out", "/etc/hostname"], "--out /etc/hostname: a file; give a folder"),
        (["--out", "/etc/hostname/x"], "--out /etc/hostname/x: /etc/hostname is a file, not a folder"),
        (["--pair", "small"], "--pair must be 'tiny' or 'tiny-ngram' (or use --draft/--target); got 'small'"),
        (["--vllm-python", "/x"], "--vllm-python is read only with --engine vllm"),
        (["--max-nodes", "33"], "--max-nodes 33: 0 (no trees) or 2..32"),
        (["--max-nodes", "1"], "--max-nodes 1: 0 (no trees) or 2..32 (a tree has 2 nodes or more)"),
        (["--max-new-tokens", "5000"], "argument --max-new-tokens: must be at most 236 for prompt 15 (20 tokens, the"),
        (["--prompts", "2", "--max-new-tokens", "240"], "must be at most 237 for held-out prompt 7 (19 tokens"),
        (["--engine", "vllm", "--k", "9,10"], "--engine vllm: vLLM runs K ≤ 8; --k 9,10 has none"),
        (["--engine", "vllm", "--draft", "/tmp"], "--engine vllm: give both --draft and --target"),
        (["--engine", "sglang"], "argument --engine: invalid choice: 'sglang'"),
        (["--engine", "vllm", "--pair", "tiny-ngram"], "--engine vllm: vLLM loads the draft from a folder"),
        (["--engine", "vllm", "--vllm-python", "/nonexistent"], "no Python at /nonexistent (from --vllm-python)"),
        (
            ["--engine", "vllm", "--draft", "tiny-draft", "--target", "tiny-target"],
            "--draft tiny-draft must be a local",
        ),
    ],
)
def test_bad_input_gets_one_line_naming_it(argv, message, capsys):
    assert main(["plan", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err


def test_plan_ranks_predicts_and_confirms_on_the_tiny_pair(tmp_path, capsys, monkeypatch):
    """The whole command, small: every candidate ranked by predicted speed; the confirmations decode the best and
    the references; predicted tokens per call of each confirmed rule is its round law's mean (not the clock's); a
    busy machine (load average 3 on 2 CPUs, faked) is said to be, at the start and in the table; the progress
    display names each part of the work and counts it to its end."""
    monkeypatch.setattr("os.getloadavg", lambda: (3.0, 3.0, 3.0))
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    argv = ["plan", "--k", "1,2", "--prompts", "2", "--per-prompt", "2", "--confirm", "1", "--max-new-tokens", "8"]
    argv += ["--confirm-runs", "2"]
    assert main([*argv, "--max-nodes", "0", "--out", str(tmp_path / "new")]) == 0
    text, err = capsys.readouterr()
    assert err.startswith("note: the machine is busy (load average 3.0 on 2 CPUs, torch on ")  # said at the start
    # its parts said as they run, each reaching its total: the timings (a warm-up, then 5 chain methods × 2 prompts
    # × 2 runs), the chain rounds (2 draft rows, SD's and the greedy draft's, × 4 contexts), the confirmations
    confirmations = len(json.loads((tmp_path / "new" / "plan.json").read_text())["confirmed"]) * 8 * 2
    assert progress_parts(err, "planning") == {1: (21, 21, 3), 2: (8, 8, 3), 3: (confirmations,) * 2 + (3,)}, err
    plan = json.loads((tmp_path / "new" / "plan.json").read_text())
    assert (tmp_path / "new" / "plan.png").stat().st_size > 10_000 and (tmp_path / "new" / "plan.pdf").exists()
    ranked = plan["ranked"]
    assert len(ranked) == 1 + 2 + 3 + 1 and all(r["allowed"] for r in ranked)  # and SD(K=4), a reference
    assert [r["tokens_per_second"] for r in ranked] == sorted((r["tokens_per_second"] for r in ranked), reverse=True)
    by = {r["method"]: r for r in ranked}
    assert by["Autoregressive()"]["tokens_per_call"] == 1.0
    confirmed = {r["method"]: r for r in plan["confirmed"]}
    assert {"Autoregressive()", "SD(K=4)", ranked[0]["method"]} == set(confirmed)
    for name, r in confirmed.items():
        assert r["measured"] > 0 and math.isfinite(r["error"]) and r["runs"] == 8 * 2  # held-out × runs
        assert r["predicted_per_call"] == by[name]["tokens_per_call"]
        assert r["predicted"] == by[name]["tokens_per_second"]
    assert "confirmed on 8 held-out prompts × 2 runs" in text and plan["verdict"] in text
    assert "note: the machine was busy (load average 3.0 on 2 CPUs" in text and plan["settings"]["load_at_end"] == 3
    # the report shows the plan, and refuses one edited into a rate no run gives
    from speculab.repro.report import build_report

    page = build_report(tmp_path / "new").read_text()
    assert "plan: the best configuration" in page and "data:image/png;base64," in page
    assert plan["engine"] == [] and "vLLM configuration" not in page
    row = {"configuration": "greedy K=2", "rule": "GreedyDraft(K=2)", "predicted_per_call": 1.2, "z": -3.7}
    row |= {"predicted_per_call_se": 0.03, "measured_per_call": 1.015, "measured_per_call_se": 0.04}
    row |= {"tokens_per_second": 738.0, "error": None, "verdict": "agrees"}  # z = -0.185 / 0.05
    failed = {"configuration": "synthetic K=2", "rule": "x", "predicted_per_call": 1.5, "error": "not on the CPU"}
    failed |= {"predicted_per_call_se": 0.02, "z": None, "verdict": "vLLM failed"}
    (tmp_path / "new" / "plan.json").write_text(json.dumps(plan | {"engine": [row, failed]}))
    with pytest.raises(ValueError, match="plan.json: its digest does not match its content: edited since"):
        build_report(tmp_path / "new")  # an edit, unsigned
    (tmp_path / "new" / "plan.json").write_text(_signed(plan | {"engine": [row, failed]}))  # signed again
    page = build_report(tmp_path / "new").read_text()
    assert "<td>greedy K=2</td><td>GreedyDraft(K=2)</td><td>1.200</td><td>1.015</td><td>-3.7</td>" in page, page
    assert "vLLM failed: not on the CPU" in page
    # edits signed again are still checked for sense, each naming its field
    for edit, message in (
        ({"engine": [row | {"measured_per_call": 0.5}]}, r"engine\[0\].measured_per_call: fewer than one token"),
        (
            {"ranked": [plan["ranked"][0] | {"tokens_per_second": -1.0}]},
            r"ranked\[0\].tokens_per_second is -1.0, a value no run writes",
        ),
        (
            {"ranked": [plan["ranked"][0] | {"bias": "0"}]},
            r'ranked\[0\].bias is "0", a value no run writes',
        ),
        (
            {"confirmed": [{k: v for k, v in plan["confirmed"][0].items() if k != "measured"}]},
            r"confirmed\[0\].measured is missing",
        ),
        ({"settings": {k: v for k, v in plan["settings"].items() if k != "pair"}}, "settings.pair is missing"),
        ({"verdict": None}, "no verdict"),
        ({"verdict": "the predicted best, NoSuchMethod(), was the measured best"}, r"verdict .* is not its confirm"),
        (
            {"confirmed": [plan["confirmed"][0] | {"error": 0.5}, *plan["confirmed"][1:]]},
            r"confirmed\[0\].error is 0.5, not predicted / ",
        ),
        (
            {"confirmed": [r for r in plan["confirmed"] if r["method"] != "Autoregressive()"]},
            "confirmed: no autoregressive decoding",
        ),
        ({"engine": [row | {"z": 3.7}]}, r"engine\[0\].z is 3.7, not \(measured - predicted\) / its standard"),
        (
            {"engine": [row | {"verdict": "refused"}]},
            r'engine\[0\].verdict is "refused", not its numbers\' \("agrees"\)',
        ),
        ({"engine": [failed | {"error": ""}]}, r"engine\[0\].error is not a message"),
        ({"engine": [failed | {"measured_per_call_se": "x"}]}, r'engine\[0\].measured_per_call_se is "x", a value no'),
        ({"confirmed": None}, "'confirmed' is not a list"),
        (
            {"engine": [{k: v for k, v in row.items() if k != "tokens_per_second"}]},
            r"engine\[0\].measured_per_call_se or",
        ),
        (
            {"confirmed": [plan["confirmed"][0] | {"measured_se": -5.0}]},
            r"confirmed\[0\].measured_se is -5.0, a value no run writes",
        ),
        ({"ranked": [plan["ranked"][0] | {"tokens_per_second_se": "abc"}]}, r"ranked\[0\].tokens_per_second_se"),
    ):
        (tmp_path / "new" / "plan.json").write_text(_signed(plan | edit))
        with pytest.raises(ValueError, match=message):
            build_report(tmp_path / "new")


def _signed(plan: dict) -> str:
    """``plan`` as a forger would write it: edited, then signed again with the command's own digest."""
    from speculab.planning.command import plan_digest

    body = {k: v for k, v in plan.items() if k != "digest"}
    return json.dumps({**body, "digest": plan_digest(body)})


@pytest.mark.slow
def test_plan_runs_on_the_cheap_draft_pair(capsys):
    """The tiny target with a trigram draft (``--pair tiny-ngram``): a draft that is not a network, planned and
    confirmed like any other."""
    argv = ["plan", "--pair", "tiny-ngram", "--k", "1,2", "--prompts", "2", "--per-prompt", "2", "--confirm", "1"]
    argv += ["--confirm-runs", "1"]
    assert main([*argv, "--max-new-tokens", "8", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    confirmed = {r["method"] for r in plan["confirmed"]}  # the best, and the yardsticks (the best may be one)
    assert plan["settings"]["pair"] == "tiny-ngram"
    assert confirmed == {"Autoregressive()", "SD(K=4)", plan["ranked"][0]["method"]}
    assert 1.0 < max(r["tokens_per_round"] for r in plan["ranked"]) < 3.0
    assert not any(r["tree"] for r in plan["ranked"])  # a trigram draft has no tree attention: said, not ranked
    assert plan["settings"]["no_trees"].startswith("RRS on real models needs Hugging Face draft and target models")


# -- an engine's configurations beside the prediction -----------------------------------------------------------------
def _geometric_yield(alpha: float, K: int, contexts: int):
    """Rounds whose slots are each kept with probability ``alpha`` (SD on i.i.d. laws): ``P(τ = t)`` in a round of
    ``L`` drafts, the same at every context."""
    from speculab.planning.yields import Yield

    outcome = np.zeros((K + 1, K + 1))
    for L in range(K + 1):
        outcome[L, :L] = [alpha**t * (1 - alpha) for t in range(L)]
        outcome[L, L] = alpha**L
    return Yield(
        np.repeat(outcome[None], contexts, 0), np.repeat(np.arange(K + 1.0)[None], contexts, 0), np.zeros(contexts)
    )


def _engine_requests(rng, alpha: float, K: int, N: int, n: int):
    """An engine's reports of ``n`` requests of ``N`` tokens: a prefill token, then rounds of ``K`` drafts each kept
    with probability ``alpha`` while the previous were, cut at ``N`` tokens."""
    out = []
    for _ in range(n):
        drafted, accepted, made = [], [], 1
        while made < N:
            a = 0
            while a < K and rng.random() < alpha:
                a += 1
            drafted.append(K)
            accepted.append(a)
            made += a + 1
        out.append(([0] * N, [drafted, accepted]))
    return out


@pytest.mark.parametrize("engine_alpha, refused", [(0.6, False), (0.5, True)])
def test_engine_rows_predict_an_engine_that_runs_the_rule_and_refuse_one_that_does_not(
    monkeypatch, engine_alpha, refused
):
    """An engine whose rounds keep each slot with the rule's 0.6 matches the predicted tokens per call (|z| < 5);
    one keeping 0.5 is refused (seed fixed; 256 requests of 24 tokens: z = −13.5, so power ≈ 1 at that gap)."""
    from speculab.engines import vllm
    from speculab.planning import Plan
    from speculab.planning.engine import vllm_rows
    from speculab.planning.plan import Candidate

    K, N, held_out, runs = 3, 24, [[5, 6]] * 32, 8
    y = _geometric_yield(0.6, K, 16)
    cost = run_cost(_model(), SD(K=K), y.outcome.mean(0), y.drafted.mean(0), N)
    settings = {
        "max_new_tokens": N,
        "contexts": 16,
        "prompts": 4,
        "ks": [K],
        "sampling": {"top_k": None, "top_p": None},
    }
    result = Plan(settings, _model(), [Candidate(SD(K=K), y, cost, 0.0, 0.0, True)])
    rng = np.random.default_rng(0)

    def engine(python, job, **kw):
        assert [c["name"] for c in job["configs"]] == ["plain", f"probabilistic K={K}"]
        assert job["groups"][0]["ignore_eos"] and job["groups"][0]["max_tokens"] == N
        n = len(job["groups"][0]["prompts"])
        plain = {"ok": True, "groups": [{"tokens": [[0] * N] * n, "rounds": [None] * n, "seconds": 1.0}]}
        reqs = _engine_requests(rng, engine_alpha, K, N, n)
        sd = {"ok": True, "groups": [{"tokens": [t for t, _ in reqs], "rounds": [r for _, r in reqs], "seconds": 1.0}]}
        return [plain, sd]

    monkeypatch.setattr(vllm, "run_worker", engine)
    rows = vllm_rows(result, ("D", "T"), held_out, python=None, runs=runs, key=0)
    assert [r.configuration for r in rows] == ["plain", f"probabilistic K={K}"]
    assert rows[0].measured_per_call == 1.0 and rows[0].predicted_per_call == 1.0
    sd = rows[1]
    # the prediction: a prefill, then the rule's calls for N − 1 tokens
    assert sd.predicted_per_call == pytest.approx(
        N / (1 + run_cost(_model(), SD(K=K), y.outcome[0], y.drafted[0], N - 1).calls)
    )
    assert sd.requests == len(held_out) * runs
    assert (abs(sd.z) >= Z_BOUND) == refused, sd
    assert rows[0].verdict == "exact" and sd.verdict == ("refused" if refused else "agrees")


def test_engine_rows_run_the_best_k_asked_for_that_vllm_runs_and_say_what_they_passed_over(monkeypatch):
    """Ranked best first: SD(K=12) (asked for, past vLLM's K ≤ 8), SD(K=4) (the yardstick, not asked for), SD(K=3):
    vLLM runs K=3, and the row says the plan's best SD was past vLLM's range."""
    from speculab.engines import vllm
    from speculab.planning import Plan
    from speculab.planning.engine import vllm_rows
    from speculab.planning.plan import Candidate

    N = 12
    settings = {
        "max_new_tokens": N,
        "contexts": 16,
        "prompts": 4,
        "ks": [3, 12],
        "sampling": {"top_k": None, "top_p": None},
    }
    ranked = []
    for K in (12, 4, 3):
        y = _geometric_yield(0.6, K, 16)
        ranked.append(Candidate(SD(K=K), y, run_cost(_model(), SD(K=K), y.outcome[0], y.drafted[0], N), 0, 0, True))
    seen = []

    def engine(python, job, **kw):
        seen.extend(c["name"] for c in job["configs"])
        n = len(job["groups"][0]["prompts"])
        return [{"ok": True, "groups": [{"tokens": [[0] * N] * n, "rounds": [None] * n, "seconds": 1.0}]}] * 2

    monkeypatch.setattr(vllm, "run_worker", engine)
    rows = vllm_rows(Plan(settings, _model(), ranked), ("D", "T"), [[5, 6]] * 2, python=None, runs=2, key=0)
    assert seen == ["plain", "probabilistic K=3"]
    assert rows[1].rule == "SD(K=3)" and "SD(K=12)" in rows[1].note and rows[0].note == ""


def test_a_rate_over_runs_is_a_ratio_of_sums_with_the_prompts_as_its_units():
    """Two runs each of three prompts: the runs are summed per prompt, and the rate's standard error is the delta
    method's over the three prompts, by hand."""
    from speculab.counts import Estimate
    from speculab.planning.plan import summed_by_prompt

    tokens = summed_by_prompt([10, 20, 30, 14, 20, 26], 3)  # run i decodes prompt i mod 3
    seconds = summed_by_prompt([1.0, 2.0, 2.0, 1.0, 2.0, 4.0], 3)
    assert tokens.tolist() == [24, 40, 56] and seconds.tolist() == [2.0, 4.0, 6.0]
    est = Estimate.ratio(tokens, seconds)
    R = 120 / 12
    resid = np.array([24 - 2 * R, 40 - 4 * R, 56 - 6 * R])
    assert est.mean == R and est.n == 3
    assert est.se == pytest.approx(math.sqrt(3 / 2 * (resid @ resid)) / 12, rel=1e-12)
    with pytest.raises(ValueError, match="5 runs are not whole rounds of 3 prompts"):
        summed_by_prompt([1, 2, 3, 4, 5], 3)


def test_the_table_json_and_report_give_each_engine_row_its_verdict(tmp_path):
    """Engine rows as the table, plan.json and the report page show them: z and its verdict against |z| < 5, the
    note of a rule past vLLM's range, and no ``nan`` where one prompt leaves no standard error."""
    from speculab.planning import Plan
    from speculab.planning.command import table, to_json
    from speculab.planning.engine import EngineRow
    from speculab.planning.plan import Candidate
    from speculab.repro.report import _plan, _plan_section

    N, K = 12, 3
    y = _geometric_yield(0.6, K, 16)
    settings = {
        "pair": "tiny",
        "device": "cpu",
        "dtype": "float32",
        "sampling": {"temperature": 1.0, "top_k": None, "top_p": None},
        "ks": [K],
        "bias_budget": 0.0,
        "max_new_tokens": N,
        "prompts": 4,
        "held_out": 2,
        "confirm_runs": 1,
        "contexts": 16,
        "key": 0,
        "threads": 1,
        "cpus": 2,
        "load_at_start": 0.0,
    }
    result = Plan(
        settings,
        _model(),
        [Candidate(SD(K=K), y, run_cost(_model(), SD(K=K), y.outcome[0], y.drafted[0], N), 0, 0, True)],
    )
    result.engine = [
        EngineRow("plain", "autoregressive", 1.0, 0.0, 1.0, 0.0, 900.0, 8),
        EngineRow("probabilistic K=3", "SD(K=3)", 2.0, 0.05, 1.2, 0.01, 500.0, 8, note="past vLLM's K ≤ 8"),
        EngineRow("greedy K=3", "GreedyDraft(K=3)", 1.5, 0.05, 1.45, math.nan, 500.0, 8),
    ]
    text = table(result)
    assert "refused where |z| ≥ 5" in text and "nan" not in text
    lines = {line.split()[0]: line for line in text.splitlines() if line.startswith("  ") and "K=3" in line}
    assert text.count("  exact") == 1 and lines["probabilistic"].endswith("refused") and "(past vLLM's K ≤ 8)" in text
    assert lines["greedy"].endswith("no standard error (one prompt)")
    payload = to_json(result)
    assert [r["verdict"] for r in payload["engine"]] == ["exact", "refused", "no standard error (one prompt)"]
    (tmp_path / "plan.json").write_text(__import__("json").dumps(payload))
    page = _plan_section(tmp_path, _plan(tmp_path))
    assert "<th>verdict</th>" in page and "refused (past vLLM" in page


def test_the_ratio_of_sums_standard_error_is_the_spread_of_the_ratio():
    """Independently of the formula: over 4,000 samples of 16 clusters (rates around 2, noise growing with each
    cluster's size), the mean delta-method standard error is the ratio's own spread to within 10 % (it runs about
    4 % low at 16 clusters, the delta method's small-sample bias; the spread is known to about 1 % here)."""
    from speculab.counts import Estimate

    rng = np.random.default_rng(0)
    den = rng.uniform(1, 3, (4000, 16))
    num = 2 * den + rng.normal(0, 0.5, den.shape) * den
    est = [Estimate.ratio(n, d) for n, d in zip(num, den)]
    assert abs(np.mean([e.se for e in est]) / np.std([e.mean for e in est]) - 1) < 0.1


@pytest.mark.parametrize(
    "bad, message",
    [
        (dict(confirm_runs=0), "confirm_runs must be an integer >= 1; got 0"),
        (dict(confirm_runs=2.5), "confirm_runs must be an integer >= 1; got 2.5"),
        (dict(max_nodes=1), "max_nodes must be 0 .no trees. or an integer in 2..32; got 1"),
        (dict(ks=[0]), r"ks must be integers in 1..16; got \[0\]"),
    ],
)
def test_plan_refuses_bad_arguments_before_timing_anything(bad, message, monkeypatch):
    """Each argument is checked before the calibration runs (a timed decode here would be minutes on a real pair)."""
    import speculab.backends.latency as latency
    from speculab.planning import plan

    monkeypatch.setattr(latency, "timed_decode", lambda *a, **k: pytest.fail("timed before the checks"))
    _, _, pair = _iid_pair(0)
    with pytest.raises(ValueError, match=message):
        plan(pair, prompts=[[0]], held_out=[[0]], sampling=Sampling(1.0), key=0, max_new_tokens=2, **bad)


def test_speedups_are_over_autoregressive_decodings_row_which_must_be_there():
    """Each row's predicted and measured rates over autoregressive decoding's; rows without it are refused."""
    from speculab.planning.plan import Confirmation, with_speedups

    ar = Confirmation(repr(Autoregressive()), 10.0, 0.1, 8.0, 0.1, 1.0, 1.0, 2)
    sd = Confirmation(repr(SD(K=2)), 25.0, 0.1, 12.0, 0.1, 2.5, 2.4, 2)
    out = with_speedups([sd, ar])
    assert [(r.predicted_speedup, r.measured_speedup) for r in out] == [(2.5, 1.5), (1.0, 1.0)]
    with pytest.raises(ValueError, match="rows: no row of autoregressive decoding"):
        with_speedups([sd])
    with pytest.raises(ValueError, match="rows: no row of autoregressive decoding"):
        with_speedups([])
