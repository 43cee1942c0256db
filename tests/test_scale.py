"""Compact instances: the theory at real-vocabulary scale (stationary and context-free kernels stored once).

A compact instance must give the very numbers of the same instance stored in full,
and the exact counts must never allocate anything of size ``T V²``: the memory
checks below use ``tracemalloc`` (numpy reports its buffers to it), so they are
deterministic, and the sizes are chosen so that one ``(T, V, V)`` array would be
hundreds of times over the bound.
"""

import tracemalloc

import numpy as np
import pytest

from speculab import kernels
from speculab.methods import SD, BatchSD, Biased, BlockVerification, SpecDecPP, Sprinter
from speculab.sim import simulate
from speculab.theory import (
    MarkovInstance,
    batch_expected_rejections,
    expected_rejections,
    fuzzy_profile,
    is_unbiased,
    iid_tokens_per_round,
    lookahead_counts,
    output_law,
    sd_expected_rejections,
)
from speculab.theory.instance import compact


def _pair(V, seed=0, concentration=1.0):
    rng = np.random.default_rng(seed)
    return rng.dirichlet(np.full(V, concentration), size=V), rng.dirichlet(np.full(V, concentration), size=V)


def _full(inst):
    """The same instance with every position stored (no broadcast)."""
    return MarkovInstance(np.ascontiguousarray(inst.P), np.ascontiguousarray(inst.Q), inst.rho)


def _peak_mb(fn):
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


# -- storage ---------------------------------------------------------------------------------------------------
def test_stationary_and_context_free_instances_store_their_kernels_once():
    Pm, Qm = _pair(4)
    st = MarkovInstance.stationary(Pm, Qm, T=1000)
    cf = MarkovInstance.context_free(Pm[0], Qm[0], T=1000)
    full = _full(st)
    assert compact(st.P).shape == compact(st.Q).shape == (1, 4, 4)
    assert compact(cf.P).shape == (1, 1, 4)
    assert compact(full.P).shape == (1000, 4, 4)
    assert st.P.shape == (1000, 4, 4) and not st.P.flags.writeable
    np.testing.assert_array_equal(st.P[517], Pm)
    with pytest.raises(ValueError):
        st.P[0, 0, 0] = 0.5


def test_huge_stack_given_as_a_broadcast_is_accepted_without_materialising():
    """A (10⁶, 2000, 2000) stack would be 32 TB: only its row is read, validated and stored."""
    p = np.full(2000, 1 / 2000)
    inst = MarkovInstance(np.broadcast_to(p, (10**6, 2000, 2000)), np.broadcast_to(p, (10**6, 2000, 2000)), p)
    assert inst.T == 10**6 and compact(inst.P).shape == (1, 1, 2000)
    assert sd_expected_rejections(MarkovInstance.context_free(p, p, T=10)).rejections == 0.0


# -- compact = full -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["stationary", "context_free"])
def test_compact_and_full_instances_give_the_same_theory(kind):
    Pm, Qm = _pair(5, seed=3, concentration=0.5)
    if kind == "stationary":
        inst = MarkovInstance.stationary(Pm, Qm, T=9, rho=Qm[2])
    else:
        inst = MarkovInstance.context_free(Pm[1], Qm[1], T=9, rho=Qm[2])
    full = _full(inst)
    biased_b = lambda p, q: kernels.over_acceptance(p, q, 0.05)  # noqa: E731
    biased_P = lambda p, q, b: kernels.optimal_rejection(p, q, b)  # noqa: E731
    checks = [
        lambda i: sd_expected_rejections(i).rejections_per_position,
        lambda i: expected_rejections(i, lambda p, q: 0.5 * kernels.sd_acceptance(p, q)).rejections_per_position,
        lambda i: expected_rejections(i, biased_b, biased_P).rejections_per_position,
        lambda i: expected_rejections(i, np.ascontiguousarray(kernels.sd_acceptance(i.P, i.Q))).rejections_per_position,
        lambda i: output_law(i, biased_b, biased_P),
        lambda i: batch_expected_rejections(i, 3).rejections_per_position,
        lambda i: batch_expected_rejections(i, np.inf).oracle_calls_per_position,
        lambda i: lookahead_counts(i, 3).oracle_calls_per_position,
        lambda i: lookahead_counts(i, None).rejections_per_position,
        lambda i: lookahead_counts(i, 2, M=3).accepted_per_position,
        lambda i: lookahead_counts(i, 4, b=biased_b, rejection=biased_P).bonus_per_position,
        lambda i: i.marginals(),
        lambda i: i.tv(),
    ]
    for check in checks:
        np.testing.assert_allclose(check(inst), check(full), rtol=0, atol=1e-13)


