"""MarkovInstance: constructors, marginals, persistence, validation."""

import numpy as np
import pytest

from speculab.theory import MarkovInstance, chain_marginals, tv


def test_random_is_reproducible_and_valid():
    a = MarkovInstance.random(6, 4, 3)
    b = MarkovInstance.random(6, 4, np.random.default_rng(3))
    c = MarkovInstance.random(6, 4, 4)
    np.testing.assert_array_equal(a.P, b.P)
    np.testing.assert_array_equal(a.Q, b.Q)
    assert not np.array_equal(a.P, c.P)
    assert (a.T, a.V) == (6, 4)
    np.testing.assert_allclose(a.P.sum(-1), 1)
    np.testing.assert_allclose(a.rho, 0.25)


def test_random_rows_kinds_and_concentration():
    u = MarkovInstance.random(200, 7, 0, rows="uniform")
    peaked = MarkovInstance.random(200, 7, 0, concentration=0.1)
    flat = MarkovInstance.random(200, 7, 0, concentration=100.0)
    # peaked Dirichlet rows are far apart, concentrated ones are close
    assert peaked.tv().mean() > u.tv().mean() > flat.tv().mean()
    with pytest.raises(ValueError, match="rows"):
        MarkovInstance.random(3, 3, 0, rows="gaussian")
    with pytest.raises(ValueError, match="concentration"):
        MarkovInstance.random(3, 3, 0, concentration=0.0)
    with pytest.raises(ValueError, match="V must be an integer >= 2"):
        MarkovInstance.random(3, 1, 0)
    with pytest.raises(ValueError, match="key"):
        MarkovInstance.random(3, 3, -1)


def test_arrays_are_read_only_copies():
    P = np.full((2, 2, 2), 0.5)
    inst = MarkovInstance(P, P, [0.5, 0.5])
    P[0, 0, 0] = 0.9  # the caller's array changes, the instance does not
    assert inst.P[0, 0, 0] == 0.5
    with pytest.raises(ValueError):
        inst.P[0, 0, 0] = 0.1


def test_marginals_match_matrix_powers_on_stationary_chain():
    rng = np.random.default_rng(1)
    Pm, Qm = rng.dirichlet(np.ones(3), 3), rng.dirichlet(np.ones(3), 3)
    inst = MarkovInstance.stationary(Pm, Qm, T=5, rho=[1, 0, 0])
    mu = inst.marginals()
    assert mu.shape == (6, 3)
    for n in range(6):
        np.testing.assert_allclose(mu[n], np.linalg.matrix_power(Qm, n)[0], atol=1e-14)
    np.testing.assert_allclose(chain_marginals(inst.rho, inst.P)[2], (Pm @ Pm)[0], atol=1e-14)


def test_context_free_tv():
    p, q = [0.6, 0.3, 0.1], [0.2, 0.3, 0.5]
    inst = MarkovInstance.context_free(p, q, T=4)
    np.testing.assert_allclose(inst.tv(), tv(p, q))
    assert inst.T == 4 and inst.V == 3


def test_save_load_round_trip(tmp_path):
    inst = MarkovInstance.random(5, 3, 7, rho=[0.2, 0.3, 0.5])
    path = tmp_path / "inst.npz"
    inst.save(path)
    back = MarkovInstance.load(path)
    for name in ("P", "Q", "rho"):
        np.testing.assert_array_equal(getattr(back, name), getattr(inst, name))


def test_save_names_the_file_it_writes_and_refuses_a_folder(tmp_path):
    """``save`` appends ``.npz`` as numpy does and says so; a folder (existing, or a name ending in a separator)
    is refused instead of becoming a hidden ``folder/.npz``."""
    inst = MarkovInstance.random(T=3, V=2, key=0)
    assert inst.save(tmp_path / "a") == tmp_path / "a.npz" and (tmp_path / "a.npz").exists()
    assert inst.save(tmp_path / "b.npz") == tmp_path / "b.npz"
    for folder in (tmp_path, str(tmp_path / "new") + "/"):
        with pytest.raises(ValueError, match="path must name a file"):
            inst.save(folder)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.npz", "b.npz"]


def test_load_refuses_foreign_files(tmp_path):
    path = tmp_path / "other.npz"
    np.savez(path, A=np.zeros(3))
    with pytest.raises(ValueError, match="missing"):
        MarkovInstance.load(path)


