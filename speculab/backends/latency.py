r"""The latency model held against the clock: forward times fitted on real runs, time per token predicted from counts.

Convention: ``p`` = draft, ``q`` = target. [SDpp] §5.2 fits ``t_draft`` and ``t_target`` by
linear regression of each generation's wall time on its ``(N_draft, N_target)`` and
predicts time per token with eq. (5.1). A per-generation regression cannot tell a
target call's fixed cost from its cost per verified token (with one draft row the
verified tokens are ``N_draft + N_target``, a sum of the other two columns), so here
every forward call is timed (:func:`timed_decode`) and each model's time is fitted
against the tokens it was fed, ``t(k) = base + per_token · k`` (least squares, with
``R²``); what the clock shows beyond the forward passes — sampling, the round law,
records, the prompt's prefill — is fitted per round, per drafted token (the round law
and the laws kept per slot grow with the block), per output token and per run from the
same runs (non-negative least squares: a cost cannot be negative). Then the time of a
run of one prompt is

.. math:: T \approx N_{draft}\, t_d(1) + N_{target}\, t_t^{base} + (N_{draft} + N_{target})\, t_t^{token}
          + N_{target}\, c_{round} + N_{draft}\, c_{draft} + N\, c_{token} + c_{run}

(a round of ``L`` drafts makes ``L`` draft calls of about one token — its first is the
catch-up of the previous round's one or two new tokens — and one target call of
``L + 1`` tokens), and the predicted speed-up of a method over autoregressive
decoding is the ratio of predicted times per token. The model describes one sequence
decoded at a time (``batch_size=1``), the setting of [SDpp] and of the theory's counts.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
from scipy.optimize import nnls

from speculab.backends.decode import DecodeResult, decode
from speculab.backends.pair import ModelPair

__all__ = ["ForwardFit", "LatencyModel", "TimedRuns", "SpeedCheck", "timed_decode", "fit_latency", "speed_check"]


@dataclass(frozen=True)
class ForwardFit:
    """One model's forward time against the tokens fed: ``t(k) = base + per_token · k`` seconds."""

    base: float
    per_token: float
    r2: float
    calls: int

    def __call__(self, k) -> float:
        return self.base + self.per_token * k


@dataclass(frozen=True)
class TimedRuns:
    """Runs of one method, one prompt at a time, with their clock: the result, each run's wall time and every
    forward call as ``(model, tokens fed, seconds)`` (model 0 = draft, 1 = target)."""

    result: DecodeResult
    seconds: np.ndarray
    calls: np.ndarray  # (n_calls, 3)

    @property
    def latency(self) -> float:
        """Measured seconds per generated token over all runs."""
        return float(self.seconds.sum() / self.result.counts.tokens.sum())


@contextmanager
def _timing(pair: ModelPair, log: list):
    """Record every ``extend`` call of both adapters (synchronised on CUDA) into ``log``."""
    sync = torch.cuda.synchronize if pair.device.type == "cuda" else (lambda: None)
    originals = []
    for which, model in enumerate((pair.draft, pair.target)):
        original = model.extend

        def timed(state, ids, original=original, which=which):
            sync()
            t0 = time.perf_counter()
            out = original(state, ids)
            sync()
            log.append((which, ids.shape[-1], time.perf_counter() - t0))
            return out

        originals.append((model, original))
        model.extend = timed
    try:
        yield
    finally:
        for model, _ in originals:
            del model.extend  # the class's method again


def timed_decode(pair: ModelPair, prompts: list, method, *, max_new_tokens: int, key, **kwargs) -> TimedRuns:
    """Decode each prompt on its own (``batch_size=1``) with every forward call and each run timed."""
    from speculab._validate import spawn_seeds

    results, seconds, log = [], [], []
    with _timing(pair, log):
        for prompt, seed in zip(prompts, spawn_seeds(key, len(prompts))):
            t0 = time.perf_counter()
            results.append(decode(pair, [prompt], method, max_new_tokens=max_new_tokens, key=seed, batch_size=1,
                                  **kwargs))
            seconds.append(time.perf_counter() - t0)
    counts = type(results[0].counts).concatenate([r.counts for r in results])
    merged = DecodeResult([t for r in results for t in r.tokens], [t for r in results for t in r.texts], counts,
                          [x for r in results for x in r.records], [x for r in results for x in r.rounds])
    return TimedRuns(merged, np.asarray(seconds), np.asarray(log, dtype=float).reshape(-1, 3))