@pytest.mark.parametrize("method", [SD(), SD(K=3), BatchSD(M=3), Biased(0.05, K=2), BlockVerification(K=3)], ids=str)
def test_compact_and_full_instances_give_the_same_simulation(method):
    """The same key gives token-for-token the same runs: the simulators read the same rows."""
    Pm, Qm = _pair(4, seed=5, concentration=0.5)
    inst = MarkovInstance.stationary(Pm, Qm, T=12)
    a = simulate(inst, method, 500, key=11, return_sequences=True)
    b = simulate(_full(inst), method, 500, key=11, return_sequences=True)
    np.testing.assert_array_equal(a.sequences, b.sequences)
    for name in ("rejections", "oracle_calls", "draft_calls", "accepted"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))


# -- scale -----------------------------------------------------------------------------------------------------
def test_context_free_at_a_real_vocabulary_size_in_little_memory():
    """V = 50,000, T = 1000: a (T, V, V) stack would be 2·10¹³ bytes; each count stays under 32 MB."""
    rng = np.random.default_rng(0)
    p, q = rng.dirichlet(np.ones(50_000)), rng.dirichlet(np.ones(50_000))
    inst = MarkovInstance.context_free(p, q, T=1000)
    d = float(kernels.tv(p, q))
    out = {}
    peaks = {
        "T1": _peak_mb(lambda: out.setdefault("T1", sd_expected_rejections(inst))),
        "T3": _peak_mb(lambda: out.setdefault("T3", batch_expected_rejections(inst, 8))),
        "L": _peak_mb(lambda: out.setdefault("L", lookahead_counts(inst, 4))),
    }
    assert max(peaks.values()) < 32, peaks
    assert out["T1"].rejections == pytest.approx(1000 * d, rel=1e-12)
    # i.i.d. acceptance: every position after the first has the same batch-root probability, and
    # the rounds away from the horizon output Leviathan's (1 − α^{K+1})/(1 − α) tokens
    assert out["T3"].rejections < out["T1"].rejections
    rounds = out["L"].oracle_calls_per_position[500:900].sum()
    assert 400 / rounds == pytest.approx(iid_tokens_per_round(1 - d, 4), rel=2e-3)


def test_stationary_counts_stream_in_memory_of_order_V_squared():
    """V = 500, T = 2000: the (T, V, V) stack is 4 GB; T1, T3 and L stay within a few (V, V) kernels."""
    Pm, Qm = _pair(500, seed=1)
    inst = MarkovInstance.stationary(Pm, Qm, T=2000)
    kernel_mb = 500 * 500 * 8 / 2**20  # 1.9 MB
    for name, fn in [
        ("T1", lambda: sd_expected_rejections(inst)),
        ("T3", lambda: batch_expected_rejections(inst, 8)),
        ("L", lambda: lookahead_counts(inst, 4)),
    ]:
        assert _peak_mb(fn) < 12 * kernel_mb, name


def test_float32_instances_agree_with_float64():
    Pm, Qm = _pair(50, seed=2)
    a = MarkovInstance.stationary(Pm, Qm, T=300)
    b = MarkovInstance.stationary(Pm, Qm, T=300, dtype="float32")
    assert b.P.dtype == b.rho.dtype == np.float32 and b.dtype == "float32"
    for fn in (
        lambda i: sd_expected_rejections(i).rejections,
        lambda i: batch_expected_rejections(i, 4).rejections,
        lambda i: lookahead_counts(i, 3).oracle_calls,
    ):
        assert fn(b) == pytest.approx(fn(a), rel=1e-5)
    assert sd_expected_rejections(b).rejections_per_position.dtype == np.float32
    with pytest.raises(ValueError, match="dtype must be 'float64' or 'float32'"):
        MarkovInstance.stationary(Pm, Qm, T=3, dtype="float16")


# -- persistence and bad input ------------------------------------------------------------------------------
def test_compact_instances_are_saved_compactly(tmp_path):
    Pm, Qm = _pair(30)
    inst = MarkovInstance.stationary(Pm, Qm, T=10_000)
    path = tmp_path / "st.npz"
    inst.save(path)
    assert path.stat().st_size < 3 * 30 * 30 * 8  # the two kernels, not 10⁴ copies
    back = MarkovInstance.load(path)
    assert back.T == 10_000 and compact(back.P).shape == (1, 30, 30)
    np.testing.assert_array_equal(back.Q[9999], Qm)


