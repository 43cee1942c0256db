"""A round's law cut to each row's block, widened, drawn from, output and recorded (speculab.backends.rounds).

The batched round evaluates a slotwise method's law once, on the longest block, and cuts it to each row's own
block: here every slotwise real-model method's cut law is held to its own ``round_law`` of the cut block,
exactly, for every length and both bonus settings; a widened law draws what the law draws; and the records of
a round are the ones written out by hand.
"""

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from conftest import method_id  # noqa: E402
from speculab import kernels  # noqa: E402
from speculab.backends.rounds import Records, cut_law, pad_law, round_output  # noqa: E402
from speculab.counts import BONUS, CORRECTION, DRAFT  # noqa: E402
from speculab.methods import SD, BatchSD, Biased, Fuzzy, RejectionDecoding, sample_round  # noqa: E402
from speculab.methods.capabilities import Slotwise, has  # noqa: E402


def _scaled(p, q):
    return 0.6 * kernels.sd_acceptance(p, q)


SLOTWISE = [
    SD(K=4),
    BatchSD(2, K=4),
    BatchSD(3, K=4),
    Biased(0.1, "opt", K=4),
    Biased(0.2, "uno", K=4),
    Fuzzy(0.3, "js", K=4),
    Fuzzy(0.2, "tv", K=4),
    RejectionDecoding(b=_scaled, K=4),
]


def _block(rng, B: int, M: int, L: int, V: int):
    """Random laws ``p`` ``(B, M, L, V)``, ``q`` ``(B, M, L + 1, V)`` (some entries 0) and drafts from ``p``; the rows
    of one prompt share their first slot's laws (they draft from one context)."""

    def laws(shape):
        w = rng.dirichlet(np.full(V, 0.5), size=shape) * (rng.random((*shape, V)) > 0.2)
        w[..., 0] += 1e-3  # never an all-zero row
        return torch.from_numpy(w / w.sum(-1, keepdims=True))

    p, q = laws((B, M, L)), laws((B, M, L + 1))
    p[:, :, 0], q[:, :, 0] = p[:, :1, 0], q[:, :1, 0]
    x = kernels.sample_index(p, torch.from_numpy(rng.random((B, M, L))))
    return p, q, x


@pytest.mark.parametrize("method", SLOTWISE, ids=method_id)
def test_a_cut_law_is_the_methods_law_of_the_cut_block(method):
    assert has(method, Slotwise)
    rng = np.random.default_rng(0)
    B, L, V = 6, 4, 5
    p, q, x = _block(rng, B, method.rows, L, V)
    whole = method.round_law(p, q, x, bonus=True)
    for ell in range(1, L + 1):
        for bonus in (True, False):
            length = torch.full((B,), ell)
            cut = cut_law(whole, q, length, torch.full((B,), bonus))
            own = method.round_law(p[..., :ell, :], q[..., : ell + 1, :], x[..., :ell], bonus=bonus)
            torch.testing.assert_close(cut.outcome[..., : ell + 1], own.outcome, rtol=0, atol=1e-15)
            assert not cut.outcome[..., ell + 1 :].any()
            torch.testing.assert_close(cut.correction[..., : ell + 1, :], own.correction, rtol=0, atol=1e-15)
            torch.testing.assert_close(cut.reject_prob[..., : ell + 1], own.reject_prob, rtol=0, atol=1e-15)
            torch.testing.assert_close(cut.accept_prob[..., :ell], own.accept_prob, rtol=0, atol=1e-15)
            if own.law is not None:
                torch.testing.assert_close(cut.law[..., :ell, :], own.law, rtol=0, atol=1e-15)
    mixed = cut_law(whole, q, torch.tensor([1, 2, 3, 4, 2, 4]), torch.tensor([True, False, True, False, True, True]))
    for b, (ell, bonus) in enumerate([(1, True), (2, False), (3, True), (4, False), (2, True), (4, True)]):
        own = method.round_law(p[b : b + 1, :, :ell], q[b : b + 1, :, : ell + 1], x[b : b + 1, :, :ell], bonus=bonus)
        torch.testing.assert_close(mixed.outcome[b : b + 1, :, : ell + 1], own.outcome, rtol=0, atol=1e-15)


