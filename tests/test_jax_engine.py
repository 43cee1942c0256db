"""The JAX simulation engine: keys, jit = eager, both slot paths, sequences, sweeps, sharding (statistics per method
are in ``tests/test_methods.py``, which runs every registered method on both engines)."""

import os
import subprocess
import sys

import numpy as np
import pytest

jax = pytest.importorskip("jax")

from conftest import Z_BOUND  # noqa: E402
from speculab.methods import SD, BatchSD, Biased, BlockVerification, Fuzzy, SpecDecPP, Sprinter  # noqa: E402
from speculab.sim import jax_engine, simulate  # noqa: E402
from speculab.sim.jax_engine import simulate_sweep  # noqa: E402
from speculab.theory import MarkovInstance  # noqa: E402


@pytest.fixture(scope="module")
def inst():
    return MarkovInstance.random(8, 4, 1, concentration=0.7)


def _same(a, b):
    for name in ("rejections", "oracle_calls", "draft_calls", "accepted", "bonus"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))


@pytest.mark.parametrize("method", [SD(K=3), BatchSD(2), BlockVerification(2)], ids=repr)
def test_same_key_same_counts_and_keys_of_every_kind(inst, method):
    a = simulate(inst, method, 3000, key=5, engine="jax")
    _same(a, simulate(inst, method, 3000, key=5, engine="jax"))
    _same(simulate(inst, method, 3000, key=jax.random.key(9), engine="jax"),
          simulate(inst, method, 3000, key=jax.random.key(9), engine="jax"))
    b = simulate(inst, method, 3000, key=6, engine="jax")
    assert not np.array_equal(a.rejections, b.rejections)
    simulate(inst, method, 10, key=np.random.default_rng(0), engine="jax")  # a numpy generator gives a seed
    simulate(inst, method, 10, key=2**64 - 1, engine="jax")  # 64-bit seeds are folded, not truncated


@pytest.mark.parametrize("key, match", [(-1, "out of range"), ("seed", "key must be"), (1.5, "key must be"),
                                        (np.zeros(3, dtype=np.float32), "key must be"),
                                        (jax.random.split(jax.random.key(0), 2), "JAX PRNG key")])
def test_bad_keys_are_refused(inst, key, match):
    with pytest.raises(ValueError, match=match):
        simulate(inst, SD(), 10, key=key, engine="jax")


def test_bad_run_counts_are_refused(inst):
    with pytest.raises(ValueError, match="n_runs"):
        simulate(inst, SD(), 0, key=0, engine="jax")
    with pytest.raises(ValueError, match="engine must be"):
        simulate(inst, SD(), 10, key=0, engine="torch")


def test_methods_without_a_round_or_position_law_are_refused_with_the_reason(inst):
    with pytest.raises(ValueError, match="has neither .* engine='numpy'"):
        simulate(inst, SpecDecPP(0.5), 10, key=0, engine="jax")


def test_sprinter_with_a_verifier_function_runs_from_its_position_law(inst):
    """A trained verifier is any function of (t, prev, x): tabulated once, run by the scan."""
    method = Sprinter(verifier=lambda t, prev, x: np.where(x == 0, 0.9, 0.2))
    c = simulate(inst, method, 20_000, key=3, engine="jax")
    e = method.expected(inst)
    for name in ("rejections", "oracle_calls", "accepted"):
        assert abs(c.estimate(name).z(e.get(name))) < Z_BOUND, name
    np.testing.assert_array_equal(c.verifier_calls, inst.T)


@pytest.mark.parametrize("method", [SD(K=2), BatchSD(2, K=2), BlockVerification(2)], ids=repr)
def test_jitted_and_eager_runs_agree(method):
    short = MarkovInstance.random(4, 3, 2, concentration=0.7)  # eager JAX dispatches op by op: keep it small
    jitted = simulate(short, method, 100, key=3, engine="jax")
    with jax.disable_jit():
        eager = simulate(short, method, 100, key=3, engine="jax")
    _same(jitted, eager)


@pytest.mark.parametrize("method", [SD(K=2), Biased(0.1), Fuzzy(0.2, "tv"), BatchSD(3, K=2)], ids=repr)
def test_tabulated_and_evaluated_slot_laws_agree_in_law(inst, method, monkeypatch):
    """Above TABLE_BUDGET the one-slot law is evaluated inside the scan: the same counts in law as the tables."""
    expected = method.expected(inst)
    tabulated = simulate(inst, method, 20_000, key=1, engine="jax")
    monkeypatch.setattr(jax_engine, "TABLE_BUDGET", 0)
    evaluated = simulate(inst, method, 20_000, key=2, engine="jax")
    for c in (tabulated, evaluated):
        for name in ("rejections", "oracle_calls", "accepted", "bonus"):
            assert abs(c.estimate(name).z(expected.get(name))) < Z_BOUND, name


