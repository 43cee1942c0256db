"""A checkpoint's lines are data: an edited, foreign or impossible line is refused, naming the file and the line.

Each case writes a real checkpoint, changes one line the way a hand, a bug or another run would, and resumes. A
change that keeps the line's digest valid (recomputed, as a forger would) must still be refused by the data checks.
"""

import json

import numpy as np
import pytest

from conftest import method_id
from speculab._lines import line_digest
from speculab.methods import SD, BatchSD
from speculab.sim import checkpoint, simulate
from speculab.sim.sense import limits
from speculab.theory import MarkovInstance

INST = MarkovInstance.random(T=4, V=3, key=2)
RUNS = 70_000  # three chunks


@pytest.fixture
def written(tmp_path):
    path = tmp_path / "sim.jsonl"
    whole = simulate(INST, SD(K=2), RUNS, 5, checkpoint=path)
    return path, whole


def _edit(path, line: int, change, *, sign: bool):
    """Apply ``change`` to the entry on 1-based ``line``; with ``sign`` the digest is recomputed (a forgery)."""
    lines = [json.loads(text) for text in path.read_text().splitlines()]
    change(lines[line - 1])
    if sign:
        lines[line - 1]["digest"] = line_digest(lines[0], lines[line - 1])
    path.write_text("".join(json.dumps(entry) + "\n" for entry in lines))


def _resume(path):
    return simulate(INST, SD(K=2), RUNS, 5, checkpoint=path, resume=True)


def test_a_clean_checkpoint_resumes_to_the_same_counts(written):
    path, whole = written
    again = _resume(path)
    for name in whole.FIELDS:
        np.testing.assert_array_equal(getattr(again, name), getattr(whole, name))


def _times_1000(e):
    e["counts"]["fields"]["oracle_calls"][0] *= 1000


def _ragged(e):
    e["counts"]["fields"]["rejections"] += [0] * 100


def _fields(e) -> dict:
    return e["counts"]["fields"]


def _run(e, test) -> int:
    """The first run of the line whose counts pass ``test`` (a dict of its fields)."""
    f = _fields(e)
    return next(i for i in range(len(f["tokens"])) if test({k: v[i] for k, v in f.items()}))


def _impossible(e):
    _fields(e)["rejections"][0] = 999


def _one_more_rejection(e):
    _fields(e)["rejections"][0] += 1


def _negative(e):
    _fields(e)["accepted"][3] = -1


def _fractional(e):
    _fields(e)["bonus"][0] = 0.5


def _a_bool(e):
    _fields(e)["bonus"][0] = True


def _discarded(e):
    _fields(e)["discarded"][0] += 1


def _accepted_undrafted(e):
    f = _fields(e)
    i = _run(e, lambda r: r["accepted"] > 0)
    f["draft_calls"][i], f["discarded"][i] = f["accepted"][i] - 1, -1


def _tokens(e):
    _fields(e)["tokens"][0] = 3


def _calls_past_the_horizon(e):
    _fields(e)["oracle_calls"][0] = INST.T + 1


def _fewer_calls_than_rejections(e):
    i = _run(e, lambda r: r["rejections"] + r["bonus"] > 0)
    _fields(e)["oracle_calls"][i] = _fields(e)["rejections"][i] + _fields(e)["bonus"][i] - 1


def _rounds_that_end_nothing(e):
    i = _run(e, lambda r: r["rejections"] + r["bonus"] + 2 <= INST.T)
    _fields(e)["oracle_calls"][i] = _fields(e)["rejections"][i] + _fields(e)["bonus"][i] + 2


def _drafts_past_the_horizon(e):
    f = _fields(e)  # SD(K=2) at T = 4 drafts at most 1 + 2 + 2 + 2 = 7 tokens a run
    f["draft_calls"][0], f["discarded"][0] = 8, 8 - f["accepted"][0]


def _runs_cut(e):
    for v in _fields(e).values():
        del v[-1]


def _rates(e):
    e["counts"]["rejections_per_position"][0] = 1.5


def _rates_nan(e):
    e["counts"]["rejections_per_position"][0] = float("nan")


def _rates_short(e):
    del e["counts"]["rejections_per_position"][-1]


def _rates_not_counts(e):
    e["counts"]["rejections_per_position"][0] += 0.3 / len(_fields(e)["tokens"])


def _rates_not_the_mean(e):
    e["counts"]["rejections_per_position"][0] += 1 / len(_fields(e)["tokens"])


