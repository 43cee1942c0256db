"""Invalid input, everywhere at once: every case must end in one clear error that names what is wrong.

A table of the public theory functions that read distributions and parameters, fed fixed
bad values and Hypothesis-generated corruptions of valid ones (a NaN, an infinity, a
negative entry, a sum off 1, complex values, ragged rows, a vocabulary of another size);
instance files that are not instances; device and model names that do not exist; and the
command line, where each bad invocation must print exactly one line and exit 2 (the input
is at fault) or 1 (the run failed). A ``ValueError`` must name the argument; nothing may
be silently accepted, clipped or turned into NaN.
"""

import contextlib
import io
import pickle
import re
import warnings
import zipfile

import numpy as np
import pytest

from conftest import model_device
from hypothesis import given
from hypothesis import strategies as st

import speculab.theory as th
from speculab.cli import main

P3, Q3, B3 = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5]), np.array([0.5, 1.0, 0.2])

#: name -> (function of keyword arguments, its valid arguments). Distributions are ``p``/``q``; ``b`` an acceptance.
PAIR_FUNCTIONS = {
    "tv": (lambda p, q: th.tv(p, q), {}),
    "residual": (lambda p, q: th.residual(q, p), {}),
    "residual_mass": (lambda p, q: th.residual_mass(q, p), {}),
    "sd_acceptance": (lambda p, q: th.sd_acceptance(p, q), {}),
    "kl": (lambda p, q: th.kl(p, q), {}),
    "js": (lambda p, q: th.js(p, q), {}),
    "unbiased_rejection_distribution": (lambda p, q, b: th.unbiased_rejection_distribution(p, q, b), {"b": B3}),
    "batch_improvement": (lambda p, q, M: th.batch_improvement(q, p, M), {"M": 2}),
    "batch_rejection_probability": (lambda p, q, M: th.batch_rejection_probability(q, p, M), {"M": 2}),
    "optimal_acceptance": (lambda p, q, M: th.optimal_acceptance(p, q, M), {"M": 2}),
    "algorithm4_accepted_law": (lambda p, q, M: th.algorithm4_accepted_law(p, q, M), {"M": 2}),
    "sprinter_distribution": (lambda p, q, eta_fp: th.sprinter_distribution(p, q, eta_fp), {"eta_fp": 0.1}),
    "sprinter_acceptance_rate": (lambda p, q, eta_fp: th.sprinter_acceptance_rate(p, q, eta_fp), {"eta_fp": 0.1}),
    "biased_acceptance": (lambda p, q, eps: th.biased_acceptance(p, q, eps), {"eps": 0.1}),
    "canonical_optimal_rejection": (lambda p, q, b: th.canonical_optimal_rejection(p, q, b), {"b": B3}),
    "optimal_loss": (lambda p, q, b: th.optimal_loss(p, q, b), {"b": B3}),
    "optimal_loss_lp": (lambda p, q, b: th.optimal_loss_lp(p, q, b), {"b": B3}),
    "optimal_rejection": (lambda p, q, b: th.optimal_rejection(p, q, b), {"b": B3}),
    "pareto_acceptance": (lambda p, q, b: th.pareto_acceptance(p, q, b), {"b": B3}),
    "pareto_gap": (lambda p, q, b: th.pareto_gap(p, q, b), {"b": B3}),
    "rejection_loss": (lambda p, q, b: th.rejection_loss(p, q, b, Q3), {"b": B3}),
    "rejection_probability": (lambda p, b: th.rejection_probability(p, b), {"b": B3}),
}

BAD_DISTRIBUTIONS = {
    "nan": [np.nan, 0.5, 0.5],
    "inf": [np.inf, 0.0, 0.0],
    "negative": [-0.1, 0.6, 0.5],
    "sum 0.6": [0.3, 0.2, 0.1],
    "sum 1.01": [0.51, 0.3, 0.2],
    "complex": np.array([0.5 + 0j, 0.3, 0.2]),
    "complex objects": np.array([0.5 + 1j, 0.3, 0.2], dtype=object),
    "text": "abc",
    "None": None,
    "empty": [],
    "other vocabulary": [0.5, 0.5],
    "ragged": [[0.5, 0.3, 0.2], [0.2, 0.3]],
    "scalar": 1.0,
}
BAD_SCALARS = {
    "M": {"0": 0, "negative": -1, "fraction": 1.5, "nan": np.nan, "text": "2", "bool": True},
    "eps": {"nan": np.nan, "negative": -0.5, "text": "x", "inf": np.inf},
    "eta_fp": {"nan": np.nan, "negative": -0.5, "above 1": 1.5, "text": "x"},
    "b": {
        "nan": [np.nan, 1, 1],
        "above 1": [1.5, 1, 1],
        "negative": [-0.1, 1, 1],
        "other vocabulary": [1, 1],
        "text": "abc",
    },
}


