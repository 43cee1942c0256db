"""Theory vs measurement, side by side (value, s.e., z) — for any method, through the method protocol.

Two pairings:

* :func:`side_by_side` pairs a method's exact :class:`~speculab.counts.Expected` with
  simulated :class:`~speculab.counts.Counts` field by field (they share the names);
  the CLI's ``speculab sim`` prints it.
* :func:`compare` runs a method on a real draft/target pair. Rows that hold for
  every method come from here; a method adds its own through
  :meth:`speculab.methods.Method.compare_rows`:

  - **paired rejections** (any method): along every run the conditional probability
    ``r_n`` that position ``n`` is a rejection, given everything before it, is known
    (SD: ``TV``; batch root: ``Π r_m``; biased: ``Σ(1 − b)p``; bonus: 0). The count
    minus ``Σ r_n`` is a martingale, so ``z = Σ(1{rej} − r) / sqrt(Σ r(1 − r))``.
  - **paired accepted drafts per round** (any method that drafts): the number ``τ``
    drawn in a round against ``E[τ | drafted block]`` from the method's round law;
    rounds are conditionally independent given their blocks, so
    ``z = Σ(τ − E) / sqrt(Σ Var[τ | block])``.
  - method rows, e.g. SD: [Yin] Thm 1 from independent target samples (``K = ∞``) and
    Leviathan's i.i.d. prediction (finite ``K``); batch SD: the batch improvement
    (Thm 3); biased decoding: the Pareto line of Thm 5 per step.

Every run uses a fixed seed; the reference and method runs use independent
generators derived from one ``key``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from speculab._validate import as_positive_int, spawn_seeds
from speculab.counts import Counts, Estimate, Expected
from speculab.methods import SD, Autoregressive, Method
from speculab.methods.capabilities import RoundProbing, TreeDrafting, has
from speculab.rows import Comparison, Row, paired_accepted, paired_rejections

__all__ = ["Row", "Comparison", "Context", "compare", "side_by_side", "paired_rejections", "paired_accepted"]


# -- theory vs simulation -------------------------------------------------------------------------------
def side_by_side(expected: Expected | None, counts: Counts, title: str = "") -> Comparison:
    """Every simulated count next to its exact expectation (same field names), with ``z``.

    Counts the theory does not give are reported as measured only; ``expected=None``
    (no theory for the method) leaves every prediction empty.
    """
    exact = dict(expected.items()) if expected is not None else {}
    rows = []
    for name, est in counts.summary().items():
        pred = exact.get(name, float("nan"))
        rows.append(Row(name, pred, est.mean, 0.0, est.se, note="" if name in exact else "measured only"))
    source = expected.source if expected is not None else "none (no exact theory for this method)"
    return Comparison(title, rows, settings={"n_runs": counts.n_runs, "theory": source})


# -- real models ------------------------------------------------------------------------------------------------
@dataclass
class Context:
    """What a method's :meth:`~speculab.methods.Method.compare_rows` can use.

    Attributes:
      pair, prompts, max_new_tokens, sampling: the comparison's settings (``prompts``
        lists every run: each prompt ``runs_per_prompt`` times).
      result: the method's :class:`~speculab.backends.DecodeResult`.
      probe: what ``method.round_probe()`` returned, after the method's run.
      seeds: independent seeds: slot 1 the reference, 2 the method, 3… for further runs.
    """

    pair: Any
    prompts: list[str]
    max_new_tokens: int
    sampling: Any
    seeds: list[int]
    result: Any = None
    probe: Any = None
    batch_size: int | None = None

    def decode(self, method: Method, slot: int, **kwargs):
        """Run another method on the same prompts with the generator of ``slot`` (see :attr:`seeds`), in the
        comparison's batches."""
        from speculab.backends import decode

        return decode(
            self.pair,
            self.prompts,
            method,
            max_new_tokens=self.max_new_tokens,
            sampling=self.sampling,
            key=self.seeds[slot],
            **{"batch_size": self.batch_size, **kwargs},
        )

    @cached_property
    def reference(self):
        """Autoregressive runs from the target with the draft alongside: ``TV(p_n, q_n)`` along target samples."""
        return self.decode(Autoregressive(), slot=1, track_draft=True)

    @property
    def t1(self) -> Estimate:
        """[Yin] Thm 1's ``Σ_n E_q[TV(p_n, q_n)]`` per run, estimated from the independent target samples."""
        return Estimate.of([float(np.nansum(rec.tv)) for rec in self.reference.records])

    def tv_along_result(self) -> np.ndarray:
        """``TV(p_n, q_n)`` at every verified position of the method's own runs."""
        return np.concatenate([rec.tv[~np.isnan(rec.tv)] for rec in self.result.records])


