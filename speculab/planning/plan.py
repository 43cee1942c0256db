"""``plan``: every candidate configuration ranked by its predicted speed on a pair and a machine, then confirmed.

Three steps, each from this module's inputs only:

1. **Measure the machine** — timed runs of autoregressive decoding and SD at a few ``K`` on the calibration prompts
   (:data:`CALIBRATION_RUNS` runs each) fit the latency model (:func:`speculab.backends.latency.fit_latency`: each
   model's forward time per tokens fed, the loop's costs).
2. **Predict** — each candidate's round along the pair's own contexts (:mod:`speculab.planning.yields`: the exact
   round law averaged over drafted blocks, with its standard error), priced by the fitted model
   (:mod:`speculab.planning.cost`), ranked by predicted tokens per second. Lossy rules enter only within the bias
   budget (their per-token TV, from their round law).
3. **Confirm** — the best few, two references (autoregressive, SD with ``K = 4``) and the best token tree decoded
   for real on held-out prompts, one at a time, timed (the methods taking turns prompt by prompt, as in step 1, so a
   drifting machine slows them alike): predicted against measured tokens per second and per target call. The two
   references are ranked whatever the lookaheads asked for.

Candidates: autoregressive decoding; SD, greedy drafts (the rule engines default to) and block verification at each
``K``; with a bias budget, Decoding-OPT (``Biased``, [Yin] §4.2: on the Pareto line of rejections against bias, Thm 5)
at a grid of ``ε`` and typical acceptance at Medusa's defaults; token trees up to ``max_nodes`` nodes — RRS with and
without replacement and traversal verification on the shapes of :func:`tree_candidates`, and batch SD's ``M``
drafts as trees of ``M`` chains (:func:`batch_trees`), their rounds from :mod:`speculab.planning.trees`, a tree
round's own cost fitted on four timed trees (:func:`calibration_trees`). Batch SD's ``M`` rows of a batch are a
forward pass the latency model does not price: its drafts are priced and decoded as the tree they are.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np
import torch

from speculab._progress import advance, expect, held
from speculab._validate import as_positive_int
from speculab.counts import Estimate
from speculab.planning.cost import RunCost, TreeOverhead, fit_tree_overhead, run_cost
from speculab.planning.trees import tree_yields
from speculab.planning.yields import Yield, contexts, round_yields

__all__ = ["Candidate", "Confirmation", "Plan", "candidates", "plan", "EPSILONS", "CALIBRATION_K"]

#: Decoding-OPT's over-acceptance ``ε`` among the lossy candidates: ``b = min(1, (q + ε)/p)`` adds ``ε`` to every
#: token's probability, so at a real vocabulary a small ``ε`` already accepts almost every draft.
EPSILONS = (0.0003, 0.001, 0.003, 0.01)
#: The lookaheads of SD timed to fit the latency model (with autoregressive decoding).
CALIBRATION_K = (1, 2, 4, 8)
#: Runs of each calibration prompt per timed method (each with its own seed): the fit's timing noise, a few per cent
#: with one run of each of 16 prompts, is what the confirmation's 10 % reads against.
CALIBRATION_RUNS = 2
#: Node budgets at which token trees are shaped (Sequoia's program, and exact search where small), up to ``max_nodes``.
NODE_BUDGETS = (2, 3, 4, 6, 8, 12, 16)
#: The largest ``max_nodes``.
MAX_NODES = 32
#: Children per node of the star whose round law estimates the positional acceptance.
STAR = 4
#: The most drafts of batch SD ranked (``M``), as trees of ``M`` chains (:func:`batch_trees`).
MAX_DRAFTS = 8
#: Contexts per prompt (its first ones) along which each token tree's round is computed: a tree round costs a forward
#: call per level and model, so fewer than a chain's, still over every prompt.
TREE_CONTEXTS = 4


def candidates(ks, bias_budget: float) -> list:
    """The methods ranked (module docstring): autoregressive first, then each rule at each ``K`` of ``ks`` (block
    verification from ``K = 2``: with one draft it is token verification, SD's own round law)."""
    from speculab.methods import SD, Autoregressive, Biased, BlockVerification, GreedyDraft, Typical

    out = [Autoregressive()]
    for K in ks:
        out += [SD(K=K), GreedyDraft(K=K)] + ([BlockVerification(K=K)] if K > 1 else [])
        if bias_budget > 0:
            out += [Biased(eps, K=K) for eps in EPSILONS]
            out.append(Typical(0.09, 0.3, K=K))  # Medusa's posterior_threshold and posterior_alpha
    return out


@dataclass(frozen=True)
class Candidate:
    """A ranked candidate: the method, its rounds (:class:`~speculab.planning.yields.Yield`), the predicted cost of
    a run (:class:`~speculab.planning.cost.RunCost`), the standard errors of its tokens per round and per second
    over the sample of prompts (the means of each prompt's contexts: contexts of one prompt are not independent),
    and whether it is within the bias budget."""

    method: object
    round: Yield
    cost: RunCost
    round_se: float
    se: float
    allowed: bool
    call_se: float = math.nan

    @property
    def tokens_per_second(self) -> float:
        return self.cost.tokens_per_second

    @property
    def K(self) -> int:
        """Drafts per round of a chain (0: autoregressive decoding or a tree)."""
        return 0 if self.tree is not None else getattr(self.method, "K", 0) or 0

    @property
    def tree(self):
        """The drafted tree of a tree verifier, else ``None``."""
        return getattr(self.method, "tree", None)


@dataclass(frozen=True)
class Confirmation:
    """A candidate decoded on held-out prompts: predicted and measured tokens per second (the measured one a ratio of
    sums, its standard error over the held-out prompts), per target call, and the speed-up over autoregressive
    decoding."""

    method: str
    predicted: float
    predicted_se: float
    measured: float
    measured_se: float
    predicted_per_call: float
    measured_per_call: float
    runs: int
    predicted_speedup: float = math.nan
    measured_speedup: float = math.nan
    predicted_per_call_se: float = math.nan
    measured_per_call_se: float = math.nan

    @property
    def per_call_z(self) -> float:
        """``(measured − predicted) / √(se² + se²)`` of the tokens per target call: the prediction's error in
        standard errors of the prompts sampled on both sides."""
        se = math.hypot(self.predicted_per_call_se, self.measured_per_call_se)
        return (self.measured_per_call - self.predicted_per_call) / se if se > 0 else math.nan

    @property
    def error(self) -> float:
        """``predicted / measured − 1`` of the tokens per second."""
        return self.predicted / self.measured - 1.0

    @property
    def speedup_error(self) -> float:
        """``predicted / measured − 1`` of the speed-up over autoregressive decoding (timed alongside: a machine
        whose speed drifted between the fit and the confirmation moves both rates, not their ratio)."""
        return self.predicted_speedup / self.measured_speedup - 1.0


@dataclass
class Plan:
    """What :func:`plan` found: its settings, the latency model, every candidate (best first), the confirmations."""

    settings: dict
    latency: object
    ranked: list = field(default_factory=list)
    confirmed: list = field(default_factory=list)
    shapes: list = field(default_factory=list)  # per node budget: Sequoia's tree beside the exact best
    tree_overhead: TreeOverhead = TreeOverhead()  # a tree round's cost beyond the chain's latency model
    engine: list = field(default_factory=list)  # an engine's configurations (:mod:`speculab.planning.engine`)

    @property
    def best(self) -> Candidate:
        return next(c for c in self.ranked if c.allowed)

    def verdict(self) -> str:
        """Whether the predicted best among the confirmed was the measured best, within the timing noise (two
        standard errors of the difference)."""
        rows = self.confirmed
        if len(rows) < 2:
            return "nothing to compare"
        by_pred = max(rows, key=lambda r: r.predicted)
        by_meas = max(rows, key=lambda r: r.measured)
        if by_pred is by_meas:
            return f"the predicted best, {by_pred.method}, was the measured best"
        gap = by_meas.measured - by_pred.measured
        noise = 2 * math.hypot(by_meas.measured_se, by_pred.measured_se)
        within = "within" if gap <= noise else "beyond"
        return (
            f"the predicted best, {by_pred.method}, measured {gap / by_meas.measured:.1%} below the measured best, "
            f"{by_meas.method} ({within} two standard errors of the timing noise)"
        )


def busy(load: float, cpus: int) -> bool:
    """Whether a 1-minute load average ``load`` on ``cpus`` CPUs makes the timings noisy: above half the CPUs (a
    plan's own decoding, on one thread or two, loads about one)."""
    return load > cpus / 2


def plan(
    pair,
    *,
    prompts: list[list[int]],
    held_out: list[list[int]],
    sampling,
    key,
    ks=range(1, 9),
    bias_budget: float = 0.0,
    max_new_tokens: int = 32,
    per_prompt: int = 16,
    confirm: int = 3,
    confirm_runs: int = 6,
    max_nodes: int = 16,
    say=None,
) -> Plan:
    """Rank every candidate for ``pair`` on this machine and confirm the best ``confirm`` (module docstring).

    Args:
      prompts: token ids of the prompts whose contexts and timings fit the prediction.
      held_out: token ids of the prompts the confirmations decode.
      sampling: the :class:`~speculab.backends.Sampling` decoded with.
      key: an int seed; the contexts, the blocks and every decoding draw from seeds derived from it.
      ks: the lookaheads ``K`` of the candidates.
      bias_budget: the largest per-token TV from the target's law a lossy candidate may have (0: lossless only).
      max_new_tokens: tokens per run, in the timings and the confirmations (the speed predicted is of such runs).
      per_prompt: contexts per prompt at which each candidate's round is computed.
      confirm: how many of the best candidates to decode for real (0: none).
      confirm_runs: runs of each held-out prompt per confirmed candidate (each with its own seed).
      max_nodes: the largest token tree ranked (0: no trees; :func:`tree_candidates`).
      say: called with a line for the user before anything is timed, when the machine is :func:`busy` (``None``:
        not said; the plan's settings record the load either way).
    """
    from speculab._validate import spawn_seeds
    from speculab.backends.decode import encode_prompts
    from speculab.backends.latency import fit_latency, timed_decode
    from speculab.backends.pair import check_pair
    from speculab.methods import SD, Autoregressive

    check_pair(pair)
    for what, group in (("prompt", prompts), ("held-out prompt", held_out)):  # each fits, before anything is timed
        encode_prompts(pair, group, max_new_tokens, what=what)
    ks = list(ks)
    if not ks or any(isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= 16 for k in ks):
        raise ValueError(f"ks must be integers in 1..16; got {ks!r}")
    if not (isinstance(bias_budget, (int, float)) and 0 <= bias_budget <= 1):
        raise ValueError(f"bias_budget must be a TV in [0, 1]; got {bias_budget!r}")
    if isinstance(max_nodes, bool) or not isinstance(max_nodes, int) or max_nodes not in (0, *range(2, MAX_NODES + 1)):
        raise ValueError(f"max_nodes must be 0 (no trees) or an integer in 2..{MAX_NODES}; got {max_nodes!r}")
    as_positive_int(confirm_runs, "confirm_runs")
    import os

    load_at_start = os.getloadavg()[0]
    cpus, threads = os.cpu_count() or 1, torch.get_num_threads()
    if say is not None and busy(load_at_start, cpus):
        advice = "; give --threads at most the idle cores" if threads > 1 else ""
        say(
            f"note: the machine is busy (load average {load_at_start:.1f} on {cpus} CPUs, torch on "
            f"{_plural(threads, 'thread')}): the times will be noisy and the predictions with them{advice}"
        )
    no_trees = _no_trees(pair) if max_nodes else None  # asked for, but the pair cannot decode them: why
    if no_trees:
        max_nodes = 0
    seeds = spawn_seeds(key, 5)
    chains = [Autoregressive(), *(SD(K=k) for k in CALIBRATION_K)]
    calibration = chains + (list(calibration_trees()) if max_nodes else [])
    parts = 2 + 2 * bool(max_nodes) + bool(confirm)  # timings, chain rounds, tree shapes and rounds, confirmations
    runs = len(prompts) * CALIBRATION_RUNS
    what = f"timing the models: {len(calibration)} methods on {len(prompts)} prompts × {CALIBRATION_RUNS} runs"
    expect(1 + runs * len(calibration), what, unit="decode", parts=parts)
    with held():
        timed_decode(pair, prompts[:1], SD(K=2), max_new_tokens=8, key=seeds[0])  # warm-up: first calls cost more
    advance(1)
    timed = _interleaved(pair, prompts * CALIBRATION_RUNS, calibration, max_new_tokens, seeds[0])
    latency = fit_latency([run for runs in timed[: len(chains)] for run in runs])
    overhead = fit_tree_overhead(
        latency, [(m, r) for m, runs in zip(calibration[len(chains) :], timed[len(chains) :]) for r in runs]
    )
    with held():  # a decode of the prompts, short beside the parts around it: not counted
        ctxs = contexts(pair, prompts, sampling=sampling, length=max_new_tokens, per_prompt=per_prompt, key=seeds[1])
    methods = candidates(ks, bias_budget)
    references = (Autoregressive(), SD(K=4))
    methods += [r for r in references if r not in methods]  # ranked whatever ks is: the confirmations' yardsticks
    yields = round_yields(pair, methods, ctxs, sampling=sampling, key=seeds[2])
    shapes: list = []
    if max_nodes:
        few = [c for i, c in enumerate(ctxs) if i % per_prompt < TREE_CONTEXTS]  # each prompt's first contexts
        trees, shapes = tree_candidates(pair, few, max_nodes, sampling=sampling, key=seeds[4], ks=ks)
        rng = torch.Generator().manual_seed(int(spawn_seeds(seeds[4], 2)[1]))
        if trees:  # (every tree left was a chain: no part of tree rounds, and one part fewer)
            yields += tree_yields(pair, trees, few, sampling=sampling, rng=rng)
        else:
            parts -= 1
        methods += trees
    ranked = []
    for m, y in zip(methods, yields):
        cost = _cost(latency, m, y, max_new_tokens, overhead)
        block = y.contexts // len(prompts)  # each prompt's contexts (fewer for a tree)
        by_prompt = [y.subset(np.arange(i, i + block)) for i in range(0, y.contexts, block)]
        costs = [_cost(latency, m, b, max_new_tokens, overhead) for b in by_prompt]
        ranked.append(
            Candidate(
                m,
                y,
                cost,
                _se([b.tokens for b in by_prompt]),
                _se([c.tokens_per_second for c in costs]),
                y.bias <= bias_budget,
                _se([c.tokens_per_call for c in costs]),
            )
        )
    ranked.sort(key=lambda c: -c.tokens_per_second)
    result = Plan(
        {
            "pair": pair.name,
            "device": str(pair.device),
            "dtype": str(next(pair.target.model.parameters()).dtype).removeprefix("torch."),
            "sampling": {"temperature": sampling.temperature, "top_k": sampling.top_k, "top_p": sampling.top_p},
            "ks": ks,
            "bias_budget": bias_budget,
            "max_new_tokens": max_new_tokens,
            "prompts": len(prompts),
            "held_out": len(held_out),
            "confirm_runs": confirm_runs,
            "contexts": len(ctxs),
            "key": key,
            "max_nodes": max_nodes,
            "no_trees": no_trees,
            "threads": threads,
            "cpus": cpus,
            "load_at_start": load_at_start,
        },
        latency,
    )
    result.ranked = ranked
    result.shapes = shapes
    result.tree_overhead = overhead
    if confirm:
        chosen = [c for c in ranked if c.allowed][:confirm]
        for ref in references:
            if all(c.method != ref for c in chosen):
                chosen.append(next(c for c in ranked if c.method == ref))
        tree = next((c for c in ranked if c.tree is not None and c.allowed), None)
        if tree is not None and tree not in chosen:  # the best tree too: the tree cost model is checked every run
            chosen.append(tree)
        runs = [ids for _ in range(confirm_runs) for ids in held_out]
        what = f"confirming {len(chosen)} candidates on {len(held_out)} held-out prompts"
        what += f", {_plural(confirm_runs, 'run')} each"
        expect(len(runs) * len(chosen), what, unit="decode", parts=parts)
        measured = _interleaved(pair, runs, [c.method for c in chosen], max_new_tokens, seeds[3])
        for c, runs in zip(chosen, measured):
            tokens = summed_by_prompt([r.result.counts.tokens.sum() for r in runs], len(held_out))
            seconds = summed_by_prompt([r.seconds.sum() for r in runs], len(held_out))
            calls = summed_by_prompt([r.result.counts.oracle_calls.sum() for r in runs], len(held_out))
            rate, per_call = Estimate.ratio(tokens, seconds), Estimate.ratio(tokens, calls)
            result.confirmed.append(
                Confirmation(
                    repr(c.method),
                    c.tokens_per_second,
                    c.se,
                    rate.mean,
                    rate.se,
                    c.cost.tokens_per_call,
                    per_call.mean,
                    len(runs),
                    predicted_per_call_se=c.call_se,
                    measured_per_call_se=per_call.se,
                )
            )
        result.settings["load_at_end"] = os.getloadavg()[0]
        result.confirmed = with_speedups(result.confirmed)
    return result


def with_speedups(rows: list[Confirmation]) -> list[Confirmation]:
    """``rows`` with their speed-ups: each one's predicted and measured rates over those of the row of
    autoregressive decoding (which ``rows`` must hold; ``speculab report`` checks a plan's by this too)."""
    from speculab.methods import Autoregressive

    ar = next((r for r in rows if r.method == repr(Autoregressive())), None)
    if ar is None:
        raise ValueError("rows: no row of autoregressive decoding, the speed-ups' reference")
    return [
        dataclasses.replace(r, predicted_speedup=r.predicted / ar.predicted, measured_speedup=r.measured / ar.measured)
        for r in rows
    ]


def _plural(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _no_trees(pair) -> str | None:
    """Why token trees cannot be decoded on ``pair`` (:func:`~speculab.backends.tree_decode.check_tree_pair`), or
    ``None``."""
    from speculab.backends.tree_decode import check_tree_pair

    try:
        check_tree_pair(calibration_trees()[0], pair)
    except ValueError as err:
        return str(err)
    return None


def calibration_trees() -> tuple:
    """The trees timed beside the chains to fit a tree round's own cost (:func:`~speculab.planning.cost.
    fit_tree_overhead`): RRS without replacement on 4 nodes in two levels and 14 in three, and with replacement on a
    star of 3 (one level: batch SD's single drafts) and on 4 nodes in two levels — four trees to tell its cost per
    round, per node, per level and per node drawn without replacement apart."""
    from speculab.methods import RRS

    return (
        RRS((2, 1), draws="distinct"),
        RRS((2, 2, 2), draws="distinct"),
        RRS((3,), draws="iid"),
        RRS((2, 1), draws="iid"),
    )


def batch_trees(ks, max_nodes: int) -> list:
    """Batch SD's rounds as trees: ``M`` = 2..:data:`MAX_DRAFTS` i.i.d. drafts of ``K`` tokens each (``K`` in ``ks``,
    ``M·K`` nodes at most ``max_nodes``) are RRS with replacement on ``M`` chains from the root, [Yin] Algorithm 4 —
    batch SD's own round law (``tests/test_trees.py::test_rrs_at_a_root_of_chains_is_batch_sd``), its ``M`` drafts
    verified in one call of ``M·K + 1`` tokens under tree attention rather than as ``M`` rows."""
    from speculab.methods import RRS

    return [
        RRS((M,) + (1,) * (K - 1), draws="iid")
        for M in range(2, MAX_DRAFTS + 1)
        for K in sorted(ks)
        if M * K <= max_nodes
    ]


def tree_candidates(pair, ctxs, max_nodes: int, *, sampling, key, ks=()) -> tuple[list, list]:
    """The token trees ranked, and the shape comparison (:mod:`speculab.planning.trees`): at each node budget of
    :data:`NODE_BUDGETS` up to ``max_nodes``, Sequoia's tree under the positional acceptance of RRS with and without
    replacement (estimated along ``ctxs``) verified by RRS that way, and the
    without-replacement tree by traversal verification; where every shape of the budget is evaluated (at most
    :data:`~speculab.planning.trees.EXACT_NODES` nodes), the exact best too; and batch SD's ``M`` drafts at each ``K``
    of ``ks`` (:func:`batch_trees`). Chains are left out (SD and block verification are ranked at every ``K``)."""
    from speculab._validate import spawn_seeds
    from speculab.methods import RRS, Traversal
    from speculab.methods.tree_shapes import sequoia_tree
    from speculab.planning.trees import EXACT_NODES, best_shapes, rank_acceptance_along, search_size

    rng = torch.Generator().manual_seed(int(spawn_seeds(key, 2)[0]))
    budgets = [n for n in NODE_BUDGETS if n <= max_nodes]
    searched = [n for n in budgets if n <= EXACT_NODES]
    every = ", ".join(map(str, searched))
    what = f"the best tree shapes: every shape of {every} nodes, Sequoia's to {budgets[-1]}"
    expect(2 + search_size(budgets), what, unit="tree")  # the two acceptances, then the search
    few = ctxs
    out, shapes = [], []
    for draws in ("distinct", "iid"):
        acceptance = rank_acceptance_along(pair, few, STAR, sampling=sampling, draws=draws, rng=rng)
        advance(1)
        for n in budgets:
            tree = sequoia_tree(acceptance, n).tree
            out.append(RRS(tree, draws=draws))
            if draws == "distinct":
                out.append(Traversal(tree, draws=draws))
        if draws == "distinct":  # the exact search, beside the program, for one verifier
            rows = best_shapes(
                pair, lambda t: RRS(t, draws="distinct"), few, budgets, acceptance, sampling=sampling, rng=rng
            )
            for row in rows:
                if row["exact"] is not None:
                    out += [RRS(row["exact"], draws="distinct"), Traversal(row["exact"], draws="distinct")]
                shapes.append({**row, "draws": draws, "sequoia": str(row["sequoia"]), "exact": _text(row["exact"])})
    out += batch_trees(ks, max_nodes)
    unique = []
    for m in out:
        if m not in unique and any(len(c) > 1 for c in m.tree.children):
            unique.append(m)
    return unique, shapes


def _text(tree) -> str | None:
    return None if tree is None else str(tree)


def _interleaved(pair, prompts, methods, N: int, key) -> list[list]:
    """Each method timed on each prompt (:func:`~speculab.backends.latency.timed_decode`), the methods taking
    turns prompt by prompt, so that a machine whose speed drifts (other work, clocks) slows them alike: per method,
    one :class:`~speculab.backends.latency.TimedRuns` per prompt. A prompt's runs share its seed. Each decode
    advances the open progress display by one (:mod:`speculab._progress`)."""
    from speculab._validate import spawn_seeds
    from speculab.backends.latency import timed_decode

    out: list[list] = [[] for _ in methods]
    for prompt, seed in zip(prompts, spawn_seeds(key, len(prompts))):
        for runs, m in zip(out, methods):
            with held():
                runs.append(timed_decode(pair, [prompt], m, max_new_tokens=N, key=seed))
            advance(1)
    return out


def _cost(latency, method, y: Yield, N: int, tree: TreeOverhead = TreeOverhead()) -> RunCost:
    """The predicted cost of a run of ``N`` tokens with the rounds of ``y`` averaged over its contexts."""
    return run_cost(latency, method, y.outcome.mean(axis=0), y.drafted.mean(axis=0), N, tree)


def summed_by_prompt(values, prompts: int) -> np.ndarray:
    """Per-run ``values`` of runs made prompt after prompt, ``prompts`` at a time (run ``i`` decodes prompt
    ``i mod prompts``), summed per prompt: the runs of one prompt share it, so the prompts are the independent
    units of a standard error (:meth:`Estimate.ratio <speculab.counts.Estimate.ratio>`)."""
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 1 or prompts < 1 or values.size % prompts:
        raise ValueError(f"{values.size} runs are not whole rounds of {prompts} prompts")
    return values.reshape(-1, prompts).sum(axis=0)


def _se(values) -> float:
    """The standard error of the mean of the per-prompt ``values`` (NaN with one prompt)."""
    return Estimate.of(values).se