def _call(name, **bad):
    f, extra = PAIR_FUNCTIONS[name]
    kwargs = {"p": P3, "q": Q3, **extra}
    kwargs = {k: v for k, v in kwargs.items() if k in f.__code__.co_varnames}
    kwargs.update(bad)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a NumPy warning on the way is a symptom of input that got through
        return f(**kwargs)


def _refused(argument, call):
    with pytest.raises(ValueError) as info:
        call()
    assert re.search(rf"\b{re.escape(argument)}\b", str(info.value)), (
        f"the message does not name {argument}: {info.value}"
    )


DISTRIBUTION_CASES = [
    (name, arg, label)
    for name, (f, _) in PAIR_FUNCTIONS.items()
    for arg in ("p", "q")
    if arg in f.__code__.co_varnames
    for label in BAD_DISTRIBUTIONS
]
SCALAR_CASES = [
    (name, arg, label) for name, (f, extra) in PAIR_FUNCTIONS.items() for arg in extra for label in BAD_SCALARS[arg]
]


@pytest.mark.parametrize("name, argument, label", DISTRIBUTION_CASES)
def test_a_bad_distribution_is_refused_by_name(name, argument, label):
    _refused(argument, lambda: _call(name, **{argument: BAD_DISTRIBUTIONS[label]}))


@pytest.mark.parametrize("name, argument, label", SCALAR_CASES)
def test_a_bad_parameter_is_refused_by_name(name, argument, label):
    _refused(argument, lambda: _call(name, **{argument: BAD_SCALARS[argument][label]}))


@st.composite
def corrupted(draw):
    """A valid probability vector of 2–6 tokens, then broken in one way."""
    V = draw(st.integers(2, 6))
    w = np.array(draw(st.lists(st.floats(0.01, 1.0), min_size=V, max_size=V)))
    p = w / w.sum()
    how = draw(st.sampled_from(["nan", "inf", "negative", "scale", "complex", "truncate"]))
    i = draw(st.integers(0, V - 1))
    if how == "nan":
        p[i] = np.nan
    elif how == "inf":
        p[i] = draw(st.sampled_from([np.inf, -np.inf]))
    elif how == "negative":
        p[i] = -draw(st.floats(1e-9, 1.0))
    elif how == "scale":
        p = p * draw(st.one_of(st.floats(0.0, 0.999), st.floats(1.001, 10.0)))
    elif how == "complex":
        p = p.astype(complex)
    else:
        p = p[:-1] if V > 2 else p[:1]
    return V, p


@given(
    corrupted(),
    st.sampled_from(sorted(name for name in PAIR_FUNCTIONS if name != "rejection_probability")),
    st.sampled_from(["p", "q"]),
)
def test_corrupted_distributions_are_refused_by_name(case, name, argument):
    V, bad = case
    rng = np.random.default_rng(V)
    good = rng.dirichlet(np.ones(V))
    extra = {k: (np.ones(V) * 0.5 if k == "b" else v) for k, v in PAIR_FUNCTIONS[name][1].items()}
    f = PAIR_FUNCTIONS[name][0]
    other = "q" if argument == "p" else "p"
    kwargs = {argument: bad, other: good, **extra}
    if name == "rejection_loss":
        f = lambda p, q, b: th.rejection_loss(p, q, b, good)  # noqa: E731
    if bad.shape != good.shape:  # a truncated vector: the message may name either (the pair's shapes differ)
        with pytest.raises(ValueError, match=r"\b(p|q|b)\b"):
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                f(**kwargs)
        return
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _refused(argument, lambda: f(**kwargs))


# -- files that are not instances -------------------------------------------------------------------------------
def _write(path, how: str):
    if how == "empty":
        path.write_bytes(b"")
    elif how == "random bytes":
        path.write_bytes(np.random.default_rng(0).bytes(300))
    elif how == "text":
        path.write_text("P,Q,rho\n1,2,3\n")
    elif how == "truncated":
        th.MarkovInstance.random(4, 3, 0).save(path)
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    elif how == "pickle":
        path.write_bytes(pickle.dumps({"P": 1}))
    elif how == "object arrays":
        np.savez(path, P=np.array([{"x": 1}], dtype=object), Q=np.zeros(1), rho=np.zeros(1))
    elif how == "npy":
        with open(path, "wb") as f:
            np.save(f, np.zeros(3))
    elif how == "other zip":
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("readme.txt", "hello")
    elif how == "folder":
        path.mkdir()
    elif how in HEADERS:  # a saved instance with one header field or array replaced
        inst = th.MarkovInstance.random(4, 3, 0)
        arrays = {"P": inst.P[:1], "Q": inst.Q[:1], "rho": inst.rho, "T": 4, "format_version": 2}
        np.savez(path, **{**arrays, **HEADERS[how]})


