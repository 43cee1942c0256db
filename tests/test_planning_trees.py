"""``plan``'s token trees: the tree verifiers' round laws along contexts (the estimator against the exact enumeration
of every drafted tree), the positional acceptance, the shape search, and a tree round's cost."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
import torch

from conftest import Z_BOUND, progress_parts
from speculab.backends import Sampling
from speculab.cli import main
from speculab.methods import RRS, SD, Traversal
from speculab.methods.tree import Tree
from speculab.planning import run_cost
from speculab.planning.cost import TreeOverhead, fit_tree_overhead
from speculab.planning.trees import best_shapes, exact_tree_tokens, rank_acceptance_along, tree_yield
from test_planning import _iid_pair, _model

CONTEXTS = 800  # i.i.d. contexts: with E[τ + 1] near 1.5-2 and its sd under 0.8, a standard error under 0.03


@pytest.mark.parametrize(
    "method",
    [
        RRS((2, 1)),
        *(
            pytest.param(m, marks=pytest.mark.slow)
            for m in [RRS((2, 1), draws="distinct"), Traversal((2, 1), draws="distinct")]
        ),
        Traversal(Tree((0, 1, 1))),
    ],
)
def test_tree_yield_meets_the_enumeration_of_every_drafted_tree(method):
    """The Rao–Blackwellised tokens per round of a tree verifier along i.i.d. contexts against the exact
    enumeration of every drafted tree (|z| < 5, seed fixed); the cut to one level against the enumeration of the
    cut tree. Power: a 10 % error is more than 5 standard errors here (asserted)."""
    p, q, pair = _iid_pair(1)
    y = tree_yield(pair, method, [[0]] * CONTEXTS, sampling=Sampling(1.0), rng=torch.Generator().manual_seed(0))
    exact = exact_tree_tokens(method, p, q)
    assert abs(y.tokens - exact) < Z_BOUND * y.se, (y.tokens, y.se, exact)
    assert 0.1 * exact > 5 * y.se  # the stated power
    cut = type(method)(method.tree.truncated(1), draws=method.draws)
    one = 1.0 + y.outcome[:, 1, :2].mean(0) @ np.arange(2)
    assert abs(one - exact_tree_tokens(cut, p, q)) < Z_BOUND * y.outcome[:, 1, 1].std() / np.sqrt(CONTEXTS)
    assert (y.drafted[:, 1] == method.tree.truncated(1).size).all() and (y.drafted[:, 2] == method.tree.size).all()
    assert np.allclose(y.outcome.sum(-1), 1.0)  # each cut's law of the end's depth is a law


def test_a_chain_drawn_as_a_tree_is_sd_exactly():
    """RRS on a chain is SD: the same exact tokens per round as the chain's closed form."""
    p, q, _ = _iid_pair(2)
    alpha = 1 - 0.5 * np.abs(p - q).sum()
    assert exact_tree_tokens(RRS((1, 1, 1)), p, q) == pytest.approx((1 - alpha**4) / (1 - alpha), rel=1e-12)


def test_the_positional_acceptance_meets_the_stars_enumeration():
    """``a_i`` along i.i.d. contexts against :func:`~speculab.methods.rrs.star_acceptance` (every child tuple)."""
    from speculab.methods.rrs import star_acceptance

    p, q, pair = _iid_pair(3)
    for draws in ("iid", "distinct"):
        rng = torch.Generator().manual_seed(1)
        a = rank_acceptance_along(pair, [[0]] * 1000, 3, sampling=Sampling(1.0), draws=draws, rng=rng)
        exact = star_acceptance(np.tile(p, (4, 1)), np.tile(q, (4, 1)), 3, draws)[0]
        se = np.sqrt(exact * (1 - exact) / 1000)  # at most the Bernoulli's: the estimator is its conditional mean
        assert np.all(np.abs(a - exact) < Z_BOUND * se), (draws, a, exact)


def test_the_shape_search_finds_the_exact_best_and_evaluates_sequoias_pick(monkeypatch):
    """Two nodes on an i.i.d. pair: the chain and the star of two, whose exact values differ by many standard
    errors; the search keeps the better, and Sequoia's pick is evaluated beside it — both values from trees drafted
    after the search (the search's own maximum is biased up)."""
    import speculab.planning.trees as trees

    made = []
    real = trees.tree_yield
    monkeypatch.setattr(trees, "tree_yield", lambda *a, **k: made.append((a[1].tree, real(*a, **k))) or made[-1][1])
    p, q, pair = _iid_pair(1)
    exact = {t: exact_tree_tokens(RRS(t, draws="distinct"), p, q) for t in (Tree((0, 1)), Tree((0, 0)))}
    rng = torch.Generator().manual_seed(2)
    rows = best_shapes(
        pair,
        lambda t: RRS(t, draws="distinct"),
        [[0]] * 1000,
        [2, 6],
        np.array([0.5, 0.2]),
        sampling=Sampling(1.0),
        rng=rng,
    )
    best = max(exact, key=exact.get)
    assert rows[0]["exact"] == best and abs(exact[Tree((0, 1))] - exact[Tree((0, 0))]) > 0.1
    searched, fresh = made[:2], {tree: y for tree, y in made[2:]}  # two shapes of two nodes, then the fresh draws
    assert rows[0]["exact_tokens"] == fresh[best].tokens != dict(searched)[best].tokens
    # both re-estimated on fresh trees: the winner's value is not the search's maximum, and meets the enumeration
    assert abs(rows[0]["exact_tokens"] - exact[best]) < Z_BOUND * rows[0]["exact_se"]
    seq = rows[0]["sequoia"]
    assert abs(rows[0]["sequoia_tokens"] - exact[seq]) < Z_BOUND * rows[0]["sequoia_se"]
    assert rows[1]["exact"] is None and rows[1]["sequoia"].size <= 6  # past the exact search: the program only


