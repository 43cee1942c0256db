"""A checkpoint's lines are data: an edited, foreign or impossible line is refused, naming the file and the line.

Each case writes a real checkpoint, changes one line the way a hand, a bug or another run would, and resumes. A
change that keeps the line's digest valid (recomputed, as a forger would) must still be refused by the data checks.
"""

import json

import numpy as np
import pytest

from conftest import method_id
from speculab.methods import SD, BatchSD
from speculab.sim import checkpoint, simulate
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
        lines[line - 1]["digest"] = checkpoint.line_digest(lines[0], lines[line - 1])
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


def _impossible(e):
    e["counts"]["fields"]["rejections"][0] = 999


def _negative(e):
    e["counts"]["fields"]["accepted"][3] = -1


def _fractional(e):
    e["counts"]["fields"]["bonus"][0] = 0.5


def _rates(e):
    e["counts"]["rejections_per_position"][0] = 1.5


def _tokens(e):
    e["counts"]["fields"]["tokens"][0] = 3


def _accepted_undrafted(e):
    f = e["counts"]["fields"]
    f["accepted"][0], f["draft_calls"][0] = 3, 0


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
        (_impossible, True, "more rejections, accepted drafts, bonus tokens or target calls"),
        (_negative, True, "accepted is not a list of non-negative integers"),
        (_fractional, True, "bonus is not a list of non-negative integers"),
        (_rates, True, r"rejection rates per position are not one row of numbers in \[0, 1\]"),
        (_tokens, True, "a run has 3 tokens, not the horizon's 4"),
        (_accepted_undrafted, True, "more drafts than it drafted"),
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


def test_a_recorded_call_edited_by_hand_is_refused(tmp_path):
    """A recorded call (a JAX simulation or sweep kept by ``resumable``) is read back only as it was written: an
    interrupted computation resumes with the record, not with a record edited since."""
    folder = tmp_path / "ckpt"
    calls = []

    def compute():
        calls.append(1)
        return [simulate(INST, SD(K=2), 1000, 1)]

    def interrupted(resume: bool):
        with pytest.raises(KeyboardInterrupt):
            with checkpoint.resumable(folder, resume=resume):
                out.append(checkpoint.recorded(("what", 1), compute))
                raise KeyboardInterrupt  # the files are kept for the resumption

    out = []
    interrupted(False)
    interrupted(True)
    assert len(calls) == 1 and np.array_equal(out[0][0].rejections, out[1][0].rejections)
    (path,) = [f for f in folder.glob("sim-*.jsonl") if '"call": "recorded"' in f.read_text().splitlines()[0]]
    header, body = (json.loads(line) for line in path.read_text().splitlines())
    body["counts"][0]["fields"]["rejections"][0] += 1000
    path.write_text(json.dumps(header) + "\n" + json.dumps(body) + "\n")
    with pytest.raises(ValueError, match="recorded call .*: its digest does not match"):
        with checkpoint.resumable(folder, resume=True):
            checkpoint.recorded(("what", 1), compute)
    assert len(calls) == 1


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
    )

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
