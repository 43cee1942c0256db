"""The tiny pair's build (``speculab models build-tiny``): its seeds, its refusals, and a quick build end to end."""

import json
import pytest

from speculab.backends.tiny import build as build_module
from speculab.backends.tiny.build import QUICK, BuildConfig, _seeds, build
from speculab.cli import main


def test_seed_zero_seeds_torch_as_the_shipped_pair_was_built():
    """The shipped pair was built with torch seeds 0, 1, 2, 3 (initialisation and training of the target, then of
    the draft): seed 0 keeps them, whatever the wrapping."""
    assert _seeds(0) == (0, 1, 2, 3)
    assert _seeds(41) == (41, 42, 43, 44)


def test_every_seed_the_command_line_takes_gives_seeds_torch_takes():
    """``--seed`` takes [0, 2⁶⁴); torch takes seeds below 2⁶⁴: the four seeds wrap there instead of overflowing."""
    assert _seeds(2**64 - 1) == (2**64 - 1, 0, 1, 2)
    assert _seeds(2**64 - 3) == (2**64 - 3, 2**64 - 2, 2**64 - 1, 0)
    assert all(0 <= s < 2**64 for s in _seeds(2**64 - 2))


class _Stop(Exception):
    pass


@pytest.mark.parametrize("seed", [0, 12345, 2**64 - 2])
def test_the_build_seeds_the_corpus_the_initialisations_and_the_training_with_its_seed(seed, monkeypatch, tmp_path):
    """Found by review: a build that ignored ``cfg.seed`` passed every test (the slow one reads only the reported
    config). Every random choice of the build is seeded from ``cfg.seed``: the corpus shuffle with it, then torch
    with :func:`_seeds`, in order — the target's initialisation and training, the draft's (stopped before the
    evaluation; the corpus is a few docstrings)."""
    import torch

    seen = []
    docs = [f"def f{i}(x):\n    return x + {i}  # a short document {i}" for i in range(40)]

    def corpus(key):
        seen.append(("corpus", key))
        return docs[:30], docs[30:], {"train_documents": 30, "heldout_documents": 10, "sha256": "0" * 64}

    real_manual_seed = torch.manual_seed
    monkeypatch.setattr(build_module, "corpus", corpus)
    monkeypatch.setattr(torch, "manual_seed", lambda key: seen.append(("init", key)) or real_manual_seed(key))
    monkeypatch.setattr(build_module, "train", lambda *args, **kwargs: seen.append(("train", args[5])))
    monkeypatch.setattr(build_module, "evaluate", lambda *args: (_ for _ in ()).throw(_Stop()))
    with pytest.raises(_Stop):
        build(tmp_path / "pair", BuildConfig(seed=seed, vocab_size=300, **QUICK), log=lambda *_: None)
    init_target, train_target, init_draft, train_draft = _seeds(seed)
    assert seen == [
        ("corpus", seed),
        ("init", init_target),
        ("train", train_target),
        ("init", init_draft),
        ("train", train_draft),
    ]


@pytest.mark.parametrize("seed", [-1, 2**64, 1.0, True, "0"])
def test_a_seed_out_of_range_is_refused_before_any_work(seed, monkeypatch, tmp_path):
    """A bad ``seed`` is refused by name before the corpus is read or a folder is made (minutes of work saved)."""
    monkeypatch.setattr(build_module, "corpus", lambda *_: pytest.fail("the corpus was read"))
    with pytest.raises(ValueError, match=r"^seed must be an int in \[0, 2\*\*64\); got "):
        build(tmp_path / "pair", BuildConfig(seed=seed, **QUICK))
    assert not (tmp_path / "pair").exists()


@pytest.mark.slow
def test_a_quick_build_with_the_largest_seed_writes_a_pair_that_decodes(tmp_path, capsys):
    """``build-tiny --quick`` end to end (under a minute on 2 CPUs), at the largest seed (its later seeds wrap):
    the JSON reports the settings it trained with, and the written folders load as a pair and decode."""
    out = tmp_path / "pair"
    seed = 2**64 - 1
    assert main(["models", "build-tiny", "--quick", "--seed", str(seed), "--out", str(out), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["config"] == {**info["config"], **QUICK, "seed": seed}
    assert json.loads((out / "metrics.json").read_text()) == info  # the model card's data is what it printed
    argv = ["run", "--draft", str(out / "draft"), "--target", str(out / "target"), "--device", "cpu"]
    assert main([*argv, "--max-new-tokens", "6", "--json"]) == 0
    run = json.loads(capsys.readouterr().out)
    assert len(run["texts"]) == 1 and len(run["tokens"][0]) == 6
