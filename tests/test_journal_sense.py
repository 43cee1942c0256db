"""A decode journal's runs are replayed only when they are runs the call can decode (speculab.backends.journal_sense).

Each case edits the first block of a real journal the way a forger would — one value no decode writes — signs the
line again with speculab's own ``line_digest`` and resumes: the call must refuse it, naming the file and the block.
Real journals of every kind of method (rows, trees, target steps, biased losses, EOS) still replay.
"""

import copy
import json
import math
import pickle

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from conftest import method_id, model_device  # noqa: E402
from speculab.backends import decode, load_pair  # noqa: E402
from speculab.backends.journal_sense import run_limits, run_problem  # noqa: E402
from speculab.backends.pair import default_prompts  # noqa: E402
from speculab.methods import SD, BatchSD, Biased, get  # noqa: E402
from speculab.methods.tree import Tree  # noqa: E402
from speculab._lines import line_digest  # noqa: E402
from speculab.sim.checkpoint import resumable  # noqa: E402

PROMPTS = default_prompts()[:2]
N = 6  # tokens a run


@pytest.fixture(scope="module")
def pair():
    torch.set_num_threads(1)
    return load_pair("tiny", device=model_device())


@pytest.fixture(scope="module")
def journal(pair, tmp_path_factory):
    """The header and first two lines of a real journal of SD(K=2), one prompt a line."""
    folder = tmp_path_factory.mktemp("j") / "ckpt"
    with resumable(folder):
        decode(pair, PROMPTS, SD(K=2), max_new_tokens=N, key=0, batch_size=1)
        (path,) = folder.glob("decode-*.jsonl")
        header, *lines = path.read_text().splitlines()
    return path.name, header, lines


def _run(e) -> dict:
    return e["runs"][0]


def _drop_last_token(e):
    r = _run(e)
    del r["tokens"][-1]
    for v in r["record"].values():
        del v[-1]


def _eos_inside(e):
    r = _run(e)  # the tiny pair's EOS is 0
    r["tokens"][1] = r["record"]["tokens"][1] = 0


def _column(name, value, at=0):
    def change(e):
        _run(e)["record"][name][at] = value

    change.__name__ = f"{name}={value}"
    return change


def _bonus_rejected(e):
    r = _run(e)
    r["record"]["kind"][0], r["record"]["reject_prob"][0] = 2, 0.5


def _float_kind(e):
    _run(e)["record"]["kind"][0] = float(_run(e)["record"]["kind"][0])


def _round(name, value):
    def change(e):
        rounds = _run(e)["rounds"]
        rounds[name][0] = value(rounds, 0)

    change.__name__ = f"round {name}"
    return change


def _no_rounds(e):
    for v in _run(e)["rounds"].values():
        v.clear()


def _more_rounds_than_tokens(e):
    for v in _run(e)["rounds"].values():
        v.extend([v[0]] * (N + 1 - len(v)))


def _count(name, value):
    def change(e):
        counts = _run(e)["counts"]
        counts[name] = value(counts)

    change.__name__ = f"count {name}"
    return change


def _rounds_accept_nothing(e):
    r = _run(e)
    assert r["counts"]["accepted"] > 0
    r["rounds"]["accepted"] = [0] * len(r["rounds"]["accepted"])
    r["rounds"]["expected_accepted"] = [0.0] * len(r["rounds"]["accepted"])


def _seconds(value):
    def change(e):
        _run(e)["seconds"] = value

    change.__name__ = f"seconds={value}"
    return change


PROBABILITIES = r"probabilities outside \[0, 1\] or NaN where a number is due"
ROUNDS = "rounds that do not draft whole tokens up to 2 and accept 0 to their drafts"
EXPECTED = r"a round's expected accepted drafts outside \[0, drafted\] or variance outside"


