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
from speculab.counts import BONUS, CORRECTION, DRAFT, TARGET  # noqa: E402
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
    if L:
        p[:, :, 0] = p[:, :1, 0]
    q[:, :, 0] = q[:, :1, 0]
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


@pytest.mark.parametrize(("rows", "width"), [(3, 3), (1, 5), (3, 5)], ids=["rows", "slots", "both"])
def test_a_widened_law_keeps_each_field_in_its_corner(rows, width):
    """Every field of a law widened in rows, slots or both: the law where it was, no mass (no acceptance) outside."""
    rng = np.random.default_rng(3)
    p, q, x = _block(rng, 2, 1, 2, 4)
    law = Biased(0.2, "uno", K=2).round_law(p, q, x, bonus=True)
    assert law.law is not None
    wide = pad_law(law, rows, width)
    for name, fill in [("outcome", 0), ("correction", 0), ("reject_prob", 0), ("accept_prob", math.nan), ("law", 0)]:
        old, new = getattr(law, name), getattr(wide, name)
        slots = 2 if name in ("accept_prob", "law") else 3  # a value per draft; per outcome, one slot more
        end = slots + width - 3
        assert new.shape[:3] == (2, rows, end) and new.shape[3:] == old.shape[3:], name
        assert torch.equal(new[:, :1, :slots], old), name
        rest = torch.cat([new[:, 1:].flatten(), new[:, :1, slots:].flatten()])
        assert (rest.isnan() if math.isnan(fill) else rest == fill).all(), name


def _followed(L: int, lengths, decision, *, rows: int = 1, tracked=None, eos=None):
    """SD's (or batch SD's) round over ``len(lengths)`` prompts: the law cut to each row's length (as the batched
    decoder does), and :func:`round_output` of the decision given."""
    rng = np.random.default_rng(4)
    B = len(lengths)
    p, q, x = _block(rng, B, rows, L, 6)
    length, bonus = torch.tensor(lengths), torch.ones(B, dtype=torch.bool)
    method = SD(K=max(L, 1)) if rows == 1 else BatchSD(rows, K=max(L, 1))
    law = method.round_law(p, q, x, bonus=True)
    if L:
        law = cut_law(law, q, length.clamp(min=1), bonus)
    out = round_output(
        law, p, q, x, [torch.tensor(v) for v in decision], length, rows=rows, eos=eos, tracked_tv=tracked
    )
    return p, q, x, out


def test_a_mixed_round_gives_each_row_its_own_kind_of_step():
    """Prompts with nothing to draft beside prompts with blocks of 1 and 3: the target step is a rejection for sure
    and carries the tracked TV; a bonus after an accepted block is no rejection; the next draft is the block's last."""
    tracked = torch.tensor([0.25, 0.5, 0.75], dtype=torch.float64)
    p, q, x, out = _followed(3, [0, 1, 3], ([0, 0, 0], [0, 1, 3], [2, 3, 1]), tracked=tracked)
    c = out.chunk
    for name in ("tokens", "kind", "tv", "reject_prob", "accept_prob", "loss_tv", "loss_kl", "target_logprob", "valid"):
        assert getattr(c, name).shape == (3, 4), name
    assert out.eos.shape == (3,) and not out.eos.any()  # no EOS given: none output
    assert c.kind[0, 0] == TARGET and c.kind[1, :2].tolist() == [DRAFT, BONUS] and c.kind[2].tolist() == [0, 0, 0, 2]
    assert c.tv[0, 0] == 0.25 and c.reject_prob[0, 0] == 1.0
    tv = kernels.tv(p[:, 0], q[:, 0, :3])
    assert c.tv[1, 0] == tv[1, 0] and c.tv[2].tolist()[:3] == tv[2].tolist()
    assert c.reject_prob[1, 1] == 0.0 and c.reject_prob[2, 3] == 0.0  # bonuses: nothing was checked
    assert out.last_draft.tolist() == x[:, 0, 2].tolist() and out.all_accepted.tolist() == [False, False, True]
    assert c.tokens[0, 0] == 2 and c.tokens[1, :2].tolist() == [int(x[1, 0, 0]), 3]
    assert c.draft_calls.tolist() == [0, 1, 3] and c.oracle_calls.tolist() == [1, 1, 1]


@pytest.mark.parametrize("L", [1, 3])
def test_a_round_follows_the_row_it_decided_on(L):
    """Batch SD with two rows: the tokens, TVs and next draft are the followed row's, whichever it is."""
    p, q, x, out = _followed(L, [L, L], ([1, 0], [L, L], [0, 0]), rows=2)
    for b, row in enumerate([1, 0]):
        assert out.chunk.tokens[b, :L].tolist() == x[b, row].tolist()
        assert out.last_draft[b] == x[b, row, L - 1]
        torch.testing.assert_close(out.chunk.tv[b, :L], kernels.tv(p[b, row], q[b, row, :L]))
    assert x[0, 0].tolist() != x[0, 1].tolist() and out.chunk.draft_calls.tolist() == [2 * L, 2 * L]


@pytest.mark.parametrize("tracked", [None, torch.tensor([0.125, 0.375, 0.5, 0.625, 0.875], dtype=torch.float64)])
def test_a_round_of_target_steps_is_one_rejection_a_row(tracked):
    """No row drafted: each outputs one target token, a rejection for sure, as one slot of every position field."""
    p, q, x, out = _followed(0, [0] * 5, ([0] * 5, [0] * 5, [4, 0, 1, 2, 3]), tracked=tracked, eos=2)
    c = out.chunk
    for name in ("tokens", "kind", "tv", "reject_prob", "accept_prob", "loss_tv", "loss_kl", "target_logprob", "valid"):
        assert getattr(c, name).shape == (5, 1), name
    assert c.tokens[:, 0].tolist() == [4, 0, 1, 2, 3] and (c.kind == TARGET).all() and (c.reject_prob == 1).all()
    assert out.eos.tolist() == [False, False, False, True, False] and out.produced.tolist() == [1] * 5
    assert c.tv[:, 0].isnan().all() if tracked is None else c.tv[:, 0].tolist() == tracked.tolist()
    torch.testing.assert_close(c.target_logprob[:, 0], torch.log(q[torch.arange(5), 0, 0, c.tokens[:, 0]]))