@pytest.mark.parametrize("method", [SD(K=3), BatchSD(3, K=3)], ids=repr)
def test_a_widened_law_draws_what_the_law_draws(method):
    """Rows and slots of no mass change no draw: the same uniforms give the same row, drafts accepted and token."""
    rng = np.random.default_rng(1)
    p, q, x = _block(rng, 400, method.rows, 2, 4)
    law = method.round_law(p, q, x, bonus=True)
    wide = pad_law(law, 4, 6)
    assert wide.outcome.shape == (400, 4, 6) and not wide.outcome[:, method.rows :].any()
    u, v = (torch.from_numpy(rng.random(400)) for _ in range(2))
    for a, b in zip(sample_round(law, u, v), sample_round(wide, u, v)):
        assert torch.equal(a, b)


def test_a_rounds_output_is_the_records_written_out_by_hand():
    """SD on three rows of one block of 3 drafts, decisions given: a correction after one draft, the whole block
    and a bonus, and a block cut short (its own length 2) whose second draft is EOS."""
    rng = np.random.default_rng(2)
    p, q, x = _block(rng, 3, 1, 3, 6)
    eos = 5
    x[2, 0, 1] = eos
    law = cut_law(SD(K=3).round_law(p, q, x, bonus=True), q, torch.tensor([3, 3, 2]), torch.tensor([True, True, False]))
    decision = torch.tensor([0, 0, 0]), torch.tensor([1, 3, 2]), torch.tensor([4, 2, -1])
    out = round_output(law, p, q, x, decision, torch.tensor([3, 3, 2]), rows=1, eos=eos)
    c = out.chunk
    assert c.tokens[0, :2].tolist() == [int(x[0, 0, 0]), 4] and c.tokens[1].tolist() == [*x[1, 0].tolist(), 2]
    assert c.valid.tolist() == [[True, True, False, False], [True] * 4, [True, True, False, False]]
    assert c.kind[0, :2].tolist() == [DRAFT, CORRECTION] and c.kind[1].tolist() == [DRAFT] * 3 + [BONUS]
    assert out.produced.tolist() == [2, 4, 2] and out.eos.tolist() == [False, False, True]
    assert out.all_accepted.tolist() == [False, True, False] and out.token.tolist() == [4, 2, -1]
    tv = kernels.tv(p[:, 0], q[:, 0, :3])
    torch.testing.assert_close(c.tv[0, :2], tv[0, :2])
    assert math.isnan(c.tv[1, 3]) and c.reject_prob[1, 3] == 0 and math.isnan(c.accept_prob[1, 3])
    torch.testing.assert_close(c.reject_prob[0, :2], tv[0, :2])  # SD's refusal probability is TV(p, q)
    torch.testing.assert_close(c.target_logprob[0, 1], torch.log(q[0, 0, 1, 4]))
    assert c.drafted.tolist() == [3, 3, 2] and c.draft_calls.tolist() == [3, 3, 2]
    assert c.oracle_calls.tolist() == [1] * 3
    records = Records(2)
    records.add(torch.tensor([1, 0, 1]), c)  # rows 0 and 2 belong to run 1, in that order
    (t0, rec0, rounds0, counts0), (t1, rec1, rounds1, counts1) = records.collect()
    assert t0 == c.tokens[1].tolist() and t1 == c.tokens[0, :2].tolist() + c.tokens[2, :2].tolist()
    assert counts0 == {"rejections": 0, "oracle_calls": 1, "draft_calls": 3, "accepted": 3, "bonus": 1}
    assert counts1 == {"rejections": 1, "oracle_calls": 2, "draft_calls": 5, "accepted": 3, "bonus": 0}
    assert rounds1.accepted.tolist() == [1, 2] and rec1.kind.tolist() == [DRAFT, CORRECTION, DRAFT, DRAFT]