def compare(
    pair,
    method: Method = SD(),
    prompts: list[str] | None = None,
    *,
    runs_per_prompt: int = 8,
    max_new_tokens: int = 32,
    sampling=None,
    key: Any,
    speed: bool = False,
    batch_size: int | None = None,
) -> Comparison:
    """Run ``method`` on a real pair and compare its counts with the theory (see module docstring).

    Args:
      pair: from :func:`speculab.backends.load_pair`.
      method: any method that runs on real models (``speculab.methods.names(real_models=True)``),
        except autoregressive decoding, which is the reference.
      prompts: a prompt string or a list of them (``None``: the tiny pair's held-out prompts).
      runs_per_prompt: independent runs of each prompt.
      max_new_tokens: tokens generated per run.
      sampling: :class:`~speculab.backends.Sampling` (default temperature 1).
      key: an int seed or a generator; the reference and method runs use independent
        generators derived from it.
      speed: also hold the latency model's predicted speed-up over autoregressive decoding
        against the clock (:func:`speculab.backends.latency.speed_check`: fitted on half the
        prompts, measured on the others, one prompt at a time).
      batch_size: runs decoded together (``None``: all of them; see :func:`speculab.backends.decode`); inside
        :func:`speculab.sim.checkpoint.resumable` each finished batch is journaled. The same key gives the same
        runs whatever the batch size (up to draws within round-off of a boundary, as ``decode`` says).
    """
    from speculab.backends import Sampling
    from speculab.backends.decode import encode_prompts, prompt_list
    from speculab.backends.pair import check_pair, default_prompts

    if not isinstance(method, Method) or not method.runs_on_real_models() or not method.drafting:
        from speculab.methods import get, names

        choices = [n for n in names(real_models=True) if get(n).drafting]
        raise ValueError(
            f"method must be a drafting method that runs on real models, one of {choices} "
            f"(autoregressive decoding is the reference); got {method!r}"
        )
    check_pair(pair)
    runs_per_prompt = as_positive_int(runs_per_prompt, "runs_per_prompt")
    sampling = sampling or Sampling()
    prompts = default_prompts() if prompts is None else prompt_list(prompts)
    if speed and has(method, TreeDrafting):
        raise ValueError(
            f"speed=True (--speed) prices rounds of chains (one draft call per drafted token); {type(method).__name__} "
            "drafts a tree level by level with tree attention, which the latency model does not price"
        )
    if speed:
        from speculab.backends.latency import SPEED_PROMPTS

        if len(prompts) < SPEED_PROMPTS:
            raise ValueError(
                f"speed=True needs at least {SPEED_PROMPTS} prompts (half to fit the latency model, half "
                f"to measure); got {len(prompts)}"
            )
    # each prompt checked before it is repeated: a refusal names the prompt, not one of its runs
    encode_prompts(pair, prompts, as_positive_int(max_new_tokens, "max_new_tokens"))
    runs = [p for p in prompts for _ in range(runs_per_prompt)]
    if batch_size is not None:
        batch_size = as_positive_int(batch_size, "batch_size")
    ctx = Context(pair, runs, max_new_tokens, sampling, seeds=spawn_seeds(key, 8), batch_size=batch_size)
    ctx.probe = method.round_probe() if has(method, RoundProbing) else None
    ctx.result = ctx.decode(method, slot=2, on_round=ctx.probe)
    settings = dict(
        pair=pair.name,
        method=method,  # JSON: its repr; the table: its str
        prompts=len(prompts),
        runs=len(runs),
        max_new_tokens=max_new_tokens,
        temperature=sampling.temperature,
        key=key if isinstance(key, int) else type(key).__name__,
    )
    comp = Comparison(f"theory vs measured: {method} on the {pair.name} pair", settings=settings)
    comp.rows.extend(method.compare_rows(ctx))
    comp.rows.append(paired_rejections(ctx.result))
    accepted = paired_accepted(ctx.result)
    if accepted is not None:
        comp.rows.append(accepted)
    counts = ctx.result.counts
    comp.rows.append(
        Row(
            "target calls per token",
            float("nan"),
            float(counts.oracle_calls.sum() / counts.tokens.sum()),
            note="measured",
        )
    )
    if speed:
        comp.rows.extend(_speed_rows(pair, prompts, method, max_new_tokens, sampling, ctx.seeds[7], comp.settings))
    return comp


def _speed_rows(pair, prompts, method, max_new_tokens, sampling, key, settings: dict) -> list[Row]:
    """The latency model's predicted speed-up and times per token against the clock (no z: one timed run each);
    ``settings`` gains where they were timed: torch's threads, the CPUs and the one-minute load average at the
    start and the end of the timings (a busy machine's clock measures the contention)."""
    import os

    import torch

    from speculab.backends.latency import speed_check

    start = os.getloadavg()[0]
    check = speed_check(pair, prompts, method, max_new_tokens=max_new_tokens, key=key, sampling=sampling)
    settings.update(
        threads=torch.get_num_threads(), cpus=os.cpu_count(), load_at_start=start, load_at_end=os.getloadavg()[0]
    )
    where = (
        f"fit on {check.fit_prompts} prompts, measured on {check.test_prompts}, one prompt at a time; torch on "
        f"{settings['threads']} thread{'s' if settings['threads'] != 1 else ''} of {settings['cpus']} CPUs, load "
        f"average {start:.1f} → {settings['load_at_end']:.1f}"
    )
    nan = float("nan")
    return [
        Row(
            "speed-up over AR (latency model)",
            check.predicted,
            check.measured,
            measured_se=nan,
            note=f"error {check.error:+.1%}; {where}",
        ),
        Row(
            "ms per token, AR",
            1e3 * check.predicted_latency[0],
            1e3 * check.latency[0],
            measured_se=nan,
            note="wall clock vs fitted forward times + loop",
        ),
        Row(
            f"ms per token, {type(method).__name__}",
            1e3 * check.predicted_latency[1],
            1e3 * check.latency[1],
            measured_se=nan,
            note="wall clock vs fitted forward times + loop",
        ),
    ]
