"""The differentiable theory (JAX) is the numpy theory, and its gradients are right."""

import numpy as np
import pytest

jax = pytest.importorskip("jax")

import jax.numpy as jnp  # noqa: E402

from speculab import kernels  # noqa: E402
from speculab.theory import (  # noqa: E402
    MarkovInstance,
    batch_expected_rejections,
    lookahead_counts,
    sd_expected_rejections,
)
from speculab.theory import autodiff as ad  # noqa: E402
from conftest import claims_of, full_tier_only  # noqa: E402

COUNTS = ("rejections", "oracle_calls", "draft_calls", "accepted", "bonus", "discarded")


@pytest.fixture(autouse=True)
def x64():
    with jax.enable_x64(True):
        yield


def _instances():
    rng = np.random.default_rng(4)
    Pm, Qm = rng.dirichlet(np.full(5, 0.6), size=5), rng.dirichlet(np.full(5, 0.6), size=5)
    return [
        MarkovInstance.random(9, 4, 0, concentration=0.5),
        MarkovInstance.random(2, 4, 1, concentration=0.5),  # two stored positions, each read at its own step
        MarkovInstance.stationary(Pm, Qm, T=11, rho=Qm[1]),
        MarkovInstance.context_free(Pm[0], Qm[0], T=7),
    ]


@pytest.mark.parametrize(
    "inst",
    full_tier_only(
        (pytest.param(i, id=n) for i, n in zip(_instances(), ["random", "random T=2", "stationary", "context-free"])),
        "random",
        "stationary",
    ),
)
def test_jax_theory_is_the_numpy_theory(inst):
    P, Q, rho, T = ad.arrays_of(inst)
    np.testing.assert_allclose(
        ad.sd_expected_rejections(P, Q, rho, T).rejections_per_position,
        sd_expected_rejections(inst).rejections_per_position,
        rtol=0,
        atol=1e-12,
    )
    for M in (1, 3, np.inf):
        a, b = ad.batch_expected_rejections(P, Q, rho, M, T), batch_expected_rejections(inst, M)
        np.testing.assert_allclose(a.rejections_per_position, b.rejections_per_position, rtol=0, atol=1e-12)
        np.testing.assert_allclose(a.oracle_calls_per_position, b.oracle_calls_per_position, rtol=0, atol=1e-12)
    for K, M in ((1, 1), (3, 1), (None, 1), (2, 3), (20, 1)):
        a, b = ad.lookahead_counts(P, Q, rho, K, M=M, T=T), lookahead_counts(inst, K, M=M)
        for name in COUNTS:
            assert float(getattr(a, name)) == pytest.approx(getattr(b, name), abs=1e-10), (K, M, name)
    assert float(ad.latency(P, Q, rho, 3, 0.2, 1.0, T=T)) == pytest.approx(
        lookahead_counts(inst, 3).latency(0.2, 1.0), abs=1e-12
    )
    kl = ad.along_target(lambda p, q: kernels.kl(q, p), P, Q, rho, T)
    mu = inst.marginals()[:-1]
    np.testing.assert_allclose(kl, np.einsum("na,na->n", mu, kernels.kl(inst.Q, inst.P)), rtol=1e-12)


def test_a_row_function_gives_one_number_per_context_of_the_kernels_it_is_given():
    """Context-free kernels (one row each, ``(1, 1, V)``): ``f`` must give one number, shape ``(1,)``; one per token,
    ``(V,)``, is refused (it was averaged over the target's law into a number that means nothing). Kernels with a
    row per context take ``(V,)`` or ``(1,)``. The message gives the rows' shapes."""
    p, q = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.2, 0.6])
    P, Q, rho = p[None, None], q[None, None], np.full(3, 1 / 3)
    tv = ad.along_target(kernels.tv, P, Q, rho, 4)
    np.testing.assert_allclose(tv, np.full(4, 0.4), rtol=0, atol=1e-15)  # |0.5-0.2| + |0.3-0.2| = 0.4
    with pytest.raises(ValueError, match=r"shape \(1,\), on rows of shapes \(1, 3\) and \(1, 3\); got shape \(3,\)"):
        ad.along_target(lambda p, q: p[0] * q[0], P, Q, rho, 4)
    _, Qm, rho_m, T = ad.arrays_of(MarkovInstance.random(4, 3, 0))
    with pytest.raises(ValueError, match=r"shape \(3,\) or \(1,\), on rows of shapes \(1, 3\) and \(3, 3\); got"):
        ad.along_target(lambda p, q: p @ q.T, P, Qm, rho_m, T)
    per_context = ad.along_target(lambda p, q: (p * q).sum(-1), P, Qm, rho_m, T)  # (1, 3) against (3, 3): (3,)
    one = ad.along_target(lambda p, q: (p * q).sum(keepdims=True)[0], P, Qm, rho_m, T)  # one number for all: (1,)
    assert per_context.shape == one.shape == (4,)


