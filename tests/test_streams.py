"""The counter-based random streams of real-model decoding (speculab.backends.streams).

Threefry-2x32-20 is checked exactly against Random123's known-answer vectors and against JAX's own
implementation on random keys and counters; the uniforms are checked exactly against their definition from the
two words, for their range, and — a statistical check — for uniformity.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from speculab.backends.streams import (  # noqa: E402
    OUTCOME,
    TOKEN,
    draft_lane,
    head_lane,
    key_words,
    threefry2x32,
    torch_uniforms,
    uniforms,
)


def _words(*values):
    return [torch.tensor(v, dtype=torch.int64) for v in values]


@pytest.mark.parametrize(
    "key, counter, expected",
    [
        ((0, 0), (0, 0), (0x6B200159, 0x99BA4EFE)),
        ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
        ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0)),
    ],
    ids=["zeros", "ones", "pi"],
)
def test_threefry_matches_random123s_known_answers(key, counter, expected):
    """Salmon et al.'s Random123 known-answer vectors for threefry2x32 with 20 rounds."""
    y0, y1 = threefry2x32(*_words(*key), *_words(*counter))
    assert (int(y0), int(y1)) == expected


def test_threefry_matches_jax_on_random_words():
    """JAX's threefry_2x32 (an independent implementation) on 4,096 random keys and counters."""
    jax_random = pytest.importorskip("jax.extend.random")
    jnp = pytest.importorskip("jax.numpy")
    rng = np.random.default_rng(0)
    k = rng.integers(0, 1 << 32, size=(64, 2), dtype=np.uint64)
    c = rng.integers(0, 1 << 32, size=(64, 2), dtype=np.uint64)
    ours = []
    for key, count in zip(k, c):
        y0, y1 = threefry2x32(*(torch.tensor(int(v), dtype=torch.int64) for v in (*key, *count)))
        ours.append((int(y0), int(y1)))
        theirs = jax_random.threefry_2x32(jnp.asarray(key.astype(np.uint32)), jnp.asarray(count.astype(np.uint32)))
        assert ours[-1] == tuple(int(v) for v in theirs)
    # and batched: all 64 at once, broadcast, equal to one at a time
    t = [torch.from_numpy(a.astype(np.int64)) for a in (k[:, 0], k[:, 1], c[:, 0], c[:, 1])]
    y0, y1 = threefry2x32(*t)
    assert list(zip(y0.tolist(), y1.tolist())) == ours


def test_uniforms_are_the_two_words_53_bits():
    """``u = (y0 >> 5 · 2^26 + y1 >> 6) / 2^53``, exactly, for each prompt's key, the round and the lane."""
    seeds = [0, 1, (1 << 64) - 1, 12345678901234567]
    keys = key_words(seeds, "cpu")
    assert keys.tolist() == [[s & 0xFFFFFFFF, s >> 32] for s in seeds]
    lanes = torch.tensor([OUTCOME, TOKEN, draft_lane(3, 1, 2), head_lane(5)])
    u = uniforms(keys, 7, lanes)
    assert u.shape == (4, 4) and u.dtype == torch.float64
    for b in range(4):
        for j, lane in enumerate(lanes.tolist()):
            y0, y1 = threefry2x32(keys[b, 0], keys[b, 1], torch.tensor(7), torch.tensor(lane))
            assert u[b, j].item() == ((int(y0) >> 5) * 2**26 + (int(y1) >> 6)) / 2**53
    per_row = uniforms(keys, torch.tensor([7, 7, 7, 7]), lanes)  # a round index per row: the same numbers
    assert torch.equal(per_row, u)
    assert torch.equal(torch_uniforms(keys, 7, lanes), u)  # the device path (torch operations): the same numbers
    for b in range(4):  # one prompt (Python's integers): the same numbers
        assert torch.equal(uniforms(keys[b : b + 1], 7, lanes), u[b : b + 1])
    assert torch.equal(torch_uniforms(keys, torch.tensor([7, 7, 7, 7]), lanes.tolist()), u)
    assert not torch.equal(uniforms(keys, 8, lanes), u)  # another round, other numbers
    rounds = torch.tensor([7, 8, 9, 10])  # a round index per row, each its own: each row's own numbers
    mixed = uniforms(keys, rounds, lanes)
    for b in range(4):
        assert torch.equal(mixed[b : b + 1], uniforms(keys[b : b + 1], int(rounds[b]), lanes))
    assert torch.equal(torch_uniforms(keys, rounds, lanes), mixed)


def test_uniforms_off_the_cpu_are_computed_on_the_keys_device():
    """Keys on another device (``meta`` here, standing for a GPU: it has shapes, no values) take the torch path and
    stay there, for one prompt or several: the numpy shortcuts are for keys on the CPU only."""
    for seeds, lanes in (([3], torch.tensor([0, 1, 2], device="meta")), ([3, 4], [0, 1])):
        u = uniforms(key_words(seeds, "cpu").to("meta"), 7, lanes)
        assert u.device.type == "meta" and u.shape == (len(seeds), len(lanes)) and u.dtype == torch.float64


def test_lanes_do_not_collide():
    """Every lane a round uses is distinct: the outcome, the token, each draft row's slots, the head's slots."""
    M, L = 4, 30
    drafts = [draft_lane(i, m, M) for i in range(L) for m in range(M)]
    lanes = [OUTCOME, TOKEN] + drafts + [head_lane(i) for i in range(L)]
    assert len(set(lanes)) == len(lanes)
    assert sorted(draft_lane(i, m, M) for i in range(L) for m in range(M)) == list(range(2, 2 + L * M))


def test_uniforms_are_uniform():
    """2^18 uniforms from 256 prompts' streams: in [0, 1), mean ½ and each of 64 equal bins within 5 standard
    errors of its expected count (power: a generator that never drew above 0.99 — a bin empty — fails by far)."""
    keys = key_words(range(256), "cpu")
    u = uniforms(keys, 3, torch.arange(1024)).flatten().numpy()
    n = u.size
    assert 0 <= u.min() and u.max() < 1
    assert abs(u.mean() - 0.5) < 5 * np.sqrt(1 / 12 / n)
    counts = np.bincount((u * 64).astype(int), minlength=64)
    expected, se = n / 64, np.sqrt(n / 64 * (1 - 1 / 64))
    assert np.all(np.abs(counts - expected) < 5 * se)
    assert expected / se > 20  # an empty bin would sit 20+ standard errors out
