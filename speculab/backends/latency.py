r"""The latency model held against the clock: forward times fitted on real runs, time per token predicted from counts.

Convention: ``p`` = draft, ``q`` = target. [SDpp] §5.2 fits ``t_draft`` and ``t_target`` by
linear regression of each generation's wall time on its ``(N_draft, N_target)`` and
predicts time per token with eq. (5.1). A per-generation regression cannot tell a
target call's fixed cost from its cost per verified token (with one draft row the
verified tokens are ``N_draft + N_target``, a sum of the other two columns), so here
every forward call is timed (:func:`timed_decode`) and each model's time is measured
against the tokens it was fed: ``t(k)`` is the mean time of the calls of ``k`` tokens
seen (often enough) in the fitting runs, linear between the sizes seen and, beyond them, along the
least-squares line ``base + per_token · k`` (reported with its ``R²``). A table rather
than a line, because a forward pass is not affine in ``k``: on a CPU the step from one
token to two (where, among other things, a causal mask is first needed) costs several
tokens' worth of the slope beyond (``benchmarks/bench_latency.py`` prints the table), so a line through all
calls misprices autoregressive decoding, whose calls are all of one token, against SD,
whose calls are of ``K + 1``. A prompt's first
call to each model (the prefill) is left out of ``t(k)``: it is a cost of the run.
What the clock shows beyond the forward passes — sampling, the round law, records,
the prefills, set-up — is fitted per round, per drafted token (the round law and the
laws kept per slot grow with the block), per output token, per run, per run that
drafts (the draft's prefill), and per round of a run that drafts (a round that verifies drafts computes their round
law, an autoregressive round does not: priced alike, the fit makes autoregressive decoding too slow and every
speed-up over it too large) on the same runs (non-negative least squares: a cost
cannot be negative); a term the runs cannot tell from the others is left out and named
in ``LatencyModel.unidentified`` (runs all of one length cannot separate the cost per
output token from the cost per run). Then the time of a run of one prompt is

.. math:: T \approx (N_{draft} - N_2)\, t_d(1) + N_2\, t_d(2) + \sum_{\text{rounds } r > 1} t_t(L_r + 1)
          + N_{target}\, c_{round} + N_{draft}\, c_{draft} + N\, c_{token} + c_{run}
          + [N_{draft} > 0]\, (c_{drafting} + N_{target}\, c_{drafting\ round})

(a round of ``L_r`` drafts makes ``L_r`` draft calls of one token — its first is the
catch-up of the previous round's new tokens, two after a bonus: ``N_2`` such calls, one per
fully accepted round that another round follows — and one target call of ``L_r + 1``
tokens; the first round's target call, the prefill, is in ``c_run``). Given
only counts, every round is taken to draft the mean block ``L̄ = N_draft / N_target``.
The predicted speed-up of a method over autoregressive decoding is the ratio of
predicted times per token. The model describes one sequence decoded at a time
(``batch_size=1``, one draft row: batch SD's ``M`` rows are not priced), the setting of
[SDpp] and of the theory's counts.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
from scipy.optimize import nnls

from speculab.backends.decode import DecodeResult, decode
from speculab.backends.journal import unrecorded
from speculab.backends.pair import ModelPair, check_pair

__all__ = ["ForwardFit", "LatencyModel", "TimedRuns", "SpeedCheck", "timed_decode", "fit_latency", "speed_check"]


@dataclass(frozen=True)
class ForwardFit:
    """One model's forward time ``t(k)`` in seconds against the tokens fed ``k`` (prefills left out).

    ``t(k)`` is the mean time of the calls of ``k`` tokens where ``k`` lies among ``sizes``
    (those with at least :data:`MIN_CALLS` calls), linear between them, and along the least-squares line ``base +
    per_token · k`` (``R²``
    ``r2``) parallel-shifted to the nearest size beyond them.
    """

    base: float
    per_token: float
    r2: float
    calls: int
    sizes: tuple = ()
    means: tuple = ()

    def __call__(self, k):
        k = np.asarray(k, dtype=float)
        if not self.sizes:
            return self.base + self.per_token * k
        sizes, means = np.asarray(self.sizes, dtype=float), np.asarray(self.means, dtype=float)
        inside = np.interp(k, sizes, means)
        below = means[0] + self.per_token * (k - sizes[0])
        above = means[-1] + self.per_token * (k - sizes[-1])
        out = np.where(k < sizes[0], below, np.where(k > sizes[-1], above, inside))
        return float(out) if out.ndim == 0 else out


@dataclass(frozen=True)
class TimedRuns:
    """Runs of one method, one prompt at a time, with their clock: the result, each run's wall time and every
    forward call as ``(model, tokens fed, seconds, prefill)`` (model 0 = draft, 1 = target; ``prefill`` 1 for
    a run's first call to that model)."""

    result: DecodeResult
    seconds: np.ndarray
    calls: np.ndarray  # (n_calls, 4)

    @property
    def latency(self) -> float:
        """Measured seconds per generated token over all runs."""
        return float(self.seconds.sum() / self.result.counts.tokens.sum())


@contextmanager
def _timing(pair: ModelPair, log: list):
    """Record every ``extend`` call of both adapters (synchronised on CUDA) into ``log``."""
    originals = []
    for which, model in enumerate((pair.draft, pair.target)):
        original = model.extend

        def timed(state, ids, original=original, which=which, **kw):
            prefill = state.length == 0
            pair.synchronize()
            t0 = time.perf_counter()
            out = original(state, ids, **kw)
            pair.synchronize()
            log.append((which, ids.shape[-1], time.perf_counter() - t0, prefill))
            return out

        originals.append((model, original))
        model.extend = timed
    try:
        yield
    finally:
        for model, _ in originals:
            del model.extend  # the class's method again


def timed_decode(pair: ModelPair, prompts: list, method, *, max_new_tokens: int, key, **kwargs) -> TimedRuns:
    """Decode each prompt on its own (``batch_size=1``) with every forward call and each run timed.

    Each run starts with a history draft's memo empty (:meth:`HistoryModel.clear_cache
    <speculab.backends.models.HistoryModel.clear_cache>`): otherwise a repeat of the same
    runs would find every law memoised and time a different draft.
    """
    check_pair(pair)
    from speculab._validate import spawn_seeds
    from speculab.backends.decode import prompt_list

    prompts = prompt_list(prompts)

    results, seconds, log = [], [], []
    with _timing(pair, log), unrecorded():  # timings are measured: never replayed from a journal
        for prompt, seed in zip(prompts, spawn_seeds(key, len(prompts))):
            for model in (pair.draft, pair.target):
                getattr(model, "clear_cache", lambda: None)()
            t0 = time.perf_counter()
            results.append(
                decode(pair, [prompt], method, max_new_tokens=max_new_tokens, key=seed, batch_size=1, **kwargs)
            )
            seconds.append(time.perf_counter() - t0)
    counts = type(results[0].counts).concatenate([r.counts for r in results])
    merged = DecodeResult(
        [t for r in results for t in r.tokens],
        [t for r in results for t in r.texts],
        counts,
        [x for r in results for x in r.records],
        [x for r in results for x in r.rounds],
        float(sum(seconds)),
    )
    return TimedRuns(merged, np.asarray(seconds), np.asarray(log, dtype=float).reshape(-1, 4))


#: Fewest calls of one size for its mean to enter a :class:`ForwardFit`'s table (rarer sizes, e.g. blocks cut
#: short at the horizon, are read off the table's neighbours: one slow call among three is no mean).
MIN_CALLS = 20


def _fit_forward(k: np.ndarray, t: np.ndarray) -> ForwardFit:
    sizes, n = np.unique(k, return_counts=True)
    sizes = sizes[n >= MIN_CALLS] if np.any(n >= MIN_CALLS) else sizes[n == n.max()]
    means = tuple(float(t[k == s].mean()) for s in sizes)
    sizes = tuple(int(s) for s in sizes)
    if np.ptp(k) == 0:  # one call size only: no slope to fit
        return ForwardFit(float(t.mean()), 0.0, 0.0, int(t.size), sizes, means)
    X = np.stack([np.ones_like(k), k], axis=1)
    coef, *_ = np.linalg.lstsq(X, t, rcond=None)
    resid = t - X @ coef
    spread = float(((t - t.mean()) ** 2).sum())
    r2 = 1.0 - float(resid @ resid) / spread if t.size > 2 and spread > 0 else 0.0
    return ForwardFit(float(coef[0]), float(coef[1]), r2, int(t.size), sizes, means)


def _runs_rounds(counts, rounds) -> list[np.ndarray]:
    """Each run's drafted tokens per round (row 0), or ``L̄`` for every round when ``rounds`` is not given."""
    if rounds is not None:
        if len(rounds) != counts.n_runs:
            raise ValueError(f"rounds must hold one RoundRecord per run ({counts.n_runs}); got {len(rounds)}")
        return [np.asarray(r.drafted, dtype=float).reshape(len(r.drafted), -1)[:, 0] for r in rounds]
    return [np.full(int(r), d / r if r else 0.0) for d, r in zip(counts.draft_calls, counts.oracle_calls)]


def _two_token_catch_ups(counts, rounds, drafted: list[np.ndarray]) -> np.ndarray:
    """Each run's draft calls of two tokens: the catch-up of a fully accepted block's last draft and its bonus, made
    only when another round follows. From ``rounds``: every fully accepted round but the last (a fully accepted round
    that is not the last drew its bonus). From counts alone: one per bonus token — a run that ends on a bonus is
    then charged one two-token call too many (found by the exact-clock test of ``tests/test_latency.py``).
    ``drafted``: each run's drafts per round (:func:`_runs_rounds`)."""
    if rounds is None:
        return np.minimum(np.asarray(counts.bonus, dtype=float), np.asarray(counts.draft_calls, dtype=float))
    full = [(np.asarray(r.accepted)[:-1] == L[:-1]) & (L[:-1] > 0) for r, L in zip(rounds, drafted)]
    return np.array([float(f.sum()) for f in full])


@dataclass(frozen=True)
class LatencyModel:
    """Fitted forward times of both models and the loop's own time (module docstring).

    Attributes:
      draft, target: :class:`ForwardFit` of each model.
      per_round, per_draft, per_token, per_run, per_drafting_run, per_drafting_round: seconds of the decoding
        loop beyond forward passes, per round, per drafted token, per output token, per run (the target's prefill
        and set-up), per run that drafts (the draft's prefill) and, beyond ``per_round``, per round of a run that
        drafts (verifying drafts: their round law, the rejection).
      unidentified: the loop terms the fitting runs could not tell from the others, set to 0 (their cost is
        in the terms kept): with every run of one length, ``per_token`` is part of ``per_run``, and the
        model then predicts runs of that length only.
    """

    draft: ForwardFit
    target: ForwardFit
    per_round: float
    per_draft: float
    per_token: float
    per_run: float = 0.0
    per_drafting_run: float = 0.0
    per_drafting_round: float = 0.0
    unidentified: tuple = ()

    def forward_seconds(self, counts, rounds=None) -> np.ndarray:
        """Predicted seconds of each run's forward passes past the prefills."""
        d = np.asarray(counts.draft_calls, dtype=float)
        drafted = _runs_rounds(counts, rounds)
        two = _two_token_catch_ups(counts, rounds, drafted)
        target = np.array([float(np.sum(self.target(L[1:] + 1))) for L in drafted])
        return (d - two) * self.draft(1) + two * self.draft(2) + target

    def seconds(self, counts, rounds=None) -> np.ndarray:
        """Predicted seconds of each run from its counts (``draft_calls``, ``oracle_calls``, ``tokens``) and,
        when given, its rounds' block lengths (``DecodeResult.rounds``)."""
        loop = np.array([getattr(self, name) for name in LOOP_TERMS])
        return self.forward_seconds(counts, rounds) + _loop_features(counts) @ loop

    def latency(self, counts, rounds=None) -> float:
        """Predicted seconds per token over the runs of ``counts`` (and ``rounds``, when given)."""
        tokens = np.sum(counts.tokens)
        if tokens <= 0:
            raise ValueError("counts hold no generated token: no time per token to predict")
        return float(self.seconds(counts, rounds).sum() / tokens)


def fit_latency(runs: list[TimedRuns]) -> LatencyModel:
    """Fit a :class:`LatencyModel` on timed runs (pool several methods and lookaheads, autoregressive among them)."""
    if not runs or not all(isinstance(r, TimedRuns) for r in runs):
        raise ValueError("runs must be a non-empty list of TimedRuns (from timed_decode)")
    calls = np.concatenate([r.calls for r in runs])
    fits = []
    for which, name in enumerate(("draft", "target")):
        mine = calls[(calls[:, 0] == which) & (calls[:, 3] == 0)]
        if mine.size == 0:
            raise ValueError(
                f"no {name} forward call past a prefill among the runs; include a method that drafts "
                f"and one that calls the target"
            )
        fits.append(_fit_forward(mine[:, 1], mine[:, 2]))
    forward = LatencyModel(*fits, 0.0, 0.0, 0.0)
    counts = [r.result.counts for r in runs]
    rest = np.concatenate([r.seconds - forward.forward_seconds(c, r.result.rounds) for r, c in zip(runs, counts)])
    X = np.concatenate([_loop_features(c) for c in counts])
    # where the runs cannot tell terms apart, each order of preference keeps some: the best non-negative fit's
    kept = [_identified(X, order) for order in ORDERS]
    residuals = [nnls(X[:, keep], rest)[1] for keep in kept]
    keep = kept[int(np.argmin(np.asarray(residuals) * (1 + 1e-9 * np.arange(len(kept)))))]  # a tie: the first
    coef = np.zeros(X.shape[1])
    coef[keep], _ = nnls(X[:, keep], rest)
    unidentified = tuple(name for j, name in enumerate(LOOP_TERMS) if j not in keep)
    return LatencyModel(*fits, *(float(c) for c in coef), unidentified=unidentified)


#: A loop term is fitted only if its column (scaled to a maximum of 1) keeps the smallest singular value of those
#: kept above this share of the largest: one run cut short by an EOS does not make a per-token cost measurable.
IDENTIFIED = 1e-2

#: The loop's fitted costs, in the column order of :func:`_loop_features`.
LOOP_TERMS = ("per_round", "per_draft", "per_token", "per_run", "per_drafting_run", "per_drafting_round")


def _loop_features(counts) -> np.ndarray:
    """What each run pays a loop cost for, ``(n_runs, 6)`` in the order of :data:`LOOP_TERMS`: rounds, drafted
    tokens, output tokens, the run itself, whether it drafts, and its rounds if it drafts."""
    d = np.asarray(counts.draft_calls, dtype=float)
    rounds = np.asarray(counts.oracle_calls, dtype=float)
    return np.stack(
        [
            rounds,
            d,
            np.asarray(counts.tokens, dtype=float),
            np.ones_like(d),
            (d > 0).astype(float),
            rounds * (d > 0),
        ],
        axis=1,
    )


#: The orders of preference in which :func:`_identified` keeps the loop terms (columns of :func:`_loop_features`):
#: per run, per drafting run, per round, per drafting round, per drafted token, per output token; or the drafting
#: run after the rounds. With every run of one length an autoregressive run's rounds are a constant, and a drafting
#: run's own cost cannot be told from its rounds' extra cost: the first order keeps the former, the second the
#: latter, and :func:`fit_latency` the one whose non-negative fit leaves the smaller residual (a cost cannot be
#: negative: with the term that would have to be, the clock is misfitted).
ORDERS = ((3, 4, 0, 5, 1, 2), (3, 0, 5, 4, 1, 2))


def _identified(X: np.ndarray, order) -> list[int]:
    """Columns of ``X`` the runs can tell apart: each is kept, in ``order`` (:data:`ORDERS`), only if it is not
    (nearly, :data:`IDENTIFIED`) a combination of those kept before it (with every run of one length the output
    tokens are a multiple of the runs: their cost is then part of ``per_run``)."""
    scaled = X / np.maximum(np.abs(X).max(axis=0), 1e-300)
    keep: list[int] = []
    for j in order:
        sv = np.linalg.svd(scaled[:, keep + [j]], compute_uv=False)
        if sv[-1] > IDENTIFIED * sv[0]:  # not (nearly) a combination of the columns kept
            keep.append(j)
    return sorted(keep)


#: Fewest prompts for :func:`speed_check` (half fit the model, half measure it).
SPEED_PROMPTS = 4


@dataclass(frozen=True)
class SpeedCheck:
    """A method's speed-up over autoregressive decoding, predicted by a :class:`LatencyModel` and measured.

    The model is fitted on timed runs of ``fit_prompts`` (autoregressive decoding, SD with ``K = 1``
    and the method); the speed-up is measured on the other prompts (autoregressive decoding timed
    just before the method) and predicted from those runs' counts.
    """

    model: LatencyModel
    predicted: float
    measured: float
    latency: tuple[float, float]  # measured seconds per token: autoregressive, the method
    predicted_latency: tuple[float, float]
    fit_prompts: int
    test_prompts: int

    @property
    def error(self) -> float:
        """``predicted / measured − 1``."""
        return self.predicted / self.measured - 1.0


def speed_check(pair: ModelPair, prompts: list, method, *, max_new_tokens: int, key, **kwargs) -> SpeedCheck:
    """Fit the latency model on half of ``prompts`` and hold its predicted speed-up against the clock on the rest."""
    check_pair(pair)
    from speculab._validate import spawn_seeds
    from speculab.methods import SD, Autoregressive

    prompts = list(prompts)
    distinct = len({p if isinstance(p, str) else tuple(p) for p in prompts})
    if distinct < SPEED_PROMPTS:
        raise ValueError(
            f"a speed check needs at least {SPEED_PROMPTS} distinct prompts (half to fit the latency "
            f"model, half to measure); got {distinct} distinct of {len(prompts)}"
        )
    if isinstance(method, Autoregressive):
        raise ValueError(
            "a speed check measures a drafting method's speed-up over autoregressive decoding; "
            "method must draft (e.g. SD(K=4)), not Autoregressive()"
        )
    fit, test = prompts[: len(prompts) // 2], prompts[len(prompts) // 2 :]
    seeds = spawn_seeds(key, 2)
    calib = [
        timed_decode(pair, fit, m, max_new_tokens=max_new_tokens, key=seeds[0], **kwargs)
        for m in (Autoregressive(), SD(K=1), method)
    ]
    model = fit_latency(calib)
    ar = timed_decode(pair, test, Autoregressive(), max_new_tokens=max_new_tokens, key=seeds[1], **kwargs)
    run = timed_decode(pair, test, method, max_new_tokens=max_new_tokens, key=seeds[1], **kwargs)
    pred = (model.latency(ar.result.counts, ar.result.rounds), model.latency(run.result.counts, run.result.rounds))
    return SpeedCheck(
        model, pred[0] / pred[1], ar.latency / run.latency, (ar.latency, run.latency), pred, len(fit), len(test)
    )
