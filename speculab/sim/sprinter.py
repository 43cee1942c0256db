"""Monte-Carlo simulation of SPRINTER ([SPR] Alg. 1/2) on Markov instances, and of its stopping process.

Convention: ``p`` = draft, ``q`` = target ([SPR] uses the opposite letters).

Runs are simulated position by position, vectorised across runs (like
:mod:`speculab.sim.numpy_engine`). At every position each run drafts
``x ~ p(·|prev)``; the verifier passes it with probability ``v`` (``η_TP`` if
``p(x) <= q(x)``, else ``η_FP``; or ``f(t, prev, x)`` for ``Sprinter(verifier=f)``).
A passed token is output with no target call. Otherwise the target is called
once on that token: keep ``x`` with probability ``min(1, q(x)/p(x))``, else
output a draw from ``[q − p]_+`` (a *rejection*).

Counting conventions (following [SPR] Alg. 1/2, where the target runs only
after a "not acceptable" verdict):

* ``oracle_calls`` (target calls) = number of "not acceptable" verdicts. The
  horizon end forces **no** final target check: a run whose last tokens were all
  passed by the verifier ends without calling the target (so a run can make 0 calls).
* ``draft_calls`` = ``verifier_calls`` = ``T``: SPRINTER drafts one token at a time
  and verifies each, so nothing is drafted past a stop.
* ``accepted`` = drafted tokens in the output (passed, or kept by the target);
  ``rejections`` = target-rejected tokens (``discarded = rejections``); ``bonus = 0``.

Random numbers are drawn in the same order whatever the verifier: per position
``n`` uniforms for the draft, ``n`` for the verdict, ``n`` for the target's
check, then one per rejection. A verifier function returning ``η_TP``/``η_FP``
by acceptability therefore gives the very same runs as ``Sprinter(eta_tp, eta_fp)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from speculab._validate import as_generator, as_positive_int, as_probability_array
from speculab.methods import Sprinter
from speculab.sim.counts import Counts
from speculab.sim.numpy_engine import run_chunks, sample_rows
from speculab.theory.divergences import _residual, _sd_acceptance
from speculab.theory.instance import MarkovInstance
from speculab.theory.sprinter import _call_verifier

__all__ = ["SprinterCounts", "simulate_sprinter", "simulate_stopping", "signed_tv_statistic"]


@dataclass(frozen=True)
class SprinterCounts(Counts):
    """:class:`Counts` plus ``verifier_calls`` (per run, shape ``(n_runs,)``)."""

    verifier_calls: np.ndarray | None = None

    FIELDS = Counts.FIELDS + ("verifier_calls",)

    @property
    def tokens_per_round(self) -> np.ndarray:
        """Per-run output tokens per target call; a run that never calls the target counts one round."""
        return self.tokens / np.maximum(self.oracle_calls, 1)


def _chunk(inst: MarkovInstance, method: Sprinter, n: int, rng: np.random.Generator, keep: bool) -> SprinterCounts:
    T, V = inst.T, inst.V
    cP = np.cumsum(inst.P, axis=-1)
    cR = np.cumsum(_residual(inst.Q, inst.P), axis=-1)
    keep_prob = _sd_acceptance(inst.P, inst.Q)  # min(1, q/p)
    iid = method.verifier is None
    if iid:
        v_arr = np.where(inst.P <= inst.Q, float(method.eta_tp), float(method.eta_fp))  # (T, V, V)

    prev = sample_rows(np.broadcast_to(np.cumsum(inst.rho), (n, V)), rng.random(n))
    calls = np.zeros(n, dtype=np.int64)
    rejections = np.zeros(n, dtype=np.int64)
    rate = np.zeros(T)
    seq = np.empty((n, T + 1), dtype=np.int64) if keep else None
    if keep:
        seq[:, 0] = prev

    for t in range(T):
        x = sample_rows(cP[t, prev], rng.random(n))
        v = v_arr[t, prev, x] if iid else _call_verifier(method.verifier, t, prev, x)
        stop = rng.random(n) >= v  # verdict "not acceptable": call the target
        calls += stop
        kept = rng.random(n) < keep_prob[t, prev, x]
        rej = np.flatnonzero(stop & ~kept)
        if rej.size:
            x[rej] = sample_rows(cR[t, prev[rej]], rng.random(rej.size))
        rejections[rej] += 1
        rate[t] = rej.size / n
        prev = x
        if keep:
            seq[:, t + 1] = x

    full = np.full(n, T, dtype=np.int64)
    return SprinterCounts(
        rejections=rejections, oracle_calls=calls, draft_calls=full, accepted=T - rejections,
        discarded=rejections.copy(), bonus=np.zeros(n, dtype=np.int64), tokens=full.copy(),
        rejection_rate=rate, sequences=seq, verifier_calls=full.copy(),
    )


def simulate_sprinter(
    inst: MarkovInstance, method: Sprinter, n_runs: int, rng, *, return_sequences: bool = False, progress: bool = False
) -> SprinterCounts:
    """Simulate ``n_runs`` independent SPRINTER runs on ``inst``; see :func:`speculab.sim.simulate`.

    Args:
      inst: the Markov instance (``P`` draft, ``Q`` target).
      method: ``Sprinter(eta_tp, eta_fp)`` or ``Sprinter(verifier=f)`` with
        ``f(t, prev, x) -> pass probabilities`` (``t`` the 0-based position index,
        ``prev``/``x`` int arrays of shape ``(n,)``).
      n_runs: number of runs (>= 1).
      rng: int seed or ``np.random.Generator`` (consumed).
      return_sequences: also return the ``(n_runs, T + 1)`` tokens.
      progress: progress bar over chunks.

    Returns:
      :class:`SprinterCounts` (module docstring for what each count means).
    """
    if not isinstance(inst, MarkovInstance):
        raise ValueError(f"inst must be a MarkovInstance; got {type(inst).__name__}")
    if not isinstance(method, Sprinter):
        raise ValueError(f"method must be a Sprinter; got {type(method).__name__}")
    n_runs = as_positive_int(n_runs, "n_runs")
    rng = as_generator(rng, "rng")
    # run_chunks joins chunks with SprinterCounts.concatenate, which keeps verifier_calls
    return run_chunks(lambda n: _chunk(inst, method, n, rng, return_sequences), n_runs, progress)


def simulate_stopping(eta_tp: float, eta_fp: float, r: int, n_runs: int, key) -> np.ndarray:
    """Simulate the stopping process of [SPR] Thm 3.3 literally; returns ``N`` per run.

    The first ``r`` drafts are acceptable, all later ones are not; the verifier
    passes each draft independently with probability ``η_TP`` (acceptable) or
    ``η_FP`` (not). ``N`` is the number of drafts passed before the first
    "not acceptable" verdict (the stopping time is ``t_d (N + 1)``).

    Args:
      eta_tp, eta_fp: verifier rates in ``[0, 1]``; ``N`` must be finite, so
        ``eta_fp = 1`` is refused unless ``η_TP^r = 0``.
      r: acceptable prefix length, integer ``>= 0``.
      n_runs: number of runs (>= 1).
      key: int seed or ``np.random.Generator``.

    Returns:
      ``(n_runs,)`` int64 array.
    """
    tp = float(as_probability_array(eta_tp, "eta_tp"))
    fp = float(as_probability_array(eta_fp, "eta_fp"))
    r = as_positive_int(r, "r", minimum=0)
    n_runs = as_positive_int(n_runs, "n_runs")
    rng = as_generator(key)
    if fp == 1.0 and tp**r > 0:
        raise ValueError("eta_fp = 1 makes N infinite (the verifier never stops past the r-th draft)")
    N = np.zeros(n_runs, dtype=np.int64)
    active = np.arange(n_runs)
    i = 0
    while active.size:
        passed = rng.random(active.size) < (tp if i < r else fp)
        active = active[passed]
        N[active] += 1
        i += 1
    return N


def signed_tv_statistic(inst: MarkovInstance, sequences: np.ndarray) -> np.ndarray:
    r"""Per-run unbiased estimate of ``Σ_n ½ Σ_y s_n(y) (P_out,n(y) − q_n(y))`` with ``s = sign(p − q)``.

    For each run and position, ``f_n = ½ [s_n(x_{n-1}, x_n) − Σ_y s_n(x_{n-1}, y) q_n(y | x_{n-1})]``;
    given ``x_{n-1}`` its mean is ``½ Σ_y s (P_out − q)``. When the output law is
    [SPR] Thm 3.1's mixture ``(1 − η_FP) q + η_FP p`` that is exactly
    ``TV(q_n, P_out,n) = η_FP TV(p_n, q_n)``, so ``Σ_n f_n`` tests the TV claim
    with an ordinary standard error (a plug-in TV of empirical frequencies would be biased).

    Args:
      inst: the instance (``P`` draft, ``Q`` target).
      sequences: ``(n_runs, T + 1)`` sampled tokens ``x_0..x_T``.

    Returns:
      ``(n_runs,)`` array.
    """
    seq = np.asarray(sequences)
    if seq.ndim != 2 or seq.shape[1] != inst.T + 1:
        raise ValueError(f"sequences must have shape (n_runs, T + 1 = {inst.T + 1}); got {seq.shape}")
    s = np.sign(inst.P - inst.Q)  # (T, V, V)
    centre = (s * inst.Q).sum(axis=-1)  # (T, V)
    t = np.arange(inst.T)
    a, x = seq[:, :-1], seq[:, 1:]  # (n, T) each
    return 0.5 * (s[t, a, x] - centre[t, a]).sum(axis=1)
