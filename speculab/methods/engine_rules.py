r"""Verification rules that engines ship or were asked about, written as verifiers for :mod:`speculab.certify`.

None of these is a registered method: each is the rule an issue describes, in the signature of
:meth:`~speculab.methods.Method.round_law` (numpy), so that ``certify`` gives it an exact certificate or its exact
bias. Convention: ``p`` = draft, ``q`` = target.

* :func:`exact_match` — keep a draft iff it equals the token the target samples itself at that slot, else output
  the target's token (mlx-lm's default at temperature > 0, mlx-lm #1709). **Lossless**:
  ``P(y) = p(y) q(y) + Σ_{x≠y} p(x) q(y) = q(y)``; it accepts ``Σ p·q`` per slot where SD accepts
  ``Σ min(p, q)``.
* :func:`greedy_match` — keep a draft iff it is the target's most likely token, else output that token (an
  argmax comparison left on at temperature > 0, as mlxcel #902 describes). **Biased**: every token is the target's
  argmax, ``TV = 1 − max q`` per token.
* :class:`EagleP1` — tree code that takes each drafted child's draft probability to be 1 (EAGLE #183): accept a
  child ``x`` with ``r(x)``, on refusal drop ``x`` from ``r``. **Lossless** (at one node
  ``P(y) = p(y) q(y) + Σ_{x≠y} p(x) (1 − q(x)) q(y) / (1 − q(x)) = q(y)``), accepting ``Σ p·r`` where RRS
  accepts ``Σ min(p, r)``.
* :func:`warped_sd` — SD whose sampling warp (temperature, top-k, top-p) reaches one side only. Certified with
  ``certify(..., warp=w)``: drafts are drawn from ``w(p)`` and the stream must follow ``w(q)``, while the verifier
  is handed the raw laws. Both sides warped: lossless. The target's left raw (vLLM #9834, fixed by #10198): the
  stream follows the raw ``q``, ``TV(q, w(q))`` per token. The draft's left raw in the ratio: biased.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from speculab.methods.chain import chain_law
from speculab.methods.rrs import RRS
from speculab.methods.tree import TreeLaw
from speculab.methods.sd import SD

__all__ = ["exact_match", "greedy_match", "EagleP1", "eagle_round_law", "warped_sd", "top_k_warp"]


def exact_match(p, q, x, *, bonus: bool):
    """The round law of exact-match acceptance (module docstring): at slot ``i`` the target samples ``y ~ q_i``; the
    draft is kept iff ``y = x_i``, else ``y`` is output — a correction from ``q_i`` without ``x_i``."""
    q = np.asarray(q, dtype=float)
    L = x.shape[-1]
    a = np.take_along_axis(q[..., :L, :], x[..., None], axis=-1)[..., 0]  # P(y = x_i) = q_i(x_i)
    others = q[..., :L, :].copy()
    np.put_along_axis(others, x[..., None], 0.0, axis=-1)  # y given y != x_i, unnormalised
    reject = 1.0 - np.sum(np.asarray(p, dtype=float) * q[..., :L, :], axis=-1)  # before the draft: 1 − Σ p·q
    return chain_law(a, reject, others, q, bonus=bonus)


def greedy_match(p, q, x, *, bonus: bool):
    """The round law of argmax comparison (module docstring): keep ``x_i`` iff it is ``q_i``'s first most likely
    token, else output that token; a whole block is followed by the argmax of ``q_{L+1}``."""
    q = np.asarray(q, dtype=float)
    L = x.shape[-1]
    top = (np.arange(q.shape[-1]) == np.argmax(q, axis=-1)[..., None]).astype(float)  # (..., L + 1, V)
    a = np.take_along_axis(top[..., :L, :], x[..., None], axis=-1)[..., 0]
    reject = 1.0 - np.sum(top[..., :L, :] * np.asarray(p, dtype=float), axis=-1)
    return chain_law(a, reject, top[..., :L, :], top, bonus=bonus)


def eagle_round_law(tree, p, q, x, *, bonus: bool) -> TreeLaw:
    """EAGLE #183's rule on one drafted tree in the node layout (module docstring): each child ``x`` of a node is
    accepted with ``r(x)``, ``r`` starting at the node's ``q``; a refused child's token is dropped from ``r``
    (renormalised); a node whose children are all refused outputs a token of ``r``; a leaf outputs the bonus."""
    n, N1, V = x.shape[0], tree.size + 1, p.shape[-1]
    reach, end, corr = np.zeros((n, N1)), np.zeros((n, N1)), np.zeros((n, N1, V))
    reach[:, 0] = 1.0
    rows = np.arange(n)
    for u in range(N1):
        if not tree.children[u]:
            end[:, u], corr[:, u] = reach[:, u], q[:, u] if (bonus or tree.depth[u] < tree.height) else 0.0
            continue
        r, stay = np.array(q[:, u], dtype=float), np.ones(n)
        for c in tree.children[u]:
            a = r[rows, x[:, c]]
            reach[:, c] = reach[:, u] * stay * a
            stay = stay * (1 - a)
            r[rows, x[:, c]] = 0.0
            mass = r.sum(-1, keepdims=True)
            r = r / np.where(mass > 0, mass, 1.0)
        end[:, u], corr[:, u] = reach[:, u] * stay, r
    return TreeLaw(end, corr)


@dataclass(frozen=True)
class EagleP1(RRS):
    """A token tree verified by EAGLE #183's rule (draft probabilities taken to be 1): :func:`eagle_round_law`.
    Not registered: a rule to certify, beside :class:`~speculab.methods.RRS` on the same tree."""

    def round_law(self, p, q, x, *, bonus):
        return eagle_round_law(self.layout_tree(x), p, q, x, bonus=bonus)


def top_k_warp(k: int):
    """The top-``k`` warp of laws ``(..., V)``: the ``k`` likeliest tokens (ties at the boundary kept), renormalised."""
    if not (isinstance(k, (int, np.integer)) and not isinstance(k, bool) and k >= 1):
        raise ValueError(f"k must be an integer >= 1; got {k!r}")

    def warp(law):
        law = np.asarray(law, dtype=float)
        if k >= law.shape[-1]:
            return law
        cut = -np.sort(-law, axis=-1)[..., k - 1 : k]  # the k-th largest
        kept = np.where(law >= cut, law, 0.0)
        return kept / kept.sum(axis=-1, keepdims=True)

    warp.__name__ = f"top-{k}"
    return warp


def warped_sd(warp, *, draft: bool = True, target: bool = True):
    """SD's round law on laws warped by ``warp`` on the sides named (module docstring); ``draft=False`` computes the
    ratio and residual with the raw draft law, ``target=False`` with the raw target law."""
    if not callable(warp):
        raise ValueError(f"warp must be a function of laws (..., V); got {warp!r}")
    sd = SD()

    def verifier(p, q, x, *, bonus):
        return sd.round_law(warp(p) if draft else p, warp(q) if target else q, x, bonus=bonus)

    sides = {(True, True): "both sides", (True, False): "the draft only", (False, True): "the target only"}
    if (draft, target) not in sides:
        raise ValueError("warped_sd: warp at least one side (draft=True or target=True)")
    verifier.__name__ = f"SD with {getattr(warp, '__name__', 'a warp')} on {sides[draft, target]}"
    return verifier