def _state(e):
    e["rng_state"] = {"bit_generator": "PCG64", "state": "garbage"}


def _foreign_state(e):
    e["rng_state"] = np.random.MT19937(1).state | {"state": {"key": [1], "pos": 0}}


def _order(e):
    e["chunk"] = 5


def _missing(e):
    del e["counts"]["fields"]["discarded"]


@pytest.mark.parametrize(
    "change, sign, match",
    [
        (_times_1000, False, "digest does not match"),
        (_ragged, False, "digest does not match"),
        (_ragged, True, "different lengths"),
        (_impossible, True, "accepted drafts, rejections and bonus tokens do not add up to its tokens"),
        (_one_more_rejection, True, "accepted drafts, rejections and bonus tokens do not add up to its tokens"),
        (_negative, True, "accepted is not a list of non-negative integers"),
        (_fractional, True, "bonus is not a list of non-negative integers"),
        (_a_bool, True, "bonus is not a list of non-negative integers"),
        (_discarded, True, "discarded drafts are not its draft calls less its accepted drafts"),
        (_accepted_undrafted, True, "discarded is not a list of non-negative integers"),
        (_tokens, True, "a run has 3 tokens, not the horizon's 4"),
        (_calls_past_the_horizon, True, "fewer target calls than rejections and bonus tokens, or more than its 4"),
        (_fewer_calls_than_rejections, True, "fewer target calls than rejections and bonus tokens"),
        (_rounds_that_end_nothing, True, r"more rounds \(target calls\) than its rejections and bonus tokens end"),
        (_drafts_past_the_horizon, True, "drafts more than the 7 tokens its rounds can draft in 4 positions"),
        (_runs_cut, True, "it has 32767 runs where the simulation has 32768 there"),
        (_rates, True, r"rejection rates per position are not 4 numbers in \[0, 1\]"),
        (_rates_nan, True, r"rejection rates per position are not 4 numbers in \[0, 1\]"),
        (_rates_short, True, r"rejection rates per position are not 4 numbers in \[0, 1\]"),
        (_rates_not_counts, True, "rates per position are not counts of its runs summing to its rejections"),
        (_rates_not_the_mean, True, "rates per position are not counts of its runs summing to its rejections"),
        (_state, True, "rng_state is not a PCG64 state"),
        (_foreign_state, True, "rng_state is not a PCG64 state"),
        (_order, True, "not the next finished chunk"),
        (_missing, True, "count fields are not"),
    ],
    ids=lambda v: getattr(v, "__name__", str(v)),
)
def test_an_edited_line_is_refused_with_the_file_and_line(written, change, sign, match):
    path, _ = written
    _edit(path, 3, change, sign=sign)
    with pytest.raises(ValueError, match=match) as refused:
        _resume(path)
    assert f"checkpoint {path}, line 3: " in str(refused.value) and "remove the file" in str(refused.value)


def test_a_signed_chunk_past_the_last_is_refused(written):
    """A line signed after the simulation's last chunk (a run the call never asked for) is refused."""
    path, _ = written
    lines = [json.loads(text) for text in path.read_text().splitlines()]
    extra = {**lines[-1], "chunk": len(lines) - 1}
    extra["digest"] = line_digest(lines[0], extra)
    path.write_text("".join(json.dumps(entry) + "\n" for entry in [*lines, extra]))
    with pytest.raises(ValueError, match=f"line {len(lines) + 1}: a chunk past the 3 chunks of {RUNS} runs"):
        _resume(path)


def _sprinter_bonus(e):
    f = _fields(e)  # one accepted draft turned into a bonus: the tokens still add up
    i = _run(e, lambda r: r["accepted"] > 0 and r["oracle_calls"] > r["rejections"])
    f["accepted"][i], f["bonus"][i], f["discarded"][i] = f["accepted"][i] - 1, 1, f["discarded"][i] + 1


def _sprinter_drafts(e):
    f = _fields(e)
    f["draft_calls"][0], f["discarded"][0] = f["draft_calls"][0] + 1, f["discarded"][0] + 1


def _sprinter_verifier(e):
    e["counts"]["extra"]["verifier_calls"][0] = INST.T - 1


POSITIONS = "a run of a position law that does not draft once at each of its 4 positions, or draws a bonus"