def test_sequences_are_the_runs_tokens(inst):
    c = simulate(inst, SD(K=2), 500, key=0, engine="jax", return_sequences=True)
    assert c.sequences.shape == (500, inst.T + 1) and c.sequences.min() >= 0 and c.sequences.max() < inst.V
    law = np.bincount(c.sequences[:, 1], minlength=inst.V) / 500  # x_1 ~ Σ_a ρ(a) Q[0, a] (SD is unbiased)
    target = inst.rho @ inst.Q[0]
    assert np.all(np.abs(law - target) < Z_BOUND * np.sqrt(target * (1 - target) / 500) + 1e-12)


def test_stationary_instance_stays_compact_on_the_device():
    rng = np.random.default_rng(0)
    P, Q = rng.dirichlet(np.ones(300), size=300), rng.dirichlet(np.ones(300), size=300)
    inst = MarkovInstance.stationary(P, Q, T=200)  # (T, V, V) would be 144 MB per kernel in float64
    c = simulate(inst, SD(), 2000, key=0, engine="jax")
    assert abs(c.estimate("rejections").z(SD().expected(inst).rejections)) < Z_BOUND


def test_sweep_over_eps_in_one_call_matches_each_points_theory(inst):
    eps = [0.0, 0.05, 0.2, 0.6]
    methods = [Biased(e, K=3) for e in eps]
    runs = simulate_sweep(inst, methods, 20_000, key=0)
    for m, c in zip(methods, runs):
        e = m.expected(inst)
        for name in ("rejections", "oracle_calls", "accepted"):
            assert abs(c.estimate(name).z(e.get(name))) < Z_BOUND, (m, name)
    assert runs[0].rejections.mean() > runs[-1].rejections.mean()


def test_sweep_over_a_stack_of_instances(inst):
    insts = [MarkovInstance.random(8, 4, s, concentration=0.7) for s in range(3)]
    for i, c in zip(insts, simulate_sweep(insts, SD(K=2), 20_000, key=1)):
        assert abs(c.estimate("oracle_calls").z(SD(K=2).expected(i).oracle_calls)) < Z_BOUND


@pytest.mark.parametrize("methods", [
    [SD(K=1), SD(K=2), SD(K=5), SD()],
    [BatchSD(1), BatchSD(2, K=3), BatchSD(4), BatchSD(3, K=1)],
], ids=["K", "M and K"])
def test_sweeps_over_lookahead_and_draft_rows(inst, methods):
    """K and M are traced numbers of one compiled call; the root tables are padded to the largest M."""
    for m, c in zip(methods, simulate_sweep(inst, methods, 20_000, key=4)):
        e = m.expected(inst)
        for name in ("rejections", "oracle_calls", "draft_calls", "accepted", "bonus"):
            assert abs(c.estimate(name).z(e.get(name))) < Z_BOUND, (m, name)


@pytest.mark.parametrize("methods, match", [
    ([SD(), Biased(0.1)], "one slotwise method"),
    ([BlockVerification(2)], "one slotwise method"),
    ([], "give one instance or one method"),
])
def test_sweeps_that_would_change_shapes_are_refused(inst, methods, match):
    with pytest.raises(ValueError, match=match):
        simulate_sweep(inst, methods, 10, key=0)


def test_sweep_is_sharded_over_several_devices():
    """With two (virtual CPU) devices the sweep axis is split over them and gives the same counts."""
    code = (
        "import jax, numpy as np\n"
        "from speculab.theory import MarkovInstance\n"
        "from speculab.methods import Biased\n"
        "from speculab.sim.jax_engine import simulate_sweep\n"
        "assert jax.device_count() == 2\n"
        "inst = MarkovInstance.random(6, 3, 0)\n"
        "r = simulate_sweep(inst, [Biased(e) for e in (0.0, 0.1, 0.2, 0.3)], 500, key=0)\n"
        "print(','.join(str(int(c.rejections.sum())) for c in r))\n"
    )
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2", JAX_PLATFORMS="cpu")
    two = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    inst = MarkovInstance.random(6, 3, 0)
    one = simulate_sweep(inst, [Biased(e) for e in (0.0, 0.1, 0.2, 0.3)], 500, key=0)
    assert two.strip() == ",".join(str(int(c.rejections.sum())) for c in one)