@pytest.mark.parametrize("objective", ["T1", "T3", "oracle_calls", "latency"])
def test_gradients_match_finite_differences(objective):
    inst = MarkovInstance.random(6, 4, 3)
    _, Q, rho, T = ad.arrays_of(inst)
    logits = jnp.asarray(np.random.default_rng(1).normal(size=(6, 4, 4)))

    def f(L):
        P = ad.draft_from_logits(L)
        if objective == "T1":
            return ad.sd_expected_rejections(P, Q, rho, T).rejections
        if objective == "T3":
            return ad.batch_expected_rejections(P, Q, rho, 3, T).rejections
        if objective == "oracle_calls":
            return ad.lookahead_counts(P, Q, rho, 2, T=T).oracle_calls
        return ad.latency(P, Q, rho, 2, 0.1, 1.0, T=T)

    g = jax.grad(f)(logits)
    assert float(jnp.abs(g).max()) > 1e-3  # the objective depends on the draft
    for seed in range(3):
        d = jnp.asarray(np.random.default_rng(10 + seed).normal(size=logits.shape))
        h = 1e-6
        fd = (f(logits + h * d) - f(logits - h * d)) / (2 * h)
        assert float(jnp.sum(g * d)) == pytest.approx(float(fd), rel=1e-6, abs=1e-9)


def test_compiled_and_differentiated_in_one_call():
    inst = MarkovInstance.random(5, 3, 0)
    P, Q, rho, T = ad.arrays_of(inst)
    value, grad = jax.jit(jax.value_and_grad(lambda L: ad.latency(ad.draft_from_logits(L), Q, rho, 2, 0.1, 1.0, T=T)))(
        jnp.log(P)
    )
    assert float(value) == pytest.approx(lookahead_counts(inst, 2).latency(0.1, 1.0), abs=1e-12)
    assert grad.shape == P.shape


def test_bad_horizons_are_refused():
    inst = MarkovInstance.stationary(np.eye(2) * 0.5 + 0.25, np.eye(2) * 0.5 + 0.25, T=4)
    P, Q, rho, _ = ad.arrays_of(inst)
    with pytest.raises(ValueError, match="T is needed"):
        ad.sd_expected_rejections(P, Q, rho)
    P9 = jnp.broadcast_to(P, (9, 2, 2))
    with pytest.raises(ValueError, match="each must be 1 or T = 4"):
        ad.lookahead_counts(P9, Q, rho, 2, T=4)
    full = MarkovInstance.random(5, 4, 0)  # V = 4: the message must count positions (axis 0), not contexts
    Pf, Qf, rf, _ = ad.arrays_of(full)
    with pytest.raises(ValueError, match="store 5 and 3 positions"):  # not a silently clamped index
        ad.sd_expected_rejections(Pf, Qf[:3], rf)
    with pytest.raises(ValueError, match="share the vocabulary"):
        ad.sd_expected_rejections(Pf, Qf, rf[:2])
    with pytest.raises(ValueError, match="rows per position"):
        ad.sd_expected_rejections(Pf[:, :2], Qf, rf)
    with pytest.raises(ValueError, match=r"P and Q must have shape \(T', A', V\)"):
        ad.sd_expected_rejections(Pf, Qf[0], rf)  # one of the two not 3-D
    # numpy inputs (what compact() gives) are converted
    from speculab.theory.instance import compact

    value = ad.sd_expected_rejections(compact(full.P), compact(full.Q), full.rho).rejections
    assert float(value) == pytest.approx(sd_expected_rejections(full).rejections, abs=1e-12)
    with pytest.raises(ValueError, match="K must be"):
        ad.lookahead_counts(P, Q, rho, 0, T=4)


