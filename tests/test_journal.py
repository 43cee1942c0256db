"""Real-model decoding resumes (speculab.backends.journal): a decode killed midway by a real signal, resumed, gives
the uninterrupted run's tokens, counts and records, decoding only the prompts it had not finished."""

import importlib
import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from conftest import model_device  # noqa: E402
from speculab._progress import progress  # noqa: E402

pytest.importorskip("transformers")

from speculab.backends import decode, load_pair  # noqa: E402
from speculab.backends.journal import unrecorded  # noqa: E402
from speculab.backends.pair import default_prompts  # noqa: E402
from speculab.methods import SD, BatchSD, RoundProbe  # noqa: E402
from speculab.sim.checkpoint import resumable  # noqa: E402

PROMPTS = default_prompts()[:8]


class _Seen(RoundProbe):
    """Per round: the drafts accepted and their expectation under the round law (one float of the law's tensors)."""

    def observe(self, info):
        return (info.accepted, float(info.law.expected_accepted()[0][0]))


@pytest.fixture(scope="module")
def pair():
    torch.set_num_threads(1)
    return load_pair("tiny", device=model_device())


def _same(a, b) -> None:
    assert a.tokens == b.tokens and a.texts == b.texts
    for f in ("rejections", "oracle_calls", "draft_calls", "accepted", "discarded", "bonus", "tokens"):
        np.testing.assert_array_equal(getattr(a.counts, f), getattr(b.counts, f))
    for x, y in zip(a.records + a.rounds, b.records + b.rounds):
        for k, v in vars(x).items():
            np.testing.assert_array_equal(v, getattr(y, k))


