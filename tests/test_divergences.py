"""TV, residual, KL and JS: identities (hypothesis), known values, bad input."""

import numpy as np
import pytest
from hypothesis import given

from speculab.testing import distribution_pairs
from speculab.theory import js, kl, residual, residual_mass, sd_acceptance, tv


@given(distribution_pairs())
def test_tv_three_forms_agree(pq):
    p, q = pq
    half_l1 = 0.5 * np.abs(p - q).sum()
    pos = np.maximum(p - q, 0).sum()
    one_minus_min = 1 - np.minimum(p, q).sum()
    assert np.isclose(tv(p, q), half_l1, atol=1e-12)
    assert np.isclose(tv(p, q), pos, atol=1e-12)
    assert np.isclose(tv(p, q), one_minus_min, atol=1e-12)
    assert np.isclose(tv(p, q), tv(q, p), atol=1e-12)
    assert 0 <= tv(p, q) <= 1


@given(distribution_pairs())
def test_residual_mass_is_tv_and_residual_is_a_distribution(pq):
    p, q = pq
    assert np.isclose(residual_mass(q, p), tv(p, q), atol=1e-12)
    r = residual(q, p)
    assert np.all(r >= 0)
    if residual_mass(q, p) > 0:
        assert np.isclose(r.sum(), 1.0)
        # supported exactly where q > p
        assert np.all((r > 0) == (q > p))
    else:
        assert r.sum() == 0


@given(distribution_pairs())
def test_sd_decomposition_recovers_q(pq):
    """min(1, q/p) p + [q − p]_+ TV = q: the one-token law of speculative decoding."""
    p, q = pq
    law = sd_acceptance(p, q) * p + residual(q, p) * tv(p, q)
    np.testing.assert_allclose(law, q, atol=1e-12)


@given(distribution_pairs())
def test_kl_js_properties(pq):
    p, q = pq
    k = kl(p, q)
    assert k >= -1e-12
    j = js(p, q)
    assert -1e-12 <= j <= np.log(2) + 1e-12
    assert np.isclose(j, js(q, p), atol=1e-12)
    if np.array_equal(p, q):
        assert k == 0 and abs(j) < 1e-15
    # Pinsker: TV <= sqrt(KL / 2)
    if np.isfinite(k):
        assert tv(p, q) <= np.sqrt(max(k, 0.0) / 2) + 1e-9


def test_known_values():
    p, q = np.array([0.5, 0.5, 0.0]), np.array([0.2, 0.3, 0.5])
    assert tv(p, q) == pytest.approx(0.5)
    np.testing.assert_allclose(residual(q, p), [0, 0, 1])
    assert kl(q, p) == np.inf
    assert kl(p, q) == pytest.approx(0.5 * np.log(0.5 / 0.2) + 0.5 * np.log(0.5 / 0.3))
    assert js([1, 0], [0, 1]) == pytest.approx(np.log(2))
    np.testing.assert_allclose(sd_acceptance(p, q), [0.4, 0.6, 1.0])


def test_broadcasts_over_leading_axes():
    rng = np.random.default_rng(0)
    P, Q = rng.dirichlet(np.ones(5), (3, 4)), rng.dirichlet(np.ones(5), (3, 4))
    out = tv(P, Q)
    assert out.shape == (3, 4)
    assert out[1, 2] == pytest.approx(tv(P[1, 2], Q[1, 2]))


@pytest.mark.parametrize("fn", [tv, residual, residual_mass, sd_acceptance, kl, js])
@pytest.mark.parametrize(
    "p, q, match",
    [
        ([0.5, 0.6], [0.5, 0.5], "sum to 1"),
        ([1.2, -0.2], [0.5, 0.5], "non-negative"),
        ([np.nan, 1.0], [0.5, 0.5], "finite"),
        ([0.5, 0.5], [0.2, 0.3, 0.5], "same shape"),
        ([], [], "non-empty"),
        ("ab", [0.5, 0.5], "array of numbers"),
    ],
)
def test_bad_input_is_refused(fn, p, q, match):
    with pytest.raises(ValueError, match=match):
        fn(p, q)


def test_inverse_cdf_sampling_never_returns_a_zero_weight_index_and_breaks_ties_upward():
    """``sample_cumulative`` returns the smallest ``i`` with ``cum[i] > u · total``: a uniform landing exactly on a
    boundary goes to the next index with weight, so a leading zero weight is never drawn, even at ``u = 0`` (found
    by mutation testing of the fast tier: ``<`` for ``<=`` survived; only slow tests drew such a tie)."""
    from speculab import kernels

    cum = np.cumsum([0.0, 0.5, 0.5])  # weights 0, 1/2, 1/2
    u = np.array([0.0, 0.25, 0.5, 0.75])
    np.testing.assert_array_equal(kernels.sample_cumulative(np.broadcast_to(cum, (4, 3)), u), [1, 1, 2, 2])