@pytest.mark.parametrize(
    "change, match",
    [
        (_sprinter_bonus, POSITIONS),
        (_sprinter_drafts, POSITIONS),
        (_sprinter_verifier, r"verifier_calls is not 4 \(one a position\) in every run"),
    ],
    ids=lambda v: getattr(v, "__name__", str(v)),
)
def test_a_position_laws_signed_line_is_refused(tmp_path, change, match):
    """SPRINTER has no rounds: one draft and one verifier call a position, no bonus — a signed line that says
    otherwise is refused."""
    from speculab.methods import Sprinter

    path = tmp_path / "sim.jsonl"
    simulate(INST, Sprinter(0.9, 0.1), RUNS, 5, checkpoint=path)
    _edit(path, 3, change, sign=True)
    with pytest.raises(ValueError, match=f"line 3: {match}"):
        simulate(INST, Sprinter(0.9, 0.1), RUNS, 5, checkpoint=path, resume=True)


def test_a_line_from_another_simulation_is_refused(tmp_path, written):
    """The digest covers the header: a finished chunk copied from another run's file does not pass as this one's."""
    path, _ = written
    other = tmp_path / "other.jsonl"
    simulate(INST, BatchSD(2, K=2), RUNS, 5, checkpoint=other)
    lines = path.read_text().splitlines()
    lines[2] = other.read_text().splitlines()[2]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match="line 3: its digest does not match"):
        _resume(path)


@pytest.mark.parametrize("line", [1, 2, 3])
def test_a_line_that_is_not_utf8_is_one_line_naming_the_file_and_line(tmp_path, capsys, line):
    """A byte that is not UTF-8 in a finished line of a checkpoint (the header or a chunk) is no line speculab
    wrote (it writes ASCII): ``sim --resume`` says so in one line naming the file and the line, exit 2, and cuts
    nothing off the file (it was a ValueError of the codec's that named neither)."""
    from speculab.cli import main

    path = tmp_path / "sim.jsonl"
    argv = [
        "sim",
        "--T",
        "4",
        "--V",
        "3",
        "--method",
        "sd",
        "--K",
        "2",
        "--n-runs",
        str(RUNS),
        "--checkpoint",
        str(path),
    ]
    assert main(argv) == 0
    lines = path.read_bytes().split(b"\n")
    lines[line - 1] = lines[line - 1][:-1] + b"\xff}"  # still a finished line, and still with our header's start
    path.write_bytes(b"\n".join(lines))
    size = path.stat().st_size
    capsys.readouterr()
    assert main([*argv, "--resume"]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith(f"speculab: error: {path}, line {line}: not UTF-8 text (byte 0xff at ") and err.count("\n") == 1
    )
    assert path.stat().st_size == size


EXPECT = [(limits(SD(K=2), INST.T), 1000)]  # what the recorded call below holds: one result of 1000 runs


def _recorded_once(folder, calls: list):
    """Record a call in ``folder`` (interrupted, so the file is kept) and resume it: computed once, read back."""

    def compute():
        calls.append(1)
        return [simulate(INST, SD(K=2), 1000, 1)]

    def interrupted(resume: bool):
        with pytest.raises(KeyboardInterrupt):
            with checkpoint.resumable(folder, resume=resume):
                out.append(checkpoint.recorded(("what", 1), compute, EXPECT))
                raise KeyboardInterrupt  # the files are kept for the resumption

    out = []
    interrupted(False)
    interrupted(True)
    assert len(calls) == 1 and np.array_equal(out[0][0].rejections, out[1][0].rejections)
    (path,) = [f for f in folder.glob("sim-*.jsonl") if '"call": "recorded"' in f.read_text().splitlines()[0]]
    return path, compute


def test_a_recorded_call_edited_by_hand_is_refused(tmp_path):
    """A recorded call (a JAX simulation or sweep kept by ``resumable``) is read back only as it was written: an
    interrupted computation resumes with the record, not with a record edited since."""
    calls = []
    path, compute = _recorded_once(tmp_path / "ckpt", calls)
    header, body = (json.loads(line) for line in path.read_text().splitlines())
    body["counts"][0]["fields"]["rejections"][0] += 1000
    path.write_text(json.dumps(header) + "\n" + json.dumps(body) + "\n")
    with pytest.raises(ValueError, match="recorded call .*: its digest does not match"):
        with checkpoint.resumable(tmp_path / "ckpt", resume=True):
            checkpoint.recorded(("what", 1), compute, EXPECT)
    assert len(calls) == 1


