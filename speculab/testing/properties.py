"""Ready-made property checks for a speculative decoding method — yours or speculab's.

A method written to the method protocol (:class:`speculab.methods.Method`: its ``round_law``,
``draft_length`` and ``rows``) is checked on a small :class:`~speculab.theory.MarkovInstance`
by exact enumeration: every drafted block of every round is a branch, weighted by its
probability, and the round's law (from the method's own ``round_law``) splits it further. This
gives the exact law of the output sequence and the exact expected counts, independently of the
method's simulator and of its theory:

* :func:`assert_preserves_target_law` — the output sequence follows the target chain exactly
  (what an unbiased verifier must do; a biased one fails it, with the gap);
* :func:`assert_counts_match_theory` — the method's own exact expectations
  (``method.expected(inst)``) equal the enumerated counts, and its simulator agrees with them
  within ``z`` standard errors;
* :func:`enumerate_method` — the exact law and counts themselves.

Example (a user's property test, with the strategies of :mod:`speculab.testing`)::

    from hypothesis import given, settings
    from speculab.methods import SD
    from speculab.testing import assert_preserves_target_law, markov_instances

    @settings(max_examples=50, deadline=None)
    @given(markov_instances(max_T=3, max_V=3))
    def test_my_verifier_is_unbiased(inst):
        assert_preserves_target_law(SD(K=2), inst)

Enumeration costs ``V^(rows · L)`` blocks per round start, so it is for tiny instances
(a few tokens, a few positions); larger ones are refused with ``ValueError``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from speculab.methods.base import Method
from speculab.methods.capabilities import AdaptiveLength, PositionLaw, has
from speculab.theory.instance import MarkovInstance

__all__ = ["MethodEnumeration", "enumerate_method", "assert_preserves_target_law", "assert_counts_match_theory"]

#: The counts :func:`enumerate_method` gives, named as :class:`speculab.counts.Counts`' fields.
COUNTED = ("rejections", "oracle_calls", "accepted", "bonus")


@dataclass(frozen=True)
class MethodEnumeration:
    """The exact behaviour of a method on an instance.

    Attributes:
      law: ``{(x_0, …, x_T): probability}`` of every output sequence the method can produce.
      counts: exact expectations of :data:`COUNTED` — corrections (a round without drafts counts its
        token as one, [Yin]'s convention for autoregressive decoding), target calls (rounds), accepted
        drafts, bonus tokens.
    """

    law: dict
    counts: dict


def _check(method, inst, max_sequences: int) -> None:
    if not isinstance(method, Method):
        raise ValueError(f"method must be a speculab.methods.Method; got {type(method).__name__}")
    if not isinstance(inst, MarkovInstance):
        raise ValueError(f"inst must be a speculab.theory.MarkovInstance; got {type(inst).__name__}")
    if inst.V ** (inst.T + 1) > max_sequences:
        raise ValueError(
            f"inst has {inst.V}^{inst.T + 1} = {inst.V ** (inst.T + 1):,} sequences, more than "
            f"max_sequences={max_sequences:,}: exact enumeration is for a few tokens and positions"
        )
    if has(method, PositionLaw) or has(method, AdaptiveLength):
        raise ValueError(
            f"{type(method).__name__} has no round rule of its own (it decides per position or while "
            f"drafting): these checks enumerate round laws only"
        )


def _chains(inst, t: int, start: int, L: int):
    """Every draft chain of ``L`` tokens from token ``start`` drafted at array index ``t``: tokens ``(c, L)``, their
    probabilities ``(c,)``, the draft rows ``(c, L, V)`` and target rows ``(c, L + 1, V)`` along them."""
    V = inst.V
    tokens = np.array(list(itertools.product(range(V), repeat=L)), dtype=np.int64).reshape(V**L, L)
    prev = np.concatenate([np.full((len(tokens), 1), start), tokens], axis=1)  # (c, L + 1)
    p_rows = np.stack([inst.P[t + i][prev[:, i]] for i in range(L)], axis=1) if L else np.zeros((len(tokens), 0, V))
    q_rows = [inst.Q[t + i][prev[:, i]] for i in range(L)]
    last = inst.Q[t + L][prev[:, L]] if t + L < inst.T else np.full((len(tokens), V), 1.0 / V)  # no bonus there
    q_rows = np.stack([*q_rows, last], axis=1)
    prob = np.prod(np.take_along_axis(p_rows, tokens[..., None], axis=-1)[..., 0], axis=1) if L else np.ones(1)
    keep = prob > 0
    return tokens[keep], prob[keep], p_rows[keep], q_rows[keep]


def _blocks(inst, t: int, start: int, L: int, rows: int):
    """Every joint block of ``rows`` independent chains: ``x (b, rows, L)``, probability ``(b,)``, ``p``, ``q``."""
    tokens, prob, p_rows, q_rows = _chains(inst, t, start, L)
    idx = np.array(list(itertools.product(range(len(prob)), repeat=rows)), dtype=np.int64)  # (b, rows)
    return tokens[idx], np.prod(prob[idx], axis=1), p_rows[idx], q_rows[idx]


def _require(ok: bool, message: str) -> None:
    """An ``AssertionError`` that ``python -O`` keeps (a bare ``assert`` would vanish)."""
    if not ok:
        raise AssertionError(message)


def enumerate_method(
    method: Method, inst, *, max_blocks: int = 100_000, max_sequences: int = 20_000
) -> MethodEnumeration:
    """The exact output law and expected counts of ``method`` on ``inst``, from its ``round_law`` alone.

    Also checks each round law it uses: outcome probabilities non-negative and summing to 1, correction
    weights non-negative and finite, a token after every outcome but "all accepted at the horizon".

    Args:
      method: a :class:`speculab.methods.Method` with a round rule.
      inst: a small :class:`speculab.theory.MarkovInstance`.
      max_blocks: refuse instances needing more joint draft blocks than this in one round.
      max_sequences: refuse instances with more output sequences ``V^(T+1)`` than this.

    Raises:
      ValueError: not a method or not an instance, a method without a round rule (SPRINTER, SpecDec++), or an
        instance too large to enumerate.
      AssertionError: a round law that is not a law (naming the method, position and what is wrong).
    """
    _check(method, inst, max_sequences)
    rows = method.rows
    law: dict = {}
    counts = dict.fromkeys(COUNTED, 0.0)
    frontier = [{} for _ in range(inst.T + 2)]  # prefixes by length, each with its probability
    for x0 in range(inst.V):
        if inst.rho[x0] > 0:
            frontier[1][(x0,)] = float(inst.rho[x0])
    name = type(method).__name__
    for n in range(1, inst.T + 1):  # prefixes of length n: the round starts at position n
        remaining = inst.T - n + 1
        L = int(method.draft_length(remaining))
        if inst.V ** (rows * L) > max_blocks:
            raise ValueError(
                f"{name} drafts {rows} × {L} tokens over {inst.V} tokens: {inst.V ** (rows * L):,} "
                f"blocks per round exceed max_blocks={max_blocks:,}; use a smaller instance"
            )
        bonus = L < remaining
        for prefix, reach in frontier[n].items():
            x, w, p, q = _blocks(inst, n - 1, prefix[-1], L, rows)
            res = method.round_law(p, q, x, bonus=bonus)
            outcome, correction = np.asarray(res.outcome, dtype=float), np.asarray(res.correction, dtype=float)
            where = f"{name}.round_law at position {n} after {prefix}"
            _require(outcome.shape == (len(w), rows, L + 1), f"{where}: outcome shape {outcome.shape}")
            _require(
                bool(np.all(outcome >= 0)) and np.allclose(outcome.sum(axis=(1, 2)), 1.0, atol=1e-9),
                f"{where}: outcome probabilities are not a law (sums {outcome.sum(axis=(1, 2))})",
            )
            _require(
                bool(np.all(np.isfinite(correction)) and np.all(correction >= 0)),
                f"{where}: correction weights must be finite and non-negative",
            )
            counts["oracle_calls"] += reach
            for b in range(len(w)):
                for m, tau in zip(*np.nonzero(outcome[b])):
                    pr = reach * w[b] * outcome[b, m, tau]
                    out = prefix + tuple(int(v) for v in x[b, m, :tau])
                    counts["accepted"] += pr * tau
                    weights = correction[b, m, tau]
                    total = weights.sum()
                    if total == 0:
                        _require(
                            tau == L and len(out) == inst.T + 1,
                            f"{where}: no token follows {tau} accepted drafts of {L} before the horizon",
                        )
                        law[out] = law.get(out, 0.0) + pr
                        continue
                    counts["bonus" if 0 < tau == L else "rejections"] += pr
                    for y in np.nonzero(weights)[0]:
                        seq = out + (int(y),)
                        into = law if len(seq) == inst.T + 1 else frontier[len(seq)]
                        into[seq] = into.get(seq, 0.0) + pr * weights[y] / total
    return MethodEnumeration(law, {k: float(v) for k, v in counts.items()})


def _target_probability(inst, seq) -> float:
    prob = float(inst.rho[seq[0]])
    for n in range(1, len(seq)):
        prob *= float(inst.Q[n - 1][seq[n - 1], seq[n]])
    return prob


def assert_preserves_target_law(method: Method, inst, *, atol: float = 1e-9) -> float:
    """Assert that ``method``'s output sequence on ``inst`` follows the target chain exactly.

    Returns the largest gap between the two laws over all sequences (the mass of sequences the
    method never outputs included). Raises ``AssertionError`` naming the worst sequence when it
    exceeds ``atol``.
    """
    law = enumerate_method(method, inst).law
    target = {seq: _target_probability(inst, seq) for seq in law}
    gaps = {seq: abs(law[seq] - target[seq]) for seq in law}
    worst = max(gaps, key=gaps.get)
    missing = max(1.0 - sum(target.values()), 0.0)  # target mass on sequences the method never outputs
    gap = max(gaps[worst], missing)
    if gap > atol:
        raise AssertionError(
            f"{type(method).__name__} does not output the target's law: sequence {worst} has probability "
            f"{law[worst]:.12g} against the target's {target[worst]:.12g}; target mass never output {missing:.3g}"
        )
    return float(gap)


def assert_counts_match_theory(
    method: Method, inst, *, n_runs: int = 20_000, key=0, z: float = 5.0, rtol: float = 1e-9
) -> dict:
    """Assert that ``method``'s exact expectations and its simulator agree with the enumerated counts.

    For every count of :data:`COUNTED` that ``method.expected(inst)`` gives, the value must equal the
    enumeration's to ``rtol`` (a method whose ``expected`` is ``None`` has only its simulator checked; draft
    calls and discarded drafts, whose conventions differ between methods, are not compared); and
    ``speculab.sim.simulate(inst, method, n_runs, key)`` must agree with
    the enumeration within ``z`` standard errors (exactly, where the count does not vary). Returns
    ``{count: z-score}`` of the simulation. Raises ``AssertionError`` listing every disagreement.
    """
    from speculab.sim import simulate

    exact = enumerate_method(method, inst).counts
    problems = []
    expected = method.expected(inst)
    for name, value in expected.items() if expected is not None else ():
        if name in exact and not np.isclose(value, exact[name], rtol=rtol, atol=rtol):
            problems.append(f"theory {name} = {value:.12g}, enumeration {exact[name]:.12g}")
    counts = simulate(inst, method, n_runs, key)
    scores = {}
    for name in COUNTED:
        est = counts.estimate(name)
        if est.se == 0:
            scores[name] = 0.0 if np.isclose(est.mean, exact[name], rtol=rtol, atol=rtol) else float("inf")
        else:
            scores[name] = (est.mean - exact[name]) / est.se
        if not abs(scores[name]) < z:
            problems.append(
                f"simulated {name} = {est.mean:.6g} ± {est.se:.2g}, enumeration {exact[name]:.6g} "
                f"(z = {scores[name]:+.2f})"
            )
    if problems:
        raise AssertionError(f"{type(method).__name__} on {inst!r}: " + "; ".join(problems))
    return scores