@pytest.mark.parametrize("batch_size", [1, 3], ids=["one-prompt", "batches-of-3"])
def test_an_interrupted_decode_resumes_to_the_uninterrupted_result(pair, tmp_path, monkeypatch, batch_size):
    """Interrupted in its third block (a KeyboardInterrupt from inside the loop), the call resumes: the two
    finished blocks are read back, not decoded again, and the result is the uninterrupted call's."""
    dec = importlib.import_module("speculab.backends.decode")  # the module (the package exports the function)
    method = BatchSD(2, K=2)
    seen = _Seen()
    whole = decode(pair, PROMPTS, method, max_new_tokens=10, key=4, batch_size=batch_size, on_round=seen)
    started = []
    real = dec.decode_batched if batch_size > 1 else dec._Run

    def counting(*args, **kwargs):
        started.append(1)
        if len(started) == 3 and interrupt:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(dec, "decode_batched" if batch_size > 1 else "_Run", counting)
    folder = tmp_path / "resume"
    interrupt = True
    with pytest.raises(KeyboardInterrupt), resumable(folder):
        decode(pair, PROMPTS, method, max_new_tokens=10, key=4, batch_size=batch_size, on_round=_Seen())
    assert len(list(folder.glob("decode-*.jsonl"))) == 1
    interrupt, started[:] = False, []
    again = _Seen()
    with resumable(folder, resume=True), progress("decoding", stream=io.StringIO(), every=float("inf")) as bar:
        resumed = decode(pair, PROMPTS, method, max_new_tokens=10, key=4, batch_size=batch_size, on_round=again)
        assert bar.n == bar.total == 10 * len(PROMPTS)  # the blocks read back count their runs' budgets too
    blocks = -(-len(PROMPTS) // batch_size)
    assert len(started) == blocks - 2  # only the unfinished blocks ran
    _same(resumed, whole)
    assert not folder.exists() and resumed.seconds > 0
    # the probe's observations: the finished blocks' put back from the journal, the others observed; each run under
    # its index among all the prompts (also in batches after the first), as JSON gives them back
    assert again.items() == seen.items() and {run for run, _ in seen.items()} == set(range(len(PROMPTS)))
    assert all(isinstance(v, list) for v in seen.values())
    assert [len(again.rounds(i)) for i in range(len(PROMPTS))] == [r.accepted.size for r in whole.rounds]


def test_what_is_not_journaled_runs_again(pair, tmp_path):
    """Calls with a callback (its side effects cannot be replayed), under ``unrecorded`` (timings) or with a
    method that cannot be pickled leave no journal; a journal of another call is refused by name."""
    from speculab.backends.journal import DecodeJournal
    from speculab import kernels
    from speculab._lines import line_digest
    from speculab.methods import RejectionDecoding

    class Holding(_Seen):
        def __init__(self):
            super().__init__()
            self.rule = lambda x: x  # a setting that cannot be pickled: the call cannot be named

    with resumable(tmp_path / "a") as folder:
        decode(pair, PROMPTS[:2], SD(K=2), max_new_tokens=4, key=0, on_round=lambda info: None)
        decode(pair, PROMPTS[:2], SD(K=2), max_new_tokens=4, key=0, on_round=Holding())
        with unrecorded():
            decode(pair, PROMPTS[:2], SD(K=2), max_new_tokens=4, key=0)
        decode(
            pair,
            PROMPTS[:2],
            RejectionDecoding(b=lambda p, q: 0.5 * kernels.sd_acceptance(p, q), K=2),
            max_new_tokens=4,
            key=0,
        )
        assert not list(folder.glob("decode-*"))

    class Live(RoundProbe):
        def observe(self, info):
            return info.p  # a tensor is not a JSON value

    with pytest.raises(ValueError, match="Live.observe must return a JSON value"):
        decode(pair, PROMPTS[:1], SD(K=2), max_new_tokens=4, key=0, on_round=Live())
    with pytest.raises(NotImplementedError, match="must define observe"):
        decode(pair, PROMPTS[:1], SD(K=2), max_new_tokens=4, key=0, on_round=RoundProbe())
    path = tmp_path / "j.jsonl"
    DecodeJournal(path, {"call": "one"})
    with pytest.raises(ValueError, match="was written for another call; remove it"):
        DecodeJournal(path, {"call": "another"})
    path.write_text('{"format": "speculab-decode-jou')  # killed while writing its header: starts again
    assert DecodeJournal(path, {"call": "one"}).done == {} and path.read_text().count("\n") == 1
    block = {"block": 0, "runs": []}
    block["digest"] = line_digest(json.loads(path.read_text().splitlines()[0]), block)
    path.write_text(path.read_text() + json.dumps(block) + '\n{"block": 1, "ru')  # a cut line is dropped
    journal = DecodeJournal(path, {"call": "one"})
    assert list(journal.done) == [0] and path.read_text().count("\n") == 2


def test_compare_and_run_resume_from_the_command_line(pair, tmp_path, monkeypatch, capsys):
    """``speculab compare --checkpoint DIR``, interrupted in the method's third batch of four: the command says
    where its work is and exits 130; ``--resume`` decodes only the rest — the
    method's probe (block verification's gain on the same blocks) included — and prints the uninterrupted
    comparison, number for number. ``speculab run`` takes the same flags."""
    from speculab.cli import main

    dec = importlib.import_module("speculab.backends.decode")
    argv = [
        "compare",
        "--pair",
        "tiny",
        "--device",
        "cpu",
        "--method",
        "block",
        "--K",
        "3",
        "--runs-per-prompt",
        "1",
        "--max-new-tokens",
        "8",
        "--batch-size",
        "2",
        "--json",
    ] + sum((["--prompt", p] for p in PROMPTS), [])
    assert main(argv) == 0
    whole = json.loads(capsys.readouterr().out)
    started, real = [], dec.decode_batched

    def counting(*args, **kwargs):
        started.append(1)
        if len(started) == 3 and interrupt:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(dec, "decode_batched", counting)
    folder, interrupt = tmp_path / "journal", True
    assert main(argv + ["--checkpoint", str(folder)]) == 130
    assert f"its decoded prompts are kept in {folder}: add --resume" in capsys.readouterr().err
    interrupt, started[:] = False, []
    assert main(argv + ["--checkpoint", str(folder), "--resume"]) == 0
    assert json.loads(capsys.readouterr().out) == whole
    assert len(started) == 2 + 4  # the method's last two batches, then the SD runs block verification is held against
    assert not folder.exists()
    argv = [
        "run",
        "--pair",
        "tiny",
        "--device",
        "cpu",
        "--method",
        "sd",
        "--K",
        "2",
        "--max-new-tokens",
        "6",
        "--batch-size",
        "1",
        "--json",
        "--checkpoint",
        str(folder),
    ] + sum((["--prompt", p] for p in PROMPTS[:3]), [])
    assert main(argv) == 0 and not folder.exists()


def test_a_resume_with_other_arguments_is_refused_and_keeps_the_journals(pair, tmp_path, monkeypatch, capsys):
    """Found by review: a resume whose call matches no journal left (another seed, batch size, …) decoded everything
    again and deleted the interrupted run's journals; a ``--checkpoint`` folder holding them was emptied without
    ``--resume``; files there that speculab did not write were deleted. Now the first call with no journal of its
    own is refused while journals found are unclaimed, a user's folder is not emptied unasked, and only files of
    ours (a speculab header) are touched."""
    from speculab.cli import main

    dec = importlib.import_module("speculab.backends.decode")
    folder = tmp_path / "ck"
    folder.mkdir()
    foreign = [folder / "sim-notes.jsonl", folder / "decode-mine.jsonl"]
    for f in foreign:
        f.write_text('{"not": "speculab"}\n')
    argv = [
        "run",
        "--pair",
        "tiny",
        "--device",
        "cpu",
        "--method",
        "sd",
        "--K",
        "2",
        "--max-new-tokens",
        "6",
        "--batch-size",
        "1",
        "--json",
        "--checkpoint",
        str(folder),
    ] + sum((["--prompt", p] for p in PROMPTS[:4]), [])
    started, real = [], dec._Run

    def counting(*args, **kwargs):
        started.append(1)
        if len(started) == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(dec, "_Run", counting)
    assert main(argv) == 130
    monkeypatch.setattr(dec, "_Run", real)
    journals = sorted(set(folder.glob("decode-*.jsonl")) - set(foreign))
    assert len(journals) == 1 and journals[0].read_text().count("\n") == 3  # header + two prompts
    capsys.readouterr()
    for other in (["--seed", "5"], ["--batch-size", "2"], ["--max-new-tokens", "5"]):
        assert main(argv + other + ["--resume"]) == 2
        assert "nothing to resume for this call" in capsys.readouterr().err
    assert main(argv) == 2 and "add --resume to continue it" in capsys.readouterr().err
    assert sorted(set(folder.glob("decode-*.jsonl")) - set(foreign)) == journals  # kept through every refusal
    assert main(argv + ["--resume"]) == 0
    assert all(f.read_text() == '{"not": "speculab"}\n' for f in foreign)  # never ours to delete
    assert sorted(folder.iterdir()) == sorted(foreign)  # the journal used is gone; the folder stays for the others
    with resumable(tmp_path / "named-by-speculab"):  # a folder speculab names (repro): an earlier run's are removed
        pass
    stale = tmp_path / "named-by-speculab" / "decode-old.jsonl"
    stale.parent.mkdir()
    stale.write_text('{"format": "speculab-decode-journal/1"}\n')
    with resumable(stale.parent):
        assert not stale.exists()
    assert not stale.parent.exists()


def test_a_probe_used_twice_or_interrupted_resumes_to_what_it_would_hold(pair, tmp_path, monkeypatch):
    """Found by review: a probe passed to two calls had both calls' observations journaled under the second (put
    back twice on resumption), and one reused after an interrupted call kept the cut block's. A call journals only
    its own observations, and a call that raises leaves the probe as it found it."""
    dec = importlib.import_module("speculab.backends.decode")
    method = SD(K=2)
    whole = _Seen()
    for key in (1, 2):
        decode(pair, PROMPTS[:4], method, max_new_tokens=6, key=key, batch_size=1, on_round=whole)
    started, real = [], dec._Run

    def counting(*args, **kwargs):
        started.append(1)
        if len(started) == 7:  # the second call's third prompt
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(dec, "_Run", counting)
    reused, folder = _Seen(), tmp_path / "j"
    with pytest.raises(KeyboardInterrupt), resumable(folder):
        for key in (1, 2):
            decode(pair, PROMPTS[:4], method, max_new_tokens=6, key=key, batch_size=1, on_round=reused)
    # the interrupted call left the probe as it found it: the first call's observations only
    first = _Seen()
    monkeypatch.setattr(dec, "_Run", real)
    decode(pair, PROMPTS[:4], method, max_new_tokens=6, key=1, batch_size=1, on_round=first)
    assert reused.items() == first.items()
    again = _Seen()
    with resumable(folder, resume=True):
        for key in (1, 2):
            decode(pair, PROMPTS[:4], method, max_new_tokens=6, key=key, batch_size=1, on_round=again)
    assert again.items() == whole.items()


def test_journal_lines_are_checked_before_use(pair, tmp_path):
    """Found by review: a journaled block with too few runs was replayed short, tokens outside the vocabulary were
    replayed into the output, and malformed lines failed deep (KeyError, TypeError). Each is refused naming the
    file and the block or line. Each line carries a digest over its content and the call: an edited line is refused
    as such, and so is a line copied from another call's journal; the data checks are tried with the digest
    recomputed, as a forger would."""
    from speculab._lines import line_digest

    folder = tmp_path / "j"
    with resumable(folder):
        decode(pair, PROMPTS[:2], SD(K=2), max_new_tokens=4, key=0, batch_size=1)
        (journal,) = folder.glob("decode-*.jsonl")
        text = journal.read_text()
    header, line0, line1 = text.splitlines()
    signed = lambda entry: {**entry, "digest": line_digest(json.loads(header), entry)}  # noqa: E731
    entry = {k: v for k, v in json.loads(line0).items() if k != "digest"}
    bad_token = json.loads(json.dumps(entry))
    bad_token["runs"][0]["tokens"][0] = 99_999_999
    bad_token["runs"][0]["record"]["tokens"][0] = 99_999_999
    cases = {
        "0 runs where the call has 1": {"block": 0, "runs": []},
        "tokens that are not token ids": bad_token,
        "a run without its": {"block": 0, "runs": ["x"]},
        "counts that are not the integers": {**entry, "runs": [{**entry["runs"][0], "counts": {"rejections": "1"}}]},
        "line 2: not a finished block": {"block": "zero", "runs": []},
        "records without exactly the fields": {
            **entry,
            "runs": [
                {**entry["runs"][0], "record": {k: v for k, v in entry["runs"][0]["record"].items() if k != "kind"}}
            ],
        },
        "position kinds other than 0–3": {
            **entry,
            "runs": [
                {
                    **entry["runs"][0],
                    "record": {**entry["runs"][0]["record"], "kind": [7] * len(entry["runs"][0]["tokens"])},
                }
            ],
        },
        "round records of different lengths": {
            **entry,
            "runs": [
                {
                    **entry["runs"][0],
                    "rounds": {**entry["runs"][0]["rounds"], "accepted": entry["runs"][0]["rounds"]["accepted"] + [1]},
                }
            ],
        },
        "counts that do not match the position record": {
            **entry,
            "runs": [
                {
                    **entry["runs"][0],
                    "counts": {
                        **entry["runs"][0]["counts"],
                        "rejections": entry["runs"][0]["counts"]["rejections"] + 1,
                    },
                }
            ],
        },
        "draft calls that are not 1 × the rounds. drafts": {
            **entry,
            "runs": [
                {
                    **entry["runs"][0],
                    "counts": {**entry["runs"][0]["counts"], "draft_calls": entry["runs"][0]["counts"]["accepted"] - 1},
                }
            ],
        },
        "more target calls than rounds": {
            **entry,
            "runs": [
                {
                    **entry["runs"][0],
                    "counts": {
                        **entry["runs"][0]["counts"],
                        "oracle_calls": len(entry["runs"][0]["rounds"]["accepted"]) + 1,
                    },
                }
            ],
        },
    }
    for message, bad in cases.items():
        journal.parent.mkdir(exist_ok=True)
        journal.write_text(header + "\n" + json.dumps(signed(bad)) + "\n" + line1 + "\n")
        with pytest.raises(ValueError, match=message), resumable(folder, resume=True):
            decode(pair, PROMPTS[:2], SD(K=2), max_new_tokens=4, key=0, batch_size=1)
    edited = json.loads(line0)  # a count changed, the digest left as it was
    edited["runs"][0]["seconds"] = 0.0
    other = tmp_path / "other"  # the same block of another call (one token fewer), with its own valid digest
    with resumable(other):
        decode(pair, PROMPTS[:2], SD(K=2), max_new_tokens=3, key=0, batch_size=1)
        foreign = next(other.glob("decode-*.jsonl")).read_text().splitlines()[1]
    for line in (json.dumps(edited), foreign):
        journal.write_text("\n".join([header, line, line1]) + "\n")
        with (
            pytest.raises(
                ValueError,
                match=r"line 2: its digest does not match its content and this call "
                r"\(edited, or copied from another run\)",
            ),
            resumable(folder, resume=True),
        ):
            decode(pair, PROMPTS[:2], SD(K=2), max_new_tokens=4, key=0, batch_size=1)
    for lines in (['{"block": 0}'], [line0, line0]):  # no runs; a block twice (which would win?)
        journal.write_text("\n".join([header, *lines]) + "\n")
        with pytest.raises(ValueError, match="line [23]: not a finished block"), resumable(folder, resume=True):
            decode(pair, PROMPTS[:2], SD(K=2), max_new_tokens=4, key=0, batch_size=1)


def test_a_journal_line_that_is_not_utf8_is_refused_naming_the_file_and_line(pair, tmp_path):
    """A byte that is not UTF-8 in a finished line of a decode journal: a ``ValueError`` naming the file and the
    line (it was the codec's own error, naming neither), the file left as it was."""
    folder = tmp_path / "j"
    with resumable(folder):
        decode(pair, PROMPTS[:2], SD(K=2), max_new_tokens=4, key=0, batch_size=1)
        (journal,) = folder.glob("decode-*.jsonl")
        lines = journal.read_bytes().split(b"\n")
    lines[1] = lines[1][:-1] + b"\xff}"
    journal.parent.mkdir(exist_ok=True)  # a finished resumable block removes its journals
    journal.write_bytes(b"\n".join(lines))
    with pytest.raises(ValueError, match=r"line 2: not UTF-8 text \(byte 0xff at") as refused:
        with resumable(folder, resume=True):
            decode(pair, PROMPTS[:2], SD(K=2), max_new_tokens=4, key=0, batch_size=1)
    assert str(refused.value).startswith(str(journal)) and journal.read_bytes() == b"\n".join(lines)


def test_a_simulation_checkpoint_cut_in_its_header_resumes_and_a_foreign_file_is_left_alone(tmp_path):
    """Found by review: a simulation checkpoint cut while its header was written (empty, or a partial first line)
    blocked an honest resume; reading a file that is not ours (to resume it) cut it. Now the first starts again and
    the second is refused untouched, as decode journals are."""
    from speculab.sim import simulate
    from speculab.theory import MarkovInstance

    inst = MarkovInstance.random(6, 3, 0)
    whole = simulate(inst, SD(K=2), 3000, 1)
    for cut in (b"", b'{"format": "speculab-sim-che'):
        path = tmp_path / f"cut{len(cut)}.jsonl"
        path.write_bytes(cut)
        again = simulate(inst, SD(K=2), 3000, 1, checkpoint=path, resume=True)
        np.testing.assert_array_equal(again.rejections, whole.rejections)
    mine = tmp_path / "notes.jsonl"
    mine.write_text("my notes\n")
    with pytest.raises(ValueError, match="is not a speculab simulation checkpoint"):
        simulate(inst, SD(K=2), 3000, 1, checkpoint=mine, resume=True)
    assert mine.read_text() == "my notes\n"


def test_probe_misuse_is_named(pair):
    """A subclass that does not call ``RoundProbe.__init__`` still works; a probe class given instead of an instance,
    numpy values and a run index that is not one are refused in one line that says what to do."""
    import numpy as np

    class NoInit(RoundProbe):
        def __init__(self):
            self.k = 1

        def observe(self, info):
            return info.accepted

    probe = NoInit()
    decode(pair, PROMPTS[:1], SD(K=2), max_new_tokens=4, key=0, on_round=probe)
    assert probe.values() and probe.rounds(0) == probe.values()
    with pytest.raises(ValueError, match="a class: give an instance"):
        decode(pair, PROMPTS[:1], SD(K=2), max_new_tokens=4, key=0, on_round=NoInit)

    class Numpy(RoundProbe):
        def observe(self, info):
            return np.bool_(True)

    with pytest.raises(ValueError, match="got numpy.bool.*bool\\(x\\)|bool\\(x\\).*got numpy.bool"):
        decode(pair, PROMPTS[:1], SD(K=2), max_new_tokens=4, key=0, on_round=Numpy())
    for run in ("a", -1, 1.0, True):
        with pytest.raises(ValueError, match="run must be a run index"):
            probe.rounds(run)


SCRIPT = textwrap.dedent("""
    import json, os, sys, torch
    torch.set_num_threads(1)
    from speculab.backends import decode, load_pair
    from speculab.backends.pair import default_prompts
    import importlib
    dec = importlib.import_module("speculab.backends.decode")
    from speculab.methods import SD
    from speculab.sim.checkpoint import resumable
    folder, resume, out = sys.argv[1], sys.argv[2] == "resume", sys.argv[3]
    runs = []
    class Counted(dec._Run):
        def __init__(self, *a, **k):
            runs.append(1)
            super().__init__(*a, **k)
    dec._Run = Counted
    pair = load_pair("tiny", device=os.environ.get("SPECULAB_TEST_DEVICE", "cpu"))
    with resumable(folder, resume=resume):
        res = decode(pair, default_prompts()[:8], SD(K=3), max_new_tokens=40, key=9, batch_size=1)
    json.dump({"tokens": res.tokens, "rejections": res.counts.rejections.tolist(), "decoded": len(runs)},
              open(out, "w"))
""")


@pytest.mark.slow
def test_a_decode_killed_by_a_signal_resumes_without_redoing_finished_prompts(pair, tmp_path):
    """A real process decoding 8 prompts one at a time is SIGKILLed once its journal holds two finished prompts;
    rerun with ``resume``, it decodes only the rest, and its tokens and counts are the uninterrupted run's."""
    folder, out = tmp_path / "resume", tmp_path / "out.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, str(folder), "new", str(out)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        journals = list(folder.glob("decode-*.jsonl"))
        if journals and journals[0].read_text().count("\n") >= 3:  # the header and two finished prompts
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(0.05)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL and not out.exists(), "the run finished before it could be killed"
    finished = (next(folder.glob("decode-*.jsonl")).read_text().count("\n")) - 1
    assert 2 <= finished < 8
    subprocess.run(
        [sys.executable, "-c", SCRIPT, str(folder), "resume", str(out)],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=600,
    )
    resumed = json.loads(out.read_text())
    assert resumed["decoded"] == 8 - finished
    whole = decode(pair, default_prompts()[:8], SD(K=3), max_new_tokens=40, key=9, batch_size=1)
    assert resumed["tokens"] == whole.tokens and resumed["rejections"] == whole.counts.rejections.tolist()
    assert not folder.exists()


def test_a_cheap_drafts_identity_does_not_change_as_it_decodes(pair):
    """An n-gram draft's memos and call counter grow as it decodes; its identity (what a journal is found by)
    does not, so a later call of a resumed run finds its journal. A different n-gram has another identity."""
    from speculab.backends import PromptLookupModel, ngram_draft
    from speculab.backends.journal import model_identity

    draft = PromptLookupModel(pair.vocab_size, fallback=ngram_draft(pair.tokenizer, default_prompts()))
    before = model_identity(draft)
    drafted = load_pair(draft, "tiny-target", device=model_device())
    decode(drafted, PROMPTS[:2], SD(K=2), max_new_tokens=6, key=0)
    assert draft.forward_calls > 0 and draft.fallback._memo and model_identity(draft) == before
    other = PromptLookupModel(pair.vocab_size, fallback=ngram_draft(pair.tokenizer, default_prompts()[:3]))
    assert model_identity(other) != before


def test_resumable_refuses_what_is_not_a_folder_or_a_flag(tmp_path):
    for folder, match in ((None, "folder must be a path"), ("", "folder must be a path"), (3, "folder must be a path")):
        with pytest.raises(ValueError, match=match), resumable(folder):
            pass
    with pytest.raises(ValueError, match="resume must be True or False"), resumable(tmp_path, resume="yes"):
        pass
    with pytest.raises(ValueError, match="stale must be"), resumable(tmp_path, stale="keep"):
        pass


def test_a_models_identity_reads_its_first_and_last_weights():
    """A Hugging Face model is known by its name, size and the sums of its first and last parameter tensors: a
    change to either is another model; a plain value (no model, a number) is itself."""
    from types import SimpleNamespace

    from speculab.backends.journal import model_identity

    net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
    wrapped = SimpleNamespace(model=net)
    before = model_identity(wrapped)
    assert before == model_identity(SimpleNamespace(model=net)) and before[2] == sum(
        p.numel() for p in net.parameters()
    )
    params = list(net.parameters())
    for i in (0, -1):
        saved = params[i].detach().clone()
        with torch.no_grad():
            params[i].add_(1.0)
        assert model_identity(wrapped) != before, i
        with torch.no_grad():
            params[i].copy_(saved)  # exactly as before (adding 1 and taking it off again may not be)
        assert model_identity(wrapped) == before, i
    assert model_identity(None) == [None] and model_identity(3) == [3] and model_identity("tiny") == ["tiny"]


def test_a_journals_header_names_the_calls_probe(pair, tmp_path):
    """The header of a decode's journal says which probe the call ran with (its type), or none."""
    with resumable(tmp_path / "j") as folder:  # removed when the block ends well: read inside it
        decode(pair, PROMPTS[:1], SD(K=2), max_new_tokens=4, key=0)
        decode(pair, PROMPTS[:1], SD(K=2), max_new_tokens=4, key=0, on_round=_Seen())
        headers = [json.loads(path.read_text().splitlines()[0]) for path in folder.glob("decode-*.jsonl")]
    assert sorted(str(h["probe"]) for h in headers) == ["None", "_Seen"]