#: A field of a saved instance's header (or an array) replaced by what another tool might write there.
HEADERS = {
    "format_version array": {"format_version": np.array([1, 2])},
    "format_version string": {"format_version": np.array("2")},
    "format_version text": {"format_version": np.array("two")},
    "format_version fraction": {"format_version": np.array(1.5)},
    "format_version bool": {"format_version": np.array(True)},
    "format_version 0": {"format_version": np.array(0)},
    "format_version -1": {"format_version": np.array(-1)},
    "T string": {"T": np.array("4")},
    "T array": {"T": np.array([4, 4])},
    "T bool": {"T": np.array(True)},
    "T 0": {"T": np.array(0)},
    "rho text": {"rho": np.array(["a", "b", "c"])},
    "rho short": {"rho": np.array([1.0])},
    "P text": {"P": np.array(["a"])},
    "Q not rows": {"Q": np.full((1, 3, 3), 0.5)},
}


FILE_CASES = [
    "missing",
    "empty",
    "random bytes",
    "text",
    "truncated",
    "pickle",
    "object arrays",
    "npy",
    "other zip",
    "folder",
    *HEADERS,
]


@pytest.mark.parametrize("how", FILE_CASES)
def test_a_file_that_is_not_an_instance_is_refused_naming_it(tmp_path, how):
    path = tmp_path / "bad.npz"
    if how != "missing":
        _write(path, how)
    with pytest.raises(ValueError, match=re.escape(str(path))):
        th.MarkovInstance.load(path)