def test_a_tree_rounds_draft_is_priced_level_by_level():
    """Widths (2, 1), every draft kept, 3 tokens: one round of two levels — a catch-up call, one call feeding the
    two nodes of depth 1 — and one target call of the four nodes and a token (the prefill, priced per run); per
    round, per node and per level the tree's own overhead, and per node drawn without replacement for distinct
    siblings only."""
    m = _model(per_round=1e-4)
    outcome = np.zeros((3, 3))
    outcome[0, 0] = outcome[1, 1] = outcome[2, 2] = 1.0
    drafted = np.array([0.0, 2.0, 4.0])
    extra = TreeOverhead(0.002, 0.0003, 0.0005, 0.0007)
    draft = m.draft(1) + m.draft(2)
    iid = run_cost(m, RRS((2, 1), draws="iid"), outcome, drafted, 3, extra)
    assert iid.calls == 1
    assert iid.seconds == pytest.approx(draft + 1e-4 + 0.002 + 4 * 0.0003 + 2 * 0.0005, rel=1e-12)
    for distinct in (RRS((2, 1), draws="distinct"), Traversal((2, 1), draws="distinct")):
        cost = run_cost(m, distinct, outcome, drafted, 3, extra)
        assert cost.seconds == pytest.approx(iid.seconds + 4 * 0.0007, rel=1e-12)
    chain = run_cost(m, SD(K=2), outcome, np.array([0.0, 1.0, 2.0]), 3, extra)  # no tree: no overhead
    assert chain.seconds == pytest.approx(2 * m.draft(1) + 1e-4, rel=1e-12)


def test_the_tree_overhead_is_recovered_from_runs_it_was_put_into():
    """Runs timed by hand as the chain model prices them — RRS on a (2, 2) tree: a round of 6 nodes feeds the draft
    the catch-up then the 2 nodes of level 1, one of 2 nodes the catch-up alone; a star of 3 the catch-up alone; a
    round that kept every level and is followed by another makes the next one's catch-up two tokens — plus 2 ms per
    round, 0.3 ms per node, 0.5 ms per level and 0.2 ms per node drawn without replacement: the fit gives the four
    back (with the two-token catch-ups left in the overhead, it did not; with the (2, 2) tree alone, rounds of two
    kinds cannot tell the costs apart, nor trees drawn one way alone the cost of drawing distinct)."""
    from types import SimpleNamespace

    m = _model(per_round=1e-4, per_token=2e-5, per_drafting_round=3e-4)
    timed = []
    runs = [
        (RRS((2, 2), draws="distinct"), [6, 6, 2], [2, 1, 1]),
        (RRS((2, 2), draws="distinct"), [6, 2], [2, 0]),
        (RRS((2, 2), draws="iid"), [6, 6, 6, 6], [2, 2, 0, 2]),
        (RRS((3,), draws="iid"), [3, 3, 3], [1, 0, 1]),
    ]
    for method, made, kept in runs:
        counts = SimpleNamespace(
            oracle_calls=np.array([len(made)]), draft_calls=np.array([sum(made)]), tokens=np.array([3 * len(made)])
        )
        clock = 0.0
        for i, (k, a) in enumerate(zip(made, kept)):
            levels = 2 if k == 6 else 1
            clock += float(m.draft(1)) + (float(m.draft(2)) if levels == 2 else 0.0) + float(m.target(k + 1))
            if a == levels and i < len(made) - 1:
                clock += float(m.draft(2)) - float(m.draft(1))
            clock += 0.002 + k * 3e-4 + levels * 5e-4 + k * 2e-4 * (method.draws == "distinct")  # the overhead put in
        clock -= float(m.target(made[0] + 1))  # the prefill: a cost of the run
        clock += len(made) * (1e-4 + 3e-4) + 3 * len(made) * 2e-5
        result = SimpleNamespace(
            counts=counts, rounds=[SimpleNamespace(drafted=np.array(made), accepted=np.array(kept))]
        )
        timed.append((method, SimpleNamespace(result=result, seconds=np.array([clock]))))
    fit = fit_tree_overhead(m, timed)
    assert fit == pytest.approx((0.002, 3e-4, 5e-4, 2e-4), rel=1e-9), fit


