"""Typical acceptance (Medusa, Cai et al. 2024): its rule against a literal one, its exact per-token law and bias, its
certificate, and bad input.

Exact checks only: the rule and the one-step law are compared with a token-by-token implementation written here
from the definition, and with the law certify enumerates from the method's round law.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from speculab import kernels
from speculab.certify import certify, nasty_pairs, stream_law
from speculab.methods import Typical
from speculab.methods.typical import CORRECTIONS, typical_law, typical_rule, typical_threshold


def _literal(p, q, eps, delta, correction):
    """The one-step output law, token by token from the definition."""
    V = len(q)
    H = -sum(v * math.log(v) for v in q if v > 0)
    tau = min(eps, delta * math.exp(-H))
    passed = [q[x] > tau for x in range(V)]
    if correction == "q":
        R = list(q)
    elif correction == "argmax":
        top = max(range(V), key=lambda y: (q[y], -y))  # the first of the most likely
        R = [1.0 if y == top else 0.0 for y in range(V)]
    else:
        kept = [q[y] if q[y] >= tau else 0.0 for y in range(V)]
        R = [v / sum(kept) for v in kept] if sum(kept) > 0 else list(q)
    refused = sum(p[x] for x in range(V) if not passed[x])
    return np.array([(p[y] if passed[y] else 0.0) + refused * R[y] for y in range(V)])


def _pairs(V=4, n=12, seed=3):
    rng = np.random.default_rng(seed)
    out = [(p, q) for _, p, q in nasty_pairs(V)]
    out += [(rng.dirichlet(np.full(V, c)), rng.dirichlet(np.full(V, c))) for c in (1.0, 0.3) for _ in range(n)]
    return out


@pytest.mark.parametrize("correction", CORRECTIONS)
@pytest.mark.parametrize("eps, delta", [(0.09, 0.3), (0.3, 0.6), (0.0, 1.0), (1.0, 0.0), (0.5, 5.0)])
def test_the_one_step_law_is_the_literal_rules(correction, eps, delta):
    for p, q in _pairs():
        want = _literal(p, q, eps, delta, correction)
        np.testing.assert_allclose(typical_law(p, q, eps, delta, correction), want, rtol=0, atol=1e-15)
        np.testing.assert_allclose(want.sum(), 1.0, atol=1e-14)


@pytest.mark.parametrize("correction", CORRECTIONS)
def test_certify_enumerates_the_same_law_from_the_round_law(correction):
    """The first token of the method's rounds (a block of two drafts, so the rule runs through the chain
    machinery) is the one-step law, and its TV to ``q`` the exact per-token bias certify reports at that pair."""
    method = Typical(0.3, 0.6, correction, K=2)
    for p, q in _pairs(V=3, n=6):
        law = typical_law(p, q, 0.3, 0.6, correction)
        np.testing.assert_allclose(stream_law(method, p, q, 2, 1), law, rtol=0, atol=1e-15)
        np.testing.assert_allclose(
            stream_law(method, p, q, 2, 2), np.multiply.outer(law, law), atol=1e-15
        )  # a second token: after an accepted draft the next slot's rule, after a refusal a fresh round
    cert = certify(method, search=False)
    assert not cert.lossless and cert.first_token_tv == pytest.approx(
        float(kernels.tv(typical_law(cert.p, cert.q, 0.3, 0.6, correction), cert.q)), abs=1e-15
    )


def test_a_threshold_above_every_probability_is_lossless_only_with_corrections_from_q():
    """No draft passes when ``τ(q) >= max q``: the position outputs ``P``, the target's law only for ``P = q``
    (with ``argmax``, the bias is ``1 − max q``)."""
    rng = np.random.default_rng(7)
    for _ in range(20):
        p, q = rng.dirichlet(np.ones(5)), rng.dirichlet(np.ones(5))
        assert float(typical_threshold(q, 1.0, 50.0)) >= q.max()  # δ e^{−H} >= 50/5 > 1
        np.testing.assert_allclose(typical_law(p, q, 1.0, 50.0, "q"), q, atol=1e-15)
        np.testing.assert_allclose(typical_law(p, q, 1.0, 50.0, "typical"), q, atol=1e-15)  # nothing reaches τ
        argmax = typical_law(p, q, 1.0, 50.0, "argmax")
        assert float(kernels.tv(argmax, q)) == pytest.approx(1 - q.max(), abs=1e-15)
    assert certify(Typical(1.0, 50.0, K=2), search=False).lossless


def test_the_worst_pair_approaches_the_bias_bound_one_minus_the_threshold():
    """A point-mass draft on a token the target holds just above ``τ``: every draft passes and the position
    outputs that token, ``TV = 1 − q(x)``; certify's search reaches it (V = 3, ``ε = 0.09``: the threshold is
    ``ε``, since ``δ e^{−H} >= 0.3 / 3``)."""
    cert = certify(Typical(0.09, 0.3, K=1))
    assert cert.first_token_tv == pytest.approx(1 - 0.09, abs=1e-4) and cert.first_token_tv < 1 - 0.09


def test_torch_and_numpy_give_the_same_rule():
    rng = np.random.default_rng(1)
    p, q = rng.dirichlet(np.ones(6), size=(2, 3)), rng.dirichlet(np.full(6, 0.3), size=(2, 3))
    for correction in CORRECTIONS:
        want = typical_rule(p, q, 0.2, 0.5, correction)
        got = typical_rule(torch.from_numpy(p), torch.from_numpy(q), 0.2, 0.5, correction)
        for a, b in zip(want, got):
            np.testing.assert_allclose(b.numpy(), a, rtol=0, atol=1e-15)


def test_ties_at_the_argmax_take_the_first_token():
    p, q = np.array([0.1, 0.2, 0.7]), np.array([0.4, 0.4, 0.2])
    _, R = typical_rule(p, q, 1.0, 50.0, "argmax")
    assert R.tolist() == [1.0, 0.0, 0.0]


def test_a_token_at_the_threshold_is_refused_as_a_draft_and_kept_in_the_typical_set():
    """τ = ε = 0.2 exactly (δ e^(−H) is far above it): the draft test is strict, ``q(x) > τ``, while the typical
    correction samples from ``{y: q(y) ≥ τ}`` (module docstring), so the token of probability 0.2 is refused as a
    draft and kept in the correction's support."""
    p, q = np.array([0.1, 0.2, 0.7]), np.array([0.5, 0.3, 0.2])
    assert float(typical_threshold(q, 0.2, 50.0)) == 0.2
    b, R = typical_rule(p, q, 0.2, 50.0, "typical")
    assert b.tolist() == [1.0, 1.0, 0.0] and R.tolist() == q.tolist()


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(eps=-0.1, delta=0.3), "eps must be a finite number >= 0"),
        (dict(eps=float("nan"), delta=0.3), "eps must be a finite number >= 0"),
        (dict(eps=0.1, delta=float("inf")), "delta must be a finite number >= 0"),
        (dict(eps=True, delta=0.3), "eps must be a finite number >= 0"),
        (dict(eps=0.1, delta=0.3, correction="residual"), "correction must be one of q, argmax, typical"),
        (dict(eps=0.1, delta=0.3, K=0), "K"),
    ],
)
def test_bad_input_is_refused_naming_it(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Typical(**kwargs)
    if "correction" in kwargs:
        with pytest.raises(ValueError, match=match):
            typical_rule(np.ones(2) / 2, np.ones(2) / 2, 0.1, 0.3, kwargs["correction"])


def test_the_public_functions_check_eps_and_delta():
    p = np.ones(3) / 3
    with pytest.raises(ValueError, match="eps must be a finite number >= 0"):
        typical_rule(p, p, -1.0, 0.3)
    with pytest.raises(ValueError, match="delta must be a finite number >= 0"):
        typical_law(p, p, 0.1, float("nan"))