def _fit_line(k: np.ndarray, t: np.ndarray) -> ForwardFit:
    X = np.stack([np.ones_like(k), k], axis=1)
    if np.ptp(k) == 0:  # one call size only: no slope to fit
        return ForwardFit(float(t.mean()), 0.0, 0.0, int(t.size))
    coef, *_ = np.linalg.lstsq(X, t, rcond=None)
    resid = t - X @ coef
    r2 = 1.0 - float(resid @ resid) / float(((t - t.mean()) ** 2).sum()) if t.size > 2 else 0.0
    return ForwardFit(float(coef[0]), float(coef[1]), r2, int(t.size))


@dataclass(frozen=True)
class LatencyModel:
    """Fitted forward times of both models and the loop's own time (module docstring).

    Attributes:
      draft, target: :class:`ForwardFit` of each model.
      per_round, per_draft, per_token, per_run: seconds of the decoding loop beyond forward passes, per
        round, per drafted token, per output token and per run (a prompt's prefill and set-up).
    """

    draft: ForwardFit
    target: ForwardFit
    per_round: float
    per_draft: float
    per_token: float
    per_run: float = 0.0

    def seconds(self, counts) -> np.ndarray:
        """Predicted seconds of each run from its counts (``draft_calls``, ``oracle_calls``, ``tokens``)."""
        d, r, n = (np.asarray(getattr(counts, k), dtype=float) for k in ("draft_calls", "oracle_calls", "tokens"))
        return (d * self.draft(1) + r * self.target.base + (d + r) * self.target.per_token
                + r * self.per_round + d * self.per_draft + n * self.per_token + self.per_run)

    def latency(self, counts) -> float:
        """Predicted seconds per token over the runs of ``counts``."""
        return float(self.seconds(counts).sum() / np.sum(counts.tokens))


def fit_latency(runs: list[TimedRuns]) -> LatencyModel:
    """Fit a :class:`LatencyModel` on timed runs (pool several methods and lookaheads, autoregressive among them)."""
    if not runs or not all(isinstance(r, TimedRuns) for r in runs):
        raise ValueError("runs must be a non-empty list of TimedRuns (from timed_decode)")
    calls = np.concatenate([r.calls for r in runs])
    fits = []
    for which, name in enumerate(("draft", "target")):
        mine = calls[calls[:, 0] == which]
        if mine.size == 0:
            raise ValueError(f"no {name} forward call among the runs; include a method that drafts and one that "
                             f"calls the target")
        fits.append(_fit_line(mine[:, 1], mine[:, 2]))
    forward = LatencyModel(*fits, 0.0, 0.0, 0.0)
    counts = [r.result.counts for r in runs]
    rest = np.concatenate([r.seconds - forward.seconds(c) for r, c in zip(runs, counts)])  # the loop's own time
    X = np.concatenate([np.stack([c.oracle_calls, c.draft_calls, c.tokens, np.ones(c.n_runs)], axis=1).astype(float)
                        for c in counts])
    coef, _ = nnls(X, rest)
    return LatencyModel(*fits, *(float(c) for c in coef))


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
    from speculab._validate import spawn_seeds
    from speculab.methods import SD, Autoregressive

    prompts = list(prompts)
    if len(prompts) < SPEED_PROMPTS:
        raise ValueError(f"a speed check needs at least {SPEED_PROMPTS} distinct prompts (half to fit the latency "
                         f"model, half to measure); got {len(prompts)}")
    fit, test = prompts[: len(prompts) // 2], prompts[len(prompts) // 2:]
    seeds = spawn_seeds(key, 2)
    calib = [timed_decode(pair, fit, m, max_new_tokens=max_new_tokens, key=seeds[0], **kwargs)
             for m in (Autoregressive(), SD(K=1), method)]
    model = fit_latency(calib)
    ar = timed_decode(pair, test, Autoregressive(), max_new_tokens=max_new_tokens, key=seeds[1], **kwargs)
    run = timed_decode(pair, test, method, max_new_tokens=max_new_tokens, key=seeds[1], **kwargs)
    pred = (model.latency(ar.result.counts), model.latency(run.result.counts))
    return SpeedCheck(model, pred[0] / pred[1], ar.latency / run.latency, (ar.latency, run.latency), pred,
                      len(fit), len(test))