def _cut_to_999_runs(counts):
    for v in counts[0]["fields"].values():
        del v[-1]


def _no_result(counts):
    counts.clear()


def _impossible_result(counts):
    counts[0]["fields"]["oracle_calls"][0] = INST.T + 1


@pytest.mark.parametrize(
    "change, match",
    [
        (_cut_to_999_runs, "it has 999 runs where the simulation has 1000 there"),
        (_no_result, "it does not hold the 1 results of the call"),
        (_impossible_result, "a run has fewer target calls than rejections and bonus tokens, or more than its 4"),
    ],
    ids=lambda v: v if isinstance(v, str) else v.__name__,
)
def test_a_recorded_call_signed_after_an_edit_is_refused(tmp_path, change, match):
    """A recorded call edited and signed again with speculab's own digest is still refused when it is not what the
    call computes: fewer runs than asked for, fewer results, counts no simulation makes."""
    calls = []
    path, compute = _recorded_once(tmp_path / "ckpt", calls)
    header, body = (json.loads(line) for line in path.read_text().splitlines())
    change(body["counts"])
    body["digest"] = line_digest(header, body)
    path.write_text(json.dumps(header) + "\n" + json.dumps(body) + "\n")
    with pytest.raises(ValueError, match=f"recorded call {path}: {match}"):
        with checkpoint.resumable(tmp_path / "ckpt", resume=True):
            checkpoint.recorded(("what", 1), compute, EXPECT)
    assert len(calls) == 1


def test_a_jax_call_recorded_short_is_refused(tmp_path):
    """A JAX simulation recorded by ``resumable`` and cut to fewer runs than asked for (signed again) is refused on
    resumption: ``simulate`` tells the record how many runs of which horizon it must hold."""
    pytest.importorskip("jax")
    folder = tmp_path / "ckpt"
    with pytest.raises(KeyboardInterrupt), checkpoint.resumable(folder):
        simulate(INST, SD(K=2), 500, 3, engine="jax")
        raise KeyboardInterrupt
    (path,) = folder.glob("sim-*.jsonl")
    header, body = (json.loads(line) for line in path.read_text().splitlines())
    _cut_to_999_runs(body["counts"])
    body["digest"] = line_digest(header, body)
    path.write_text(json.dumps(header) + "\n" + json.dumps(body) + "\n")
    with pytest.raises(ValueError, match="it has 499 runs where the simulation has 500 there"):
        with checkpoint.resumable(folder, resume=True):
            simulate(INST, SD(K=2), 500, 3, engine="jax")


def _methods():
    from speculab import kernels
    from speculab.methods import (
        Autoregressive,
        BatchSD,
        Biased,
        BlockVerification,
        Fuzzy,
        OptimalMultiDraft,
        RejectionDecoding,
        SpecDecPP,
        Sprinter,
        get,
    )
    from speculab.methods.tree import Tree

    def half(p, q):
        return 0.5 * kernels.sd_acceptance(p, q)

    return [
        Autoregressive(),
        SD(),
        SD(K=2),
        BatchSD(3, K=2),
        Biased(0.1, "opt", K=2),
        Fuzzy(0.2, "js", K=2),
        SpecDecPP(0.5, max_K=3),
        Sprinter(0.9, 0.1),
        BlockVerification(3),
        OptimalMultiDraft(2, K=2),
        RejectionDecoding(b=half, K=2),
        get("typical")(0.3, 0.3, K=3),
        get("greedy-draft")(K=3),
        get("rrs")(tree=Tree.from_widths((2, 2, 1))),
        get("rrs")(tree=Tree.from_widths((3, 1)), draws="distinct"),
        get("traversal")(tree=Tree.from_widths((2, 1, 1))),
    ]


@pytest.mark.parametrize("method", _methods(), ids=method_id)
def test_every_simulators_lines_pass_the_checks(method, tmp_path):
    """The data checks refuse nothing a simulator writes: each method's three chunks are replayed to its counts."""
    path = tmp_path / "sim.jsonl"
    whole = simulate(INST, method, RUNS, 3, checkpoint=path)
    assert len(path.read_text().splitlines()) == 4
    again = simulate(INST, method, RUNS, 3, checkpoint=path, resume=True)
    for name in whole.FIELDS:
        np.testing.assert_array_equal(getattr(again, name), getattr(whole, name))