@pytest.mark.slow
def test_plan_ranks_confirms_and_draws_token_trees(tmp_path, capsys):
    """The command with trees, small: tree candidates ranked with their nodes, the shape comparison in the JSON and
    the table, the figure's tree panel, the report's page; the progress display's two tree parts."""
    argv = ["plan", "--k", "1", "--prompts", "2", "--per-prompt", "4", "--confirm", "1", "--max-new-tokens", "8"]
    assert main([*argv, "--max-nodes", "4", "--out", str(tmp_path)]) == 0
    text, err = capsys.readouterr()
    parts = progress_parts(err, "planning")  # two parts more: the shape search and the trees' rounds
    assert sorted(parts) == [1, 2, 3, 4, 5] and all(p[0] == p[1] and p[2] == 5 for p in parts.values()), err
    assert parts[3][1] == 2 + (2 + 1) + (5 + 1) + (14 + 1), err  # 2 acceptances; Catalan(n) shapes and a fresh look
    plan = json.loads((tmp_path / "plan.json").read_text())
    trees = [r for r in plan["ranked"] if r["tree"]]
    assert trees and all(1 < r["nodes"] <= 4 and r["K"] == 0 for r in trees)
    assert {r["method"].split("(")[0] for r in trees} >= {"RRS", "Traversal"}
    assert [s["nodes"] for s in plan["shapes"]] == [2, 3, 4] and all(s["exact"] for s in plan["shapes"])
    assert "tree shapes, RRS without replacement" in text and "Sequoia" in text
    assert all(plan["latency"][f"tree_per_{x}"] >= 0 for x in ("round", "node", "level", "distinct_node"))
    assert plan["settings"]["max_nodes"] == 4
    assert trees[0]["method"] in {r["method"] for r in plan["confirmed"]}  # the best tree is always confirmed
    from speculab.repro.report import build_report

    assert "plan: the best configuration" in build_report(tmp_path).read_text()


def test_a_shorter_cut_of_a_tree_reads_the_taller_ones_drafted_trees(monkeypatch):
    """Batch SD's 3 chains of 2 and of 3 tokens: the trees are drafted once, for the taller, and the shorter's rounds
    are exactly the taller's cut to two levels."""
    import speculab.planning.trees as trees

    _, _, pair = _iid_pair(1)
    calls = []
    real = trees.tree_laws
    monkeypatch.setattr(trees, "tree_laws", lambda *a, **k: calls.append(a[2]) or real(*a, **k))
    tall, short = RRS((3, 1, 1), draws="iid"), RRS((3, 1), draws="iid")
    ys = trees.tree_yields(
        pair, [short, tall], [[0]] * 50, sampling=Sampling(1.0), rng=torch.Generator().manual_seed(0)
    )
    assert calls == [tall.tree] * 50
    assert np.array_equal(ys[0].outcome, ys[1].outcome[:, :3, :3]) and np.array_equal(
        ys[0].drafted, ys[1].drafted[:, :3]
    )


def test_batch_sd_is_ranked_as_chains_from_the_root_within_the_node_budget():
    from speculab.planning.command import label
    from speculab.planning.plan import MAX_DRAFTS, batch_trees

    trees = batch_trees([1, 2, 8], 16)
    widths = {m.tree.widths for m in trees}
    assert all(m.draws == "iid" for m in trees)
    assert (2,) + (1,) * 7 in widths and (3,) + (1,) * 7 not in widths  # 24 nodes: past the budget
    assert {(M,) for M in range(2, MAX_DRAFTS + 1)} <= widths and (8, 1) in widths and (9,) not in widths
    assert label(repr(RRS((3, 1), draws="iid"))) == "RRS(3,1; iid) = BatchSD(M=3, K=2)"
    assert label(repr(RRS((3, 1), draws="distinct"))) == "RRS(3,1; distinct)"  # distinct drafts: not batch SD


@pytest.mark.slow
def test_a_plan_whose_trees_are_all_chains_runs_one_part_fewer_and_says_so(tmp_path, capsys):
    """Greedy decoding at K = 2 with trees of 2 nodes: every shape searched is the chain of two (a second-ranked
    token is never the target's), so no tree is ranked and there is no part of tree rounds; the confirmations, the
    last part, are numbered of the parts that ran."""
    from speculab._progress import progress

    argv = ["plan", "--k", "2", "--prompts", "2", "--per-prompt", "2", "--confirm", "1", "--confirm-runs", "1"]
    err = io.StringIO()
    with progress("planning", stream=err, every=float("inf")):  # --json shows none: this one, around it, is shown
        assert main([*argv, "--max-new-tokens", "8", "--temperature", "0", "--max-nodes", "2", "--json"]) == 0
    assert not [r for r in json.loads(capsys.readouterr().out)["ranked"] if r["tree"]]
    parts = progress_parts(err.getvalue(), "planning")
    assert sorted(parts) == [1, 2, 3, 4] and all(p[0] == p[1] for p in parts.values()), err.getvalue()
    assert [parts[k][2] for k in (1, 2, 3, 4)] == [5, 5, 5, 4], err.getvalue()  # told, once known, at the last
