"""SPRINTER ([SPR] Alg. 1/2): sequential approximate verification, and its stopping process.

Convention: ``p`` = draft, ``q`` = target ([SPR] uses the opposite letters).

At every position a run drafts ``x ~ p(·|prev)``; a verifier passes it with
probability ``v`` (``η_TP`` if ``p(x) <= q(x)``, else ``η_FP``; or ``f(t, prev, x)``
for ``Sprinter(verifier=f)``). A passed token is output with no target call.
Otherwise the target is called once on that token: keep ``x`` with probability
``min(1, q(x)/p(x))``, else output a draw from ``[q − p]_+`` (a *rejection*).
As [Yin] Algorithm 2 this is the rule ``b = v + (1 − v) min(1, q/p)``, ``P = [q − p]_+``.

Counting conventions (following [SPR] Alg. 1/2, where the target runs only
after a "not acceptable" verdict):

* ``oracle_calls`` (target calls) = number of "not acceptable" verdicts. The
  horizon end forces **no** final target check: a run whose last tokens were all
  passed by the verifier ends without calling the target (so a run can make 0 calls).
* ``draft_calls`` = ``verifier_calls`` (an extra count) = ``T``: SPRINTER drafts one
  token at a time and verifies each, so nothing is drafted past a stop.
* ``accepted`` = drafted tokens in the output (passed, or kept by the target);
  ``rejections`` = target-rejected tokens (``discarded = rejections``); ``bonus = 0``.

Random numbers are drawn in the same order whatever the verifier: per position
``n`` uniforms for the draft, ``n`` for the verdict and the target's check together,
then one per rejection. A verifier function returning ``η_TP``/``η_FP`` by
acceptability therefore gives the very same runs as ``Sprinter(eta_tp, eta_fp)``.

**On real models** (:func:`speculab.backends.decode`, one prompt at a time) the verifier is a
head trained on the draft's hidden states (:class:`speculab.backends.heads.TrainedHead`), and
it reads [SPR] §4's input, "the last embedding of the previous token": the draft's last
hidden state at the token before the slot, which the forward pass that computed the slot's
law ``p`` returns anyway. The verdict is ``score ≥ τ`` (the inference threshold of [SPR]'s
detailed algorithm in its appendix: "if V(s(x, Prefix)) ≥ τ then r += 1"; the paper is not
consistent — its §3 Algorithm 1 breaks at ``V ≤ τ``, passing only ``V > τ``; the two differ
only at a score exactly ``τ``, and ``tests/test_sprinter_models.py`` pins the choice),
or with ``threshold=None`` a coin with probability ``score`` (so a constant head is the random
verifier). The verdict is therefore fixed before ``x`` is drafted and does not depend on
``x``, and the one-step law is exact: ``p`` after a pass, ``q`` after a refusal (the target
checks ``x ~ p`` as SD does) — the law above with ``v`` constant over the vocabulary, so
``TV(q, p_SPR) = v · TV(p, q)`` at every position and S1's mixture holds position by position
with ``η = v``. A round drafts until the first refusal and then makes one target call;
[SPR] does not cap the round. A run that ends (horizon or EOS) with every draft of its last
round passed makes no target call for that round ([SPR] Alg. 1): the loop still runs the
target on those tokens to record ``q`` there (their log-likelihood and TV), but does not
count the call. [SPR] also allows verifiers reading the drafted token ("the embedding of
the draft token x"); the exact per-token law of such a verifier needs its verdict on every
token of the vocabulary, one draft forward pass each, so it is not run here.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Callable, ClassVar

import numpy as np
from array_api_compat import array_namespace, device

from speculab._validate import as_float_array, as_generator, as_positive_int, as_probability_array
from speculab.counts import Expected
from speculab.methods.base import Method, check_probability, param, register
from speculab.methods.capabilities import head_probability
from speculab.methods.chain import Rule, chain_round_law
from speculab.methods.sd import sd_rule
from speculab.theory.sprinter import sprinter_pass_probabilities, sprinter_profile
from speculab.theory.instance import rowwise
from speculab.theory._checks import takes_instance

__all__ = ["Sprinter", "simulate_stopping", "signed_tv_statistic"]


def _call_verifier(verifier, t: int, prev: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Call a verifier function ``f(t, prev, x)``; check it returns one probability per token."""
    out = as_float_array(verifier(t, prev, x), "verifier output")
    if out.ndim == 0:  # a constant verifier
        out = np.full(prev.shape, float(out))
    if out.shape != prev.shape:
        raise ValueError(f"verifier must return one probability per token, shape {prev.shape}; got shape {out.shape}")
    return as_probability_array(out, "verifier output")