@pytest.mark.parametrize(
    "change, match",
    [
        (_drop_last_token, f"{N - 1} tokens where the call decodes {N}, fewer only when they end at the end-of-seq"),
        (_eos_inside, f"{N} tokens where the call decodes {N}, fewer only when .* \\(and at its first\\)"),
        (_column("reject_prob", 1.5), PROBABILITIES),
        (_column("accept_prob", -0.1), PROBABILITIES),
        (_column("tv", 1.2), PROBABILITIES),
        (_column("loss_tv", math.nan), PROBABILITIES),
        (_column("reject_prob", math.nan), PROBABILITIES),
        (_column("loss_kl", -1.0), PROBABILITIES + r" \(tv, reject_prob, accept_prob, loss_tv\), or a KL loss below 0"),
        (_column("target_logprob", 0.5), "target log-probabilities above 0 or NaN"),
        (_column("target_logprob", math.nan), "target log-probabilities above 0 or NaN"),
        (_bonus_rejected, "a bonus token or target sample that is not a rejection with probability 0 or 1"),
        (_float_kind, "position kinds other than 0–3"),
        (_round("drafted", lambda r, i: 3), ROUNDS),
        (_round("drafted", lambda r, i: 1.0), ROUNDS),
        (_round("accepted", lambda r, i: r["drafted"][i] + 1), ROUNDS),
        (_round("expected_accepted", lambda r, i: r["drafted"][i] + 0.5), EXPECTED),
        (_round("var_accepted", lambda r, i: -0.5), EXPECTED),
        (_round("var_accepted", lambda r, i: math.nan), EXPECTED),
        (_no_rounds, f"0 rounds for {N} tokens"),
        (_more_rounds_than_tokens, f"{N + 1} rounds for {N} tokens"),
        (_count("oracle_calls", lambda c: -1), "counts that are not the integers ≥ 0"),
        (_count("draft_calls", lambda c: c["draft_calls"] + 1), "draft calls that are not 1 × the rounds' drafts"),
        (
            _rounds_accept_nothing,
            "draft calls that are not 1 × the rounds' drafts, or more accepted drafts than the rounds",
        ),
        (_seconds(-1.0), "a time that is not a finite number ≥ 0"),
        (_seconds(math.inf), "a time that is not a finite number ≥ 0"),
    ],
    ids=lambda v: v if isinstance(v, str) else v.__name__,
)
def test_a_signed_run_no_decode_writes_is_refused(pair, journal, tmp_path, change, match):
    name, header, lines = journal
    forged = copy.deepcopy({k: v for k, v in json.loads(lines[0]).items() if k != "digest"})
    change(forged)
    forged["digest"] = line_digest(json.loads(header), forged)
    path = tmp_path / "ckpt" / name  # the same call's file
    path.parent.mkdir()
    path.write_text("\n".join([header, json.dumps(forged), lines[1]]) + "\n")
    with pytest.raises(ValueError, match=f"decode journal {path}, block 0: {match}"):
        with resumable(path.parent, resume=True):
            decode(pair, PROMPTS, SD(K=2), max_new_tokens=N, key=0, batch_size=1)


def _methods():
    return [
        get("ar")(),
        BatchSD(2, K=2),
        Biased(0.2, "uno"),
        get("rrs")(tree=Tree.from_widths((2, 2))),
        get("traversal")(tree=Tree.from_widths((2, 1))),
    ]


@pytest.mark.parametrize("method", _methods(), ids=method_id)
@pytest.mark.parametrize("batch_size", [1, None], ids=["one-prompt", "batched"])
def test_every_methods_journal_passes_the_checks(pair, tmp_path, method, batch_size):
    """The checks refuse nothing a decode writes: each run of a real journal passes them (runs long enough to stop
    at EOS on one prompt, with the draft tracked on target steps), and a resumed call replays them unchanged."""
    kwargs = dict(max_new_tokens=90, key=0, batch_size=batch_size, track_draft=True)
    prompts = default_prompts()[:4]
    folder = tmp_path / "ckpt"
    state = pickle.dumps(method)  # each call gets the method as it is now (a tree caches what it works out)
    with pytest.raises(KeyboardInterrupt), resumable(folder):
        whole = decode(pair, prompts, pickle.loads(state), **kwargs)
        raise KeyboardInterrupt  # the journal is kept
    (path,) = folder.glob("decode-*.jsonl")
    runs = [run for line in path.read_text().splitlines()[1:] for run in json.loads(line)["runs"]]
    limits = run_limits(pair, method, 90, False)
    assert [run_problem(run, limits) for run in runs] == [None] * len(prompts)
    assert min(len(run["tokens"]) for run in runs) < 90 or method.name != "ar"  # an EOS stop is among them
    with resumable(folder, resume=True):
        again = decode(pair, prompts, pickle.loads(state), **kwargs)
    assert again.tokens == whole.tokens
    for name in whole.counts.FIELDS:
        np.testing.assert_array_equal(getattr(again.counts, name), getattr(whole.counts, name))