def test_format_1_files_still_load(tmp_path):
    inst = MarkovInstance.random(3, 2, 0)
    path = tmp_path / "v1.npz"
    np.savez(path, P=inst.P, Q=inst.Q, rho=inst.rho, format_version=1)
    back = MarkovInstance.load(path)
    np.testing.assert_array_equal(back.P, inst.P)


def test_empty_horizon_is_refused():
    with pytest.raises(ValueError, match="T >= 1"):
        MarkovInstance(np.ones((0, 2, 2)) / 2, np.ones((0, 2, 2)) / 2, [0.5, 0.5])


@pytest.mark.parametrize(
    "name, fn",
    [
        ("simulate SD", lambda inst: simulate(inst, SD(K=4), 200, key=0)),
        ("simulate batch", lambda inst: simulate(inst, BatchSD(3), 200, key=0)),
        ("simulate biased", lambda inst: simulate(inst, Biased(0.01), 200, key=0)),
        ("simulate block", lambda inst: simulate(inst, BlockVerification(3), 200, key=0)),
        ("simulate sprinter", lambda inst: simulate(inst, Sprinter(0.9, 0.1), 200, key=0)),
        ("simulate specdec++", lambda inst: simulate(inst, SpecDecPP(0.5), 200, key=0)),
        ("sprinter theory", lambda inst: Sprinter(0.9, 0.1).expected(inst)),
        ("fuzzy theory", lambda inst: fuzzy_profile(inst, 0.3, "js", 3)),
        ("is_unbiased", lambda inst: is_unbiased(inst, kernels.sd_acceptance)),
    ],
)
def test_simulators_and_other_theory_keep_compact_instances_compact(name, fn):
    """V = T = 200 stationary: one (T, V, V) float64 stack is 61 MB; none is built (bound 10 MB)."""
    Pm, Qm = _pair(200, seed=6)
    inst = MarkovInstance.stationary(Pm, Qm, T=200)
    assert _peak_mb(lambda: fn(inst)) < 10, name


def test_the_jax_engine_keeps_the_compact_kernels():
    pytest.importorskip("jax")
    from speculab.sim.jax_engine import _Tables
    import jax.numpy as jnp

    Pm, Qm = _pair(6)
    P, Q, _ = _Tables(MarkovInstance.stationary(Pm, Qm, T=500), jnp).arrays
    assert P.shape == Q.shape == (1, 6, 6)


def test_format_2_files_with_a_bad_horizon_are_refused(tmp_path):
    P = np.full((1, 2, 2), 0.5)
    for T in (2.7, np.array([3, 4])):
        path = tmp_path / "bad.npz"
        np.savez(path, P=P, Q=P, rho=[0.5, 0.5], T=T, format_version=2)
        with pytest.raises(ValueError, match="T must be one integer"):
            MarkovInstance.load(path)


@pytest.mark.parametrize("dtype", ["f4", np.float32, "float32"])
def test_float32_is_asked_for_in_any_numpy_spelling(dtype):
    assert (
        MarkovInstance.stationary(np.eye(2) * 0.5 + 0.25, np.eye(2) * 0.5 + 0.25, T=3, dtype=dtype).dtype == "float32"
    )


@pytest.mark.parametrize("dtype", ["float16", None, [1], "int64"])
def test_other_dtypes_are_refused(dtype):
    with pytest.raises(ValueError, match="dtype must be"):
        MarkovInstance.stationary(np.eye(2) * 0.5 + 0.25, np.eye(2) * 0.5 + 0.25, T=3, dtype=dtype)


@pytest.mark.slow
def test_non_stationary_long_horizon():
    """Issue target: the non-stationary form at T = 10⁴, V = 50 (two 200 MB stacks), T1 = T3 at M = 1 = the lookahead
    chain at K = T, and more drafts never add rejections."""
    inst = MarkovInstance.random(10_000, 50, 0)
    t1 = sd_expected_rejections(inst).rejections
    assert batch_expected_rejections(inst, 1).rejections == pytest.approx(t1, rel=1e-10)
    assert lookahead_counts(inst, None).rejections == pytest.approx(t1, rel=1e-10)
    assert batch_expected_rejections(inst, 8).rejections < t1