def _markov_verifier(verifier):
    """``verifier``, refused if it is a head trained on a draft's hidden states (real models only)."""
    if getattr(verifier, "reads_hidden_states", False):
        raise ValueError(
            "a verifier trained on a draft's hidden states (speculab.backends.heads) runs on real models "
            "only; on a Markov instance give Sprinter(eta_tp, eta_fp) or a function f(t, prev, x)"
        )
    return verifier


@register
@dataclass(frozen=True, eq=False)
class Sprinter(Method):
    """SPRINTER ([SPR] Alg. 1/2; SPEC §1 — [SPR] writes ``p`` for the target, translated here).

    Draft ``x ~ p``; a verifier says "acceptable" (ideal: ``p(x) <= q(x)``) or not.
    Acceptable: keep ``x`` without a target call and draft on. Not acceptable: one
    target call on that token — accept with ``min(1, q/p)``, else draw ``[q − p]_+``.

    Either the i.i.d. noisy verifier of the theory, ``Sprinter(eta_tp, eta_fp)``
    (``η_TP = P(says acceptable | acceptable)``, ``η_FP = P(says acceptable | not)``),
    or ``Sprinter(verifier=f)`` with ``f(t, prev, x) -> probability of saying
    acceptable`` (arrays: position index ``t`` (int), previous tokens ``(n,)``,
    drafted tokens ``(n,)``), e.g. a trained verifier.

    On real models, ``Sprinter(verifier=head, threshold=τ)`` with a head trained on the draft's hidden
    states (:func:`speculab.backends.heads.train_head`): it reads the hidden state at the token
    before each slot ([SPR] §4) and passes the slot iff its score is ``≥ τ`` (``threshold=None``: with
    probability the score). Module docstring: the exact law, the counts.

    ``η_TP = η_FP = 1`` is allowed: the verifier always says acceptable, no target call
    is ever made and the output is the draft's law; [SPR]'s ``E[N]`` (S2, no horizon) is
    then infinite, while a run on a Markov instance ends at ``T``.
    """

    name: ClassVar[str] = "sprinter"
    eta_tp: float | None = param(None, help="η_TP: P(verifier passes | acceptable)", type=float, required=True)
    eta_fp: float | None = param(None, help="η_FP: P(verifier passes | not acceptable)", type=float, required=True)
    verifier: Callable | None = param(None, help="verifier function f(t, prev, x) -> pass probability", cli=False)
    threshold: float | None = param(
        0.5,
        help="inference threshold τ in [0, 1] on a trained verifier's score (read only with a trained head)",
        cli=False,
    )

    def __post_init__(self):
        if self.verifier is None:
            if self.eta_tp is None or self.eta_fp is None:
                raise ValueError("Sprinter needs eta_tp and eta_fp, or a verifier function")
            check_probability(self.eta_tp, "eta_tp")
            check_probability(self.eta_fp, "eta_fp")
        else:
            if not callable(self.verifier):
                raise ValueError(f"verifier must be callable; got {self.verifier!r}")
            if self.eta_tp is not None or self.eta_fp is not None:
                raise ValueError("give either eta_tp/eta_fp or a verifier, not both")
        if self.threshold is not None:
            ok = (
                isinstance(self.threshold, numbers.Real)
                and not isinstance(self.threshold, bool)
                and 0 <= self.threshold <= 1
            )
            if not ok:
                raise ValueError(
                    f"threshold must be a number in [0, 1] (the verifier passes a slot iff its score >= threshold) "
                    f"or None (a coin with the score's probability); got {self.threshold!r}"
                )

    @property
    def unbiased(self) -> bool:
        """[SPR] Thm 3.1: the law is ``(1 − η_FP) q + η_FP p``, the target's iff ``η_FP = 0``."""
        return self.verifier is None and self.eta_fp == 0

    def pass_probabilities(self, inst) -> np.ndarray:
        """The verifier's pass probabilities ``v[t, a, x]`` on ``inst``, shape ``(T, V, V)``.

        A verifier function is called with ``t`` the 0-based position index (position
        ``n = t + 1``), ``prev`` the previous tokens and ``x`` the drafted ones.
        """
        if self.verifier is None:
            return sprinter_pass_probabilities(inst, self.eta_tp, self.eta_fp)
        _markov_verifier(self.verifier)
        V = inst.V
        prev, x = np.divmod(np.arange(V * V), V)  # every (a, x) pair, a-major
        return np.stack([_call_verifier(self.verifier, t, prev, x).reshape(V, V) for t in range(inst.T)])

    def position_law(self, inst):
        """Verifier passes (``v``): ``x`` is kept without a target call; otherwise the target keeps it w.p.
        ``min(1, q/p)`` or draws ``[q − p]_+`` — as tables, which both engines run."""
        v = self.pass_probabilities(inst)
        b, R = rowwise(sd_rule, inst.P, inst.Q)
        return v, rowwise(lambda v, b: (1.0 - v) * b, v, b), R, ("verifier_calls",)

    @takes_instance
    def expected(self, inst) -> Expected:
        """Exact counts from :func:`~speculab.theory.sprinter_profile` (the law along SPRINTER's own chain)."""
        prof = sprinter_profile(inst, self.pass_probabilities(inst))
        T = float(inst.T)
        return Expected(
            rejections=prof.rejections,
            oracle_calls=prof.oracle_calls,
            draft_calls=T,
            accepted=prof.accepted,
            discarded=prof.rejections,
            bonus=0.0,
            tokens=T,
            rejections_per_position=prof.rejections_per_position,
            extra={"verifier_calls": T},
            source="[SPR] Thm 3.1 along SPRINTER's output chain",
        )

    # -- real models ---------------------------------------------------------------------------------
    #: On real models a round drafts until the verifier, a head on the draft's hidden states, refuses a slot
    #: (:class:`~speculab.methods.capabilities.DraftHead`).
    head_param: ClassVar[str] = "verifier"
    #: The head reads the hidden state at the token before each slot ([SPR] §4), not at the drafted token.
    head_reads: ClassVar[str] = "previous"

    @property
    def draft_head(self):
        """The verifier if it is a head trained on the draft's hidden states (what the decoding loop runs), else
        ``None``."""
        return self.verifier if getattr(self.verifier, "reads_hidden_states", False) else None

    def read_head(self, score, uniform: float) -> float:
        """The verdict on a slot from the head's ``score``: ``1.0`` (pass: keep the draft, no target call) or ``0.0``.

        ``score >= threshold``, or with ``threshold=None`` the slot's ``uniform`` below ``score``.
        A score outside ``[0, 1]`` (NaN included) is refused."""
        value = head_probability(score, "verifier")
        if self.threshold is None:
            return float(uniform < value)
        return float(value >= self.threshold)

    @staticmethod
    def stop_drafting(verdicts: list[float], remaining: int) -> bool:
        """A round stops drafting at its first refused slot ([SPR] Alg. 1) (the loop stops it at the horizon)."""
        return verdicts[-1] == 0.0

    @staticmethod
    def target_called(verdicts: list[float]) -> bool:
        """Whether the round calls the target: only a refused slot does ([SPR] Alg. 1)."""
        return any(v == 0.0 for v in verdicts)

    def draft_length(self, remaining: int) -> int:
        return remaining

    def round_law(self, p, q, x, *, bonus: bool, predictions=None):
        """The law of a round given its verdicts (``predictions``: ``1.0`` passed, ``0.0`` refused, one per slot).

        A passed slot keeps its draft (``b ≡ 1``: the slot's law is ``p``); a refused one is SD's check
        (``b = min(1, q/p)``, correction ``[q − p]_+``: the law is ``q``). Nothing follows the block: SPRINTER
        draws no bonus token, whatever ``bonus`` says (an empty block is one token from ``q``, the protocol's
        rule). The one-step laws are returned (the method is biased).
        """
        if predictions is None:
            raise ValueError("SPRINTER's round law needs the verifier's verdicts on the block (predictions=)")
        xp = array_namespace(p, q)
        passed = xp.asarray(predictions, dtype=p.dtype, device=device(p))
        if passed.shape != (x.shape[-1],):
            raise ValueError(f"predictions must hold one verdict per drafted slot ({x.shape[-1]}); got {passed.shape}")
        b, R = sd_rule(p, q[..., :-1, :])
        passed = passed[:, None]
        # a round without drafts (never drafted by SPRINTER's loop) would be one token from q_1, as every method's
        return chain_round_law(Rule(passed + (1.0 - passed) * b, R), p, q, x, bonus=x.shape[-1] == 0, biased=True)


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
      key: an int seed or a generator (see :data:`speculab._validate.KEY_TYPES`).

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


def signed_tv_statistic(inst, sequences: np.ndarray) -> np.ndarray:
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