def test_bad_values_are_refused_where_they_exist():
    """Concrete kernels are checked as distributions (under ``jax.grad`` only their shapes can be)."""
    P, Q, rho, _ = ad.arrays_of(MarkovInstance.random(5, 3, 0))
    cases = [
        (P.at[0, 0, 0].set(jnp.nan), Q, rho, "P must be finite"),
        (P.at[0, 0].set(jnp.array([1.5, -0.5, 0.0])), Q, rho, "P must be non-negative"),
        (P, 2 * Q, rho, "Q must sum to 1"),
        (P, Q, 3 * rho, "rho must sum to 1"),
    ]
    for bad_P, bad_Q, bad_rho, match in cases:
        with pytest.raises(ValueError, match=match):
            ad.sd_expected_rejections(bad_P, bad_Q, bad_rho)
    # the row-sum tolerance: the package's 1e-6 for float64 kernels, float32's resolution over V terms (4 V ε₃₂,
    # 4.8e-5 at V = 100) for float32 ones
    P, Q, rho, _ = ad.arrays_of(MarkovInstance.random(2, 100, 0))
    off = P.at[0, 0].set(P[0, 0] * (1 + 1e-5))
    with pytest.raises(ValueError, match="P must sum to 1"):
        ad.sd_expected_rejections(off, Q, rho)
    P32, Q32, rho32 = (jnp.asarray(np.asarray(A, dtype=np.float32)) for A in (off, Q, rho))
    assert np.isfinite(float(ad.sd_expected_rejections(P32, Q32, rho32).rejections))  # within float32's tolerance
    with pytest.raises(ValueError, match="P must sum to 1"):
        ad.sd_expected_rejections(P32.at[0, 0].set(P32[0, 0] * 1.0001), Q32, rho32)
    with pytest.raises(ValueError, match="logits must be finite"):
        ad.draft_from_logits(jnp.array([jnp.nan, 0.0]))
    with pytest.raises(ValueError, match="inst must be a MarkovInstance"):
        ad.arrays_of(np.zeros((2, 2, 2)))


@pytest.mark.slow
def test_draft_design_reproduction(tmp_path, agrees):
    """``speculab repro draft-design``: distillation is best on KL, the TV and latency fits beat it on rejections and
    latency, every fit improves its own objective, and the theory holds against simulation."""
    from speculab.repro import draft_design

    res = draft_design.run(key=0, out_dir=tmp_path, steps=150, n_runs=4000)
    assert (tmp_path / "draft_design.png").exists() and (tmp_path / "draft_design.json").exists()
    table = res["table"]
    kl, rej, lat = res["objectives"]
    fit_kl, fit_rej, fit_lat = list(res["relative_to_best"])
    for obj, fit in ((kl, fit_kl), (rej, fit_rej), (lat, fit_lat)):
        assert table[fit][obj] < 0.9 * table["initial draft"][obj], (fit, obj)
    assert table[fit_kl][kl] < min(table[fit_rej][kl], table[fit_lat][kl])
    assert max(table[fit_rej][rej], table[fit_lat][rej]) < 0.95 * table[fit_kl][rej]
    assert max(table[fit_rej][lat], table[fit_lat][lat]) < 0.95 * table[fit_kl][lat]
    for name, check in res["simulation_check"].items():
        agrees(check["simulated"], check["exact"], f"rejections of the draft fitted to {name}", se=check["se"])
    assert "Draft design" in draft_design.summary(res)
    rows = claims_of(draft_design, res)
    assert rows[1]["theory"] == " / ".join(f"{table[fit_rej][o]:.3f}" for o in (kl, rej, lat))
    assert rows[1]["paper"].endswith("([Yin] Thm 1)")
    excess = res["relative_to_best"][fit_kl]
    assert rows[-1]["theory"] == f"{excess[rej] - 1:+.0%} / {excess[lat] - 1:+.0%}"


def test_rows_that_change_with_the_position_but_not_the_context():
    """Kernels of shape (T, 1, V) (one row per position, whatever the context) against the numpy theory on the same
    chains stored in full."""
    rng = np.random.default_rng(2)
    T, V = 4, 3
    p, q = rng.dirichlet(np.ones(V), size=T), rng.dirichlet(np.ones(V), size=T)
    rho = rng.dirichlet(np.ones(V))
    full = MarkovInstance(np.repeat(p[:, None], V, axis=1), np.repeat(q[:, None], V, axis=1), rho)
    got = ad.sd_expected_rejections(jnp.asarray(p[:, None]), jnp.asarray(q[:, None]), jnp.asarray(rho))
    np.testing.assert_allclose(
        got.rejections_per_position, sd_expected_rejections(full).rejections_per_position, rtol=0, atol=1e-12
    )