@pytest.mark.parametrize("how", list(HEADERS))
def test_an_instance_file_with_a_bad_header_is_one_line_naming_it(tmp_path, capsys, how):
    """``--instance FILE`` whose ``format_version`` or ``T`` is an array, a string, a fraction, a bool or below 1,
    or whose arrays are not an instance's: one line naming the file and the field, exit 2 (an array version was an
    unexpected TypeError; a string version, 0 or -1, was read as a version; a T of 0 was told without the file)."""
    path = tmp_path / "bad.npz"
    _write(path, how)
    assert main(["theory", "rejections", "--instance", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"speculab: error: {path} is not a speculab Markov instance: ") and err.count("\n") == 1
    assert how.split()[0] in err, err


# -- the library's deeper arguments -----------------------------------------------------------------------------
def _rule_for(T: int, V: int):
    from speculab.methods import SpecDecPP

    return SpecDecPP(0.5, max_K=2).adaptive_drafting(th.MarkovInstance.random(T, V, 1))


def _along_target(f):
    from speculab.theory import autodiff

    pytest.importorskip("jax")
    return autodiff.along_target(f, *autodiff.arrays_of(th.MarkovInstance.random(4, 3, 0)))


def _specdecpp_with(head):
    from speculab.methods import SpecDecPP
    from speculab.sim import simulate

    return simulate(th.MarkovInstance.random(3, 3, 0), SpecDecPP(0.5, head=head), 100, 0)


def _read_head(score, method: str = "specdecpp"):
    from speculab.methods import SpecDecPP, Sprinter

    rule = SpecDecPP(0.5) if method == "specdecpp" else Sprinter(verifier=lambda t, prev, x: 0.5 + 0 * x)
    return rule.read_head(score, 0.5)


#: name -> (a call with one bad argument, the argument its message must name).
DEEP_CASES = {
    "SpecDecPP head gives text": (lambda: _specdecpp_with(lambda t, prev, x: "a"), "head"),
    "SpecDecPP head gives numbers as text": (lambda: _specdecpp_with(lambda t, prev, x: ["0.5"] * len(x)), "head"),
    "SpecDecPP head gives None": (lambda: _specdecpp_with(lambda t, prev, x: None), "head"),
    "SpecDecPP head gives a dict": (lambda: _specdecpp_with(lambda t, prev, x: {}), "head"),
    "SpecDecPP head gives complex": (lambda: _specdecpp_with(lambda t, prev, x: 0.5 + 0j * x), "head"),
    "SpecDecPP trained head gives text": (lambda: _read_head("0.5"), "acceptance head"),
    "SpecDecPP trained head gives two values": (lambda: _read_head(np.array([0.5, 0.5])), "acceptance head"),
    "SpecDecPP trained head gives None": (lambda: _read_head(None), "acceptance head"),
    "SpecDecPP trained head gives complex": (lambda: _read_head(np.complex128(0.5 + 1j)), "acceptance head"),
    "Sprinter trained verifier gives a bool": (lambda: _read_head(True, "sprinter"), "verifier"),
    "random(concentration='a')": (lambda: th.MarkovInstance.random(3, 3, 0, concentration="a"), "concentration"),
    "random(concentration=None)": (lambda: th.MarkovInstance.random(3, 3, 0, concentration=None), "concentration"),
    "random(concentration=[1, 2])": (lambda: th.MarkovInstance.random(3, 3, 0, concentration=[1, 2]), "concentration"),
    "random(concentration=1j)": (lambda: th.MarkovInstance.random(3, 3, 0, concentration=1j), "concentration"),
    "random(concentration=True)": (lambda: th.MarkovInstance.random(3, 3, 0, concentration=True), "concentration"),
    "stopping_counts(rule of another V)": (
        lambda: th.stopping_counts(th.MarkovInstance.random(4, 3, 0), _rule_for(4, 4)),
        "rule",
    ),
    "stopping_counts(rule of a shorter T)": (
        lambda: th.stopping_counts(th.MarkovInstance.random(4, 3, 0), _rule_for(3, 3)),
        "rule",
    ),
    "stopping_counts(rule of a longer T)": (
        lambda: th.stopping_counts(th.MarkovInstance.random(4, 3, 0), _rule_for(6, 3)),
        "rule",
    ),
    "along_target(f gives rows)": (lambda: _along_target(lambda p, q: p), "f"),
    "along_target(f gives a scalar)": (lambda: _along_target(lambda p, q: abs(p - q).sum() / 2), "f"),
    "along_target(f gives a matrix)": (lambda: _along_target(lambda p, q: p @ q.T), "f"),
    "along_target(f gives text)": (lambda: _along_target(lambda p, q: "tv"), "f"),
    "along_target(f gives complex)": (lambda: _along_target(lambda p, q: (p * 1j).sum(-1)), "f"),
    "along_target(f is not a function)": (lambda: _along_target(3), "f"),
}


@pytest.mark.parametrize("case", list(DEEP_CASES))
def test_a_deep_library_argument_is_refused_by_name(case):
    """A SpecDec++ head that gives text, None, a dict or complex numbers (numbers as text were read as numbers,
    complex ones cut to their real part; the others a TypeError or numpy's message), one read on real models that
    gives text, two values or None, a Dirichlet concentration that is not a number (a TypeError from
    ``np.isfinite``), a stopping rule built for another instance (a broadcast error for another ``V``, an
    IndexError for a shorter ``T``, and for a longer ``T`` a silent answer), a row function of ``along_target``
    that does not give one number per context (rows gave a ``(T, V)`` result silently; a scalar an IndexError):
    each a ``ValueError`` naming the argument."""
    call, argument = DEEP_CASES[case]
    _refused(argument, call)


# -- devices and models that do not exist ---------------------------------------------------------------------
@pytest.mark.parametrize("device", ["foo", "cuda:banana", 3.5, "cuda", "cuda:7", "meta", "mps", "xpu", "xla"])
def test_a_device_that_does_not_exist_here_is_refused(device):
    torch = pytest.importorskip("torch")
    from speculab.backends import resolve_device

    if device in ("cuda", "mps", "xpu") and getattr(torch, device).is_available():
        pytest.skip(f"this machine has {device}")
    with pytest.raises(ValueError, match="device"):
        resolve_device(device)


@pytest.mark.parametrize("device", ["meta", "mps"])
def test_a_device_this_machine_lacks_is_one_line_naming_the_flag(device, capsys):
    """``--device meta`` (no values to decode with) and ``--device mps`` on a machine without it: one line naming
    the flag, exit 2, before a model loads (they were an unexpected RuntimeError from deep in decoding, exit 1)."""
    torch = pytest.importorskip("torch")
    if device == "mps" and torch.mps.is_available():
        pytest.skip("this machine has mps")
    assert main(["run", "--pair", "tiny", "--device", device, "--max-new-tokens", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("speculab: error: argument --device: must be one this machine has ('auto', 'cpu'")
    assert f"got {device!r}" in err and err.count("\n") == 1


@pytest.mark.parametrize("dtype", ["float8", "cuda", "int64", "float8_e4m3fn", "complex64", "bool", None, 3])
def test_a_model_dtype_that_is_not_a_floating_one_is_refused_by_name(dtype):
    """``load_pair(dtype=...)``: a name torch lacks (``"float8"``), a device's name (``"cuda"``), an integer, fp8,
    complex or bool dtype, ``None`` (which loaded the weights in float16): refused naming ``dtype`` before a model
    loads (they were an AttributeError, a pickling TypeError, or transformers' multi-line error)."""
    torch = pytest.importorskip("torch")
    from speculab.backends import load_pair

    given = getattr(torch, dtype) if dtype in ("int64", "float8_e4m3fn", "complex64", "bool") else dtype
    _refused("dtype", lambda: load_pair("tiny", device="cpu", dtype=given))


@pytest.mark.parametrize("how", ["missing", "file", "no config"])
def test_a_model_path_that_is_not_a_model_folder_is_refused(tmp_path, how):
    pytest.importorskip("torch")
    from speculab.backends import load_pair

    path = tmp_path / "model"
    if how == "file":
        path.write_text("x")
    elif how == "no config":
        path.mkdir()
    with pytest.raises(ValueError, match="model folder"):
        load_pair(str(path), str(path))


def _no_hub_load(*args, **kwargs):
    raise AssertionError("transformers was asked to load a model the hub cannot give")


def test_a_hub_name_neither_cached_nor_reachable_is_refused_at_once(tmp_path, monkeypatch, capsys):
    """Offline, a hub name not in the cache is refused in one line before transformers retries (about 50 s)."""
    pytest.importorskip("torch")
    from huggingface_hub import constants
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from speculab.backends import pair as pair_module
    from speculab.cli import main

    monkeypatch.setattr(pair_module, "_hub_reachable", lambda: False)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(AutoTokenizer, "from_pretrained", _no_hub_load)
    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", _no_hub_load)
    assert main(["run", "--draft", "someone/no-such-model", "--target", "someone/no-such-model"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "'someone/no-such-model' is not a local model folder nor in the" in err
    assert "cannot be reached" in err, err


def test_a_cached_hub_name_loads_from_the_cache_alone_when_the_hub_is_unreachable(tmp_path, monkeypatch):
    from huggingface_hub import constants

    from speculab.backends import pair as pair_module

    snapshot = tmp_path / "hub" / "models--someone--cached" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (tmp_path / "hub" / "models--someone--cached" / "refs").mkdir()
    (tmp_path / "hub" / "models--someone--cached" / "refs" / "main").write_text("abc")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(pair_module, "_hub_reachable", lambda: False)
    assert pair_module._cached_only("someone/cached") is True  # transformers then reads the cache only
    with pytest.raises(ValueError, match="not a local model folder nor in the Hugging Face cache"):
        pair_module._cached_only("someone/not-cached")
    monkeypatch.setattr(pair_module, "_hub_reachable", lambda: True)
    assert pair_module._cached_only("someone/not-cached") is False  # reachable: transformers downloads it
    assert pair_module._cached_only(str(snapshot)) is False  # a local folder


# -- the command line -----------------------------------------------------------------------------------------
CLI_CASES = [
    (["sim", "--T", "0"], 2, "argument --T: must be an integer >= 1; got 0"),
    (["sim", "--T", "abc"], 2, "invalid int value"),
    (["sim", "--V", "1"], 2, "argument --V: must be an integer >= 2; got 1"),
    (
        ["sim", "--V", "100000000", "--T", "100000"],
        1,
        "out of memory (MemoryError: --T 100000 --V 100000000: the "
        "instance's 2·T·V² = 2,000,000,000,000,000,000,000 float64 values); use a smaller --T or --V",
    ),
    (["sim", "--n-runs", "-5"], 2, "argument --n-runs: must be"),
    (["sim", "--K", "0"], 2, "argument --K: must be an integer >= 1 (omit --K for ∞); got 0"),
    (["sim", "--engine", "foo"], 2, "invalid choice"),
    (["sim", "--method", "nope"], 2, "invalid choice"),
    (["sim", "--seed", str(2**64)], 2, "argument --seed: must be an integer in"),
    (["sim", "--seed", "-1"], 2, "argument --seed: must be an integer in [0, "),
    (["sim", "--eps", "0.1"], 2, "--eps does not apply"),
    (
        ["sim", "--method", "batch", "--M", str(10**20)],
        2,
        "argument --M: must be an integer in [1, 9,007,199,254,740,992]",
    ),
    (["theory", "batch", "--M", str(10**20)], 2, "argument --M: must be a whole number in [1, 2^53] or 'inf'"),
    (["sim", "--method", "fuzzy", "--theta", "-1"], 2, "argument --theta: must be a number >= 0; got -1.0"),
    (
        ["sim", "--method", "sprinter", "--eta-tp", "2", "--eta-fp", "0"],
        2,
        "argument --eta-tp: must be a number in [0, 1]",
    ),
    (["theory", "batch", "--M", "0"], 2, "argument --M: must be"),
    (["theory", "batch", "--M", "abc"], 2, "argument --M: must be"),
    (["theory", "rejections", "--instance", "/etc/passwd"], 2, "not a speculab Markov instance"),
    (
        ["theory", "rejections", "--T", "5", "--V", "3", "--concentration", "-1"],
        2,
        "argument --concentration: must be a finite number > 0",
    ),
    (["instance", "--T", "3"], 2, "--out"),
    (["repro", "nonexist"], 2, "unknown figure"),
    (["repro", "yin-fig2a", "--n-runs", "0"], 2, "argument --n-runs"),
    (["models", "build-tiny", "--out", "/proc/speculab-cannot-write"], 1, "cannot write"),
    ([], 2, "required"),
    (["bogus"], 2, "invalid choice"),
    (["run", "--pair", "tiny", "--device", "foo"], 2, "device"),
    (["compare", "--pair", "tiny", "--device", "meta"], 2, "argument --device: must be one this machine has"),
    (["run", "--draft", "/nonexistent-draft", "--target", "/nonexistent-target"], 2, "no model folder"),
    (["compare", "--pair", "tiny", "--runs-per-prompt", "0"], 2, "argument --runs-per-prompt"),
    (["run", "--pair", "tiny", "--temperature", "-1"], 2, "argument --temperature: must be a finite number >= 0"),
    (["run", "--pair", "tiny", "--top-k", "0"], 2, "argument --top-k"),
    (["run", "--pair", "tiny", "--top-p", "2"], 2, "argument --top-p: must be a number in (0, 1]"),
    (["run", "--pair", "tiny", "--prompt", ""], 2, "empty"),
    (["run", "--pair", "tiny", "--prompt", "ab\udcffc"], 2, "argument --prompt: must be UTF-8 text; got 'ab\\udcffc'"),
    (["compare", "--pair", "tiny", "--prompt", "a", "--prompt", "\udcc3("], 2, "argument --prompt: must be UTF-8"),
    (["run", "--pair", "tiny", "--max-new-tokens", "0"], 2, "argument --max-new-tokens"),
    (["run", "--pair", "tiny", "--resume"], 2, "--resume needs --checkpoint"),
    (["run", "--pair", "tiny", "--checkpoint", ""], 2, "folder must be a path"),
    (
        ["compare", "--pair", "tiny", "--checkpoint", "/nonexistent-speculab-journal", "--resume"],
        2,
        "nothing to resume",
    ),
    (["compare", "--pair", "tiny", "--batch-size", "0"], 2, "argument --batch-size"),
    (["run", "--pair", "tiny", "--batch-size", "-2"], 2, "argument --batch-size"),
]


@pytest.mark.parametrize("argv, code, match", CLI_CASES, ids=[" ".join(c[0]) or "(nothing)" for c in CLI_CASES])
def test_a_bad_command_line_is_one_line_and_an_exit_code(argv, code, match, tmp_path):
    if any(a in ("run", "compare") for a in argv[:1]):
        pytest.importorskip("torch")
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            got = main(argv)
        except SystemExit as exc:  # argparse's own errors exit from inside parse_args
            got = exc.code
    lines = [line for line in err.getvalue().splitlines() if line.strip()]
    assert got == code, lines
    assert len(lines) == 1 and lines[0].startswith("speculab") and "error: " in lines[0], lines
    assert match in lines[0]


# -- the real-model backend's own inputs (found by the cold review of issue 11) ------------------------------------
@pytest.fixture(scope="module")
def tiny():
    pytest.importorskip("torch")
    from speculab.backends import load_pair

    return load_pair("tiny", device=model_device())


def _backend_cases():
    from speculab.backends import NGramModel, PromptLookupModel, ngram_draft
    from speculab.backends.latency import speed_check, timed_decode
    from speculab.methods import SD, Autoregressive

    return {
        "ngram_draft(str)": (lambda t: ngram_draft(t.tokenizer, "hello world"), "texts"),
        "timed_decode([])": (lambda t: timed_decode(t, [], SD(), max_new_tokens=4, key=0), "prompts"),
        "NGramModel(alpha=inf)": (lambda t: NGramModel([1, 2], 2, 5, alpha=float("inf")), "alpha"),
        "NGramModel(float ids)": (lambda t: NGramModel([1.7, 2.2], 2, 5), "token_ids"),
        "NGramModel(2-D ids)": (lambda t: NGramModel([[1, 2]], 2, 5), "token_ids"),
        "NGramModel(vocab_size=0)": (lambda t: NGramModel([1, 2], 2, 0), "vocab_size"),
        "PromptLookupModel(vocab_size=0)": (lambda t: PromptLookupModel(0), "vocab_size"),
        "decode(non-UTF-8 prompt)": (
            lambda t: __import__("speculab.backends", fromlist=["decode"]).decode(t, ["a", "b\udcff"], SD(), key=0),
            "prompt 1",
        ),
        "decode(on_round=3)": (
            lambda t: __import__("speculab.backends", fromlist=["decode"]).decode(t, ["a"], SD(), key=0, on_round=3),
            "on_round",
        ),
        "speed_check(same prompt ×4)": (
            lambda t: speed_check(t, ["a"] * 4, SD(K=2), max_new_tokens=4, key=0),
            "distinct",
        ),
        "speed_check(Autoregressive)": (
            lambda t: speed_check(t, ["a", "b", "c", "d"], Autoregressive(), max_new_tokens=4, key=0),
            "method",
        ),
    }


@pytest.mark.parametrize(
    "case",
    [
        "ngram_draft(str)",
        "timed_decode([])",
        "NGramModel(alpha=inf)",
        "NGramModel(float ids)",
        "NGramModel(2-D ids)",
        "NGramModel(vocab_size=0)",
        "PromptLookupModel(vocab_size=0)",
        "decode(on_round=3)",
        "decode(non-UTF-8 prompt)",
        "speed_check(same prompt ×4)",
        "speed_check(Autoregressive)",
    ],
)
def test_backend_inputs_are_refused_by_name(tiny, case):
    call, argument = _backend_cases()[case]
    _refused(argument, lambda: call(tiny))


def _pair_takers():
    from speculab.backends import decode
    from speculab.backends.head_data import specdecpp_examples, sprinter_examples
    from speculab.backends.latency import speed_check, timed_decode
    from speculab.certify import check_decoder
    from speculab.compare import compare
    from speculab.planning.plan import plan
    from speculab.validate import validate

    return {
        "decode": lambda pair: decode(pair, ["a"], key=0),
        "compare": lambda pair: compare(pair, key=0),
        "validate": lambda pair: validate(pair, key=0),
        "plan": lambda pair: plan(pair, prompts=[[1]], held_out=[[2]], sampling=None, key=0),
        "timed_decode": lambda pair: timed_decode(pair, ["a"], None, max_new_tokens=4, key=0),
        "speed_check": lambda pair: speed_check(pair, ["a"], None, max_new_tokens=4, key=0),
        "check_decoder": lambda pair: check_decoder(None, pair, "a", runs=10, key=0),
        "sprinter_examples": lambda pair: sprinter_examples(pair, ["a"]),
        "specdecpp_examples": lambda pair: specdecpp_examples(pair, ["a"]),
    }


PAIR_TAKERS = [
    "decode",
    "compare",
    "validate",
    "plan",
    "timed_decode",
    "speed_check",
    "check_decoder",
    "sprinter_examples",
    "specdecpp_examples",
]


@pytest.mark.parametrize("pair", ["tiny", None, ("tiny-draft", "tiny-target")], ids=["'tiny'", "None", "tuple"])
@pytest.mark.parametrize("function", PAIR_TAKERS)
def test_a_pair_given_by_name_is_refused_in_one_line(function, pair):
    """``decode("tiny", ...)`` and every other function of a loaded pair: a name (or anything but a ``ModelPair``)
    is refused before any work, naming ``pair`` and, for a name, the ``load_pair`` call that loads it once (it was
    an AttributeError deep inside: ``'str' object has no attribute 'vocab_size'``)."""
    pytest.importorskip("torch")
    with pytest.raises(ValueError, match=r"^pair must be a ModelPair \(speculab.backends.load_pair\); got ") as info:
        _pair_takers()[function](pair)
    assert "\n" not in str(info.value)
    assert ("load it first: pair = load_pair('tiny')" in str(info.value)) == (pair == "tiny")


def test_compare_without_a_single_draft_leaves_out_the_acceptance_model(tiny):
    """Prompt lookup with nothing to copy drafts nothing: the i.i.d. acceptance row has no α to use (it said
    'alpha must lie in [0, 1]; got nan'); the rows that hold are reported."""
    from speculab.backends import PromptLookupModel, load_pair
    from speculab.compare import compare
    from speculab.methods import SD

    pair = load_pair(PromptLookupModel(tiny.vocab_size, 3), "tiny-target", device=model_device())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = compare(pair, SD(K=2), [[5], [9]], max_new_tokens=1, runs_per_prompt=2, key=0)
    names = [row.quantity for row in result.rows]
    assert not any("Leviathan" in n for n in names) and any("T1" in n for n in names)
    assert all(np.isfinite(row.measured) for row in result.rows)


def test_numpy_scalars_are_numbers_in_the_sampling_warp_and_the_ngram():
    pytest.importorskip("torch")
    from speculab.backends import NGramModel, Sampling

    s = Sampling(np.float32(0.5), top_k=np.int64(3), top_p=np.float64(0.9))
    assert (s.temperature, s.top_k, s.top_p) == (0.5, 3, 0.9) and type(s.top_k) is int
    assert NGramModel([1, 2, 3], np.int64(2), 5).n == 2


# -- every method's own parameters ---------------------------------------------------------------------------------
def _method_cases():
    import dataclasses

    from test_methods import METHODS
    from speculab.methods.base import cli_params

    bad = {int: [0, -1, 1.5, True, "3", float("nan")], float: [float("nan"), float("-inf"), -1.0, True, "0.1"]}
    cases, seen = [], set()
    for method in METHODS:
        if type(method) in seen:
            continue
        seen.add(type(method))
        for field, f in cli_params(type(method)).items():
            for value in bad.get(f.metadata.get("type"), []):
                cases.append(
                    pytest.param(
                        lambda m=method, k=field, v=value: dataclasses.replace(m, **{k: v}),
                        field,
                        id=f"{type(method).__name__}({field}={value!r})",
                    )
                )
    return cases


@pytest.mark.parametrize("build, field", _method_cases())
def test_a_methods_bad_parameter_is_refused_by_name(build, field):
    """Each registered method's numeric parameters (those the CLI exposes): zero, negative, fractional, boolean,
    string or NaN counts, and NaN, −∞, negative, boolean or string rates end in a ValueError naming the parameter."""
    with pytest.raises(ValueError, match=field):
        build()


def _repro_with_runs():
    import inspect

    from speculab import repro

    return [name for name in repro.FIGURES if "n_runs" in inspect.signature(repro.get(name).run).parameters]


@pytest.mark.parametrize("name", _repro_with_runs())
@pytest.mark.parametrize("runs", ["0", "-3"])
def test_a_reproductions_bad_run_count_is_refused_before_it_computes(name, runs, tmp_path, capsys, monkeypatch):
    """``speculab repro NAME --n-runs 0`` ends at once (nothing simulated, no file written) with one line naming
    the flag and exit 2 — before this check, some reproductions computed their theory for seconds first, and one
    blamed its prompts."""
    from speculab import repro
    from speculab.cli import main

    monkeypatch.setattr(repro.get(name), "run", lambda **kw: pytest.fail("the reproduction ran"))
    assert main(["repro", name, "--n-runs", runs, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("speculab repro: error: argument --n-runs: must be an integer >= 1")
    assert err.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_every_function_of_an_instance_refuses_anything_else_by_name():
    """Each public function of ``speculab.theory`` whose first argument is ``inst``, and every method's ``expected``,
    refuses a file name, an array or ``None`` given for the instance with one ``ValueError`` naming ``inst`` (found
    by an adversarial review: 23 of them failed deep inside with ``AttributeError: 'str' object has no attribute
    'T'``)."""
    import inspect

    import speculab.theory as theory
    from speculab.methods import REGISTRY

    checked = []
    for name in theory.__all__:
        f = getattr(theory, name)
        if inspect.isfunction(f) and list(inspect.signature(f).parameters)[:1] == ["inst"]:
            checked.append(f)
    methods = [
        cls(
            **{
                "sd": {},
                "ar": {},
                "batch": {"M": 2},
                "rejection": {"b": lambda p, q: 0 * p},
                "biased": {"eps": 0.1},
                "fuzzy": {"theta": 0.1},
                "typical": {"eps": 0.1, "delta": 0.3},
                "sprinter": {"eta_tp": 0.5, "eta_fp": 0.5},
                "specdecpp": {"h": 0.5},
                "block": {"K": 2},
                "optimal-batch": {"M": 2},
                "rrs": {"tree": (2,)},
                "traversal": {"tree": (2,)},
                "greedy-draft": {},
                "synthetic": {"rates": (0.5,)},
            }[name]
        )
        for name, cls in REGISTRY.items()
    ]
    assert len(checked) >= 20 and len(methods) == len(REGISTRY)
    for bad in ("inst.npz", np.ones((3, 2, 2)), None):
        for f in checked:
            with pytest.raises(ValueError, match=r"^inst must be a MarkovInstance"):
                f(
                    bad,
                    *[0.5]
                    * (sum(p.default is inspect.Parameter.empty for p in inspect.signature(f).parameters.values()) - 1),
                )
        for method in methods:
            with pytest.raises(ValueError, match=r"^inst must be a MarkovInstance"):
                method.expected(bad)
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'inst'"):
        theory.sd_expected_rejections()  # no instance at all: Python's own error, not a wrong type


def _serve(handle):
    """A local TCP listener that calls ``handle(connection)`` for each connection, on a thread; its port."""
    import socket
    import threading

    server = socket.create_server(("127.0.0.1", 0))

    def loop():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                handle(conn)

    threading.Thread(target=loop, daemon=True).start()
    return server


@pytest.mark.parametrize(
    "answer, reachable",
    [
        (b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", True),
        (b"HTTP/1.0 404 Not Found\r\nContent-Length: 0\r\n\r\n", True),  # an answer: the hub is there
        (None, False),  # accepted, then closed: what a broken TLS handshake looks like to the client
    ],
)
def test_the_hub_is_reachable_only_when_it_answers_a_request(monkeypatch, answer, reachable):
    """Found by review: a host that accepted the connection and then failed TLS was taken as reachable, and
    transformers retried for a minute (22 lines). Now the check makes the request itself, within HUB_TIMEOUT."""
    import socket
    import time

    from huggingface_hub import constants

    from speculab.backends import pair as pair_module

    def handle(conn):
        conn.recv(4096)
        if answer is not None:
            conn.sendall(answer)

    server = _serve(handle)
    port = server.getsockname()[1]
    try:
        monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{port}")
        start = time.monotonic()
        assert pair_module._hub_reachable() is reachable
        assert time.monotonic() - start < pair_module.HUB_TIMEOUT
        monkeypatch.setattr(constants, "ENDPOINT", f"https://127.0.0.1:{port}")
        assert pair_module._hub_reachable() is False  # plain HTTP, or nothing, where TLS is expected
    finally:
        server.close()
    with socket.socket() as bound:  # bound, not listening: a connection to it is refused
        bound.bind(("127.0.0.1", 0))
        monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{bound.getsockname()[1]}")
        assert pair_module._hub_reachable() is False