@pytest.mark.parametrize(
    "P, Q, rho, match",
    [
        (np.full((2, 2, 2), 0.5), np.full((2, 2, 3), 1 / 3), [0.5, 0.5], "same shape"),
        (np.full((2, 2, 3), 1 / 3), np.full((2, 2, 3), 1 / 3), [0.5, 0.5], r"\(T, V, V\)"),
        (np.full((2, 2, 2), 0.5), np.full((2, 2, 2), 0.5), [1 / 3] * 3, "rho must have length"),
        (np.full((2, 2, 2), 0.6), np.full((2, 2, 2), 0.5), [0.5, 0.5], "P must sum to 1"),
        (np.full((2, 2), 0.5), np.full((2, 2), 0.5), [0.5, 0.5], "3 dimension"),
        (np.full((2, 2, 2), 0.5), np.full((2, 2, 2), np.nan), [0.5, 0.5], "Q must be finite"),
        (np.full((2, 2, 2), 0.5), np.full((2, 2, 2), 0.5), [1.5, -0.5], "rho must be non-negative"),
        (np.full((2, 2, 2), 0.5 + 0j), np.full((2, 2, 2), 0.5), [0.5, 0.5], "P must hold real numbers"),  # not cast
    ],
)
def test_bad_instances_are_refused(P, Q, rho, match):
    with pytest.raises(ValueError, match=match):
        MarkovInstance(P, Q, rho)


def test_file_format_versions(tmp_path):
    """A file of format 1 (full stacks, no T, no version: what the first wave wrote) still loads; one of a newer
    format than this speculab reads is refused by version, not misread (found by mutation testing)."""
    inst = MarkovInstance.random(3, 2, 0)
    old = tmp_path / "v1.npz"
    np.savez(old, P=np.asarray(inst.P), Q=np.asarray(inst.Q), rho=inst.rho)
    back = MarkovInstance.load(old)
    assert back.T == 3 and np.array_equal(back.P, inst.P) and np.array_equal(back.Q, inst.Q)
    new = tmp_path / "v3.npz"
    np.savez(new, P=np.asarray(inst.P), Q=np.asarray(inst.Q), rho=inst.rho, T=3, format_version=3)
    with pytest.raises(ValueError, match="has format version 3; this speculab reads <= 2"):
        MarkovInstance.load(new)
    inst.save(tmp_path / "v2.npz")
    assert int(np.load(tmp_path / "v2.npz")["format_version"]) == 2


def test_nested_lists_and_shape_mismatches():
    inst = MarkovInstance.random(3, 2, 0)
    from_lists = MarkovInstance(np.asarray(inst.P).tolist(), np.asarray(inst.Q).tolist(), inst.rho.tolist())
    assert np.array_equal(from_lists.P, inst.P) and np.array_equal(from_lists.Q, inst.Q)
    P2, P3 = np.full((2, 2), 0.5), np.full((3, 3), 1 / 3)
    for P, Q in ((P2, P3), (np.full((2, 3), 1 / 3), np.full((2, 3), 1 / 3))):
        with pytest.raises(ValueError, match=r"P and Q must both have shape \(V, V\)"):
            MarkovInstance.stationary(P, Q, T=4)


def test_a_broadcast_stack_stays_compact():
    """A (T, V, V) broadcast view of one kernel is validated and stored once (O(V²) memory, whatever T)."""
    from speculab.theory.instance import compact

    P = np.array([[0.9, 0.1], [0.2, 0.8]])
    inst = MarkovInstance(np.broadcast_to(P, (100_000, 2, 2)), np.broadcast_to(P[::-1], (100_000, 2, 2)),
                          np.array([1.0, 0.0]))
    assert inst.T == 100_000 and compact(inst.P).shape == (1, 2, 2) and compact(inst.Q).shape == (1, 2, 2)


def test_at_position_reads_a_compact_stack_at_every_position():
    from speculab.theory.instance import at_position

    full, one = np.arange(12.0).reshape(3, 2, 2), np.arange(4.0).reshape(1, 2, 2)
    assert np.array_equal(at_position(full, 2), full[2])
    for n in (0, 1, 7):
        assert np.array_equal(at_position(one, n), one[0])
