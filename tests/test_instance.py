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
    u = MarkovInstance.random(200, 7, 0, row_law="uniform")
    peaked = MarkovInstance.random(200, 7, 0, concentration=0.1)
    flat = MarkovInstance.random(200, 7, 0, concentration=100.0)
    # peaked Dirichlet rows are far apart, concentrated ones are close
    assert peaked.tv().mean() > u.tv().mean() > flat.tv().mean()
    with pytest.raises(ValueError, match="row_law"):
        MarkovInstance.random(3, 3, 0, row_law="gaussian")
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
    inst = MarkovInstance(
        np.broadcast_to(P, (100_000, 2, 2)), np.broadcast_to(P[::-1], (100_000, 2, 2)), np.array([1.0, 0.0])
    )
    assert inst.T == 100_000 and compact(inst.P).shape == (1, 2, 2) and compact(inst.Q).shape == (1, 2, 2)


def test_at_position_reads_a_compact_stack_at_every_position():
    from speculab.theory.instance import at_position

    full, one = np.arange(12.0).reshape(3, 2, 2), np.arange(4.0).reshape(1, 2, 2)
    assert np.array_equal(at_position(full, 2), full[2])
    for n in (0, 1, 7):
        assert np.array_equal(at_position(one, n), one[0])


def test_position_helpers_on_two_positions_and_a_shared_row():
    """``at_position`` and ``per_position`` on a stack of T = 2 (the smallest that varies: a ``> 2`` or ``== 2``
    for the compact test passed on T = 3), and ``expect`` / ``push`` with a row shared by every context."""
    from speculab.theory.instance import at_position, expect, per_position, push

    two = np.arange(8.0).reshape(2, 2, 2)
    assert np.array_equal(at_position(two, 1), two[1])
    assert [float(x.sum()) for x in per_position(np.sum, 2, two)] == [6.0, 22.0]
    assert [float(x) for x in per_position(lambda a, b: (a * b).sum(), 3, two[:1], two[:1])] == [14.0] * 3
    mass = np.array([0.25, 0.5])
    assert expect(mass, np.array([2.0])) == pytest.approx(1.5)  # the same value 2 in every context
    assert expect(mass, np.array([2.0, 4.0])) == pytest.approx(2.5)
    np.testing.assert_allclose(push(mass, np.array([[0.3, 0.7]])), 0.75 * np.array([0.3, 0.7]))


def test_one_position_and_the_default_prompt_law():
    """T = 1 is an instance (the smallest); ``stationary`` without ``rho`` starts from the uniform law."""
    p, q = np.array([[0.6, 0.4], [0.1, 0.9]]), np.array([[0.5, 0.5], [0.5, 0.5]])
    one = MarkovInstance(p[None], q[None], [1.0, 0.0])
    assert one.T == 1 and one.tv()[0] == pytest.approx([0.1, 0.4])
    inst = MarkovInstance.stationary(p, q, T=3)
    np.testing.assert_array_equal(inst.rho, [0.5, 0.5])


def test_the_callers_arrays_stay_theirs():
    """The instance copies what it is given: the caller's arrays stay writable and changing them changes nothing;
    the instance's own (``rho`` too) are read-only. ``dtype`` is keyword-only."""
    P, rho = np.full((2, 2, 2), 0.5), np.array([0.5, 0.5])
    inst = MarkovInstance(P, P, rho)
    P[0, 0, 0], rho[0] = 0.9, 0.9  # neither raises: not frozen by the instance
    assert inst.P[0, 0, 0] == 0.5 and inst.rho[0] == 0.5
    with pytest.raises(ValueError):
        inst.rho[0] = 0.1
    with pytest.raises(TypeError):
        MarkovInstance(inst.P, inst.Q, inst.rho, "float32")


def test_instance_files_with_bad_contents_name_the_reason(tmp_path):
    """A corrupt file's message carries numpy's or zipfile's reason; a stored horizon that is not one integer and
    kernels that are not (T, V, V) are refused; a context-free instance (compact rows) round-trips."""
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"PK\x03\x04 not really a zip")
    with pytest.raises(ValueError, match="not a speculab Markov instance .*: (File is not a zip file|.*zip)"):
        MarkovInstance.load(bad)
    inst = MarkovInstance.random(3, 2, 0)
    for name, T in (("vector", np.array([3])), ("float", np.float64(3.0))):
        np.savez(
            tmp_path / f"{name}.npz", P=np.asarray(inst.P), Q=np.asarray(inst.Q), rho=inst.rho, T=T, format_version=2
        )
        with pytest.raises(ValueError, match="T must be one integer"):
            MarkovInstance.load(tmp_path / f"{name}.npz")
    np.savez(tmp_path / "flat.npz", P=np.asarray(inst.P)[0], Q=np.asarray(inst.Q), rho=inst.rho, T=3, format_version=2)
    with pytest.raises(ValueError, match=r"P and Q have shapes \(2, 2\) and \(3, 2, 2\)"):
        MarkovInstance.load(tmp_path / "flat.npz")
    np.savez(
        tmp_path / "flatq.npz", P=np.asarray(inst.P), Q=np.asarray(inst.Q)[0], rho=inst.rho, T=3, format_version=2
    )  # Q of two dimensions with P's vocabulary: refused too, not broadcast
    with pytest.raises(ValueError, match=r"P and Q have shapes \(3, 2, 2\) and \(2, 2\)"):
        MarkovInstance.load(tmp_path / "flatq.npz")
    free = MarkovInstance.context_free([0.6, 0.3, 0.1], [0.2, 0.3, 0.5], T=4)
    back = MarkovInstance.load(free.save(tmp_path / "free.npz"))
    assert back.T == 4 and np.array_equal(back.P, free.P) and np.array_equal(back.Q, free.Q)


def test_compact_and_push_on_the_shapes_they_meet():
    """``compact`` keeps one copy of every broadcast leading axis (of length 2 too) and of the context axis of a
    context-free stack, never of the vocabulary; ``push`` takes a batch of masses; ``per_position`` recomputes a
    stack that varies by position even when its context axis is compact; a context-free pair of unequal lengths
    is refused with both lengths."""
    from speculab.theory.instance import compact, per_position, push

    k = np.array([[0.9, 0.1], [0.2, 0.8]])
    assert compact(np.broadcast_to(k, (2, 2, 2))).shape == (1, 2, 2)
    free = MarkovInstance.context_free([0.6, 0.3, 0.1], [0.2, 0.3, 0.5], T=5)
    assert compact(free.P).shape == (1, 1, 3) and compact(np.ones((4, 3))).shape == (4, 3)
    masses = np.array([[0.25, 0.5], [1.0, 0.0]])
    np.testing.assert_allclose(push(masses, np.array([[0.3, 0.7]])), [[0.225, 0.525], [0.3, 0.7]])
    varying = np.array([[[0.5, 0.5]], [[0.1, 0.9]]])  # (T = 2, 1, V): one row per position
    assert [float(x[0, 0]) for x in per_position(lambda a: a, 2, varying)] == [0.5, 0.1]
    with pytest.raises(ValueError, match="p and q must have the same length; got 2 and 3"):
        MarkovInstance.context_free([0.5, 0.5], [0.2, 0.3, 0.5], T=2)
