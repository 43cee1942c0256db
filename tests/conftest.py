import os
import re

import numpy as np

import pytest
from hypothesis import HealthCheck, settings

# Property tests: fixed derandomised profile in CI so a run never flakes;
# locally the same profile unless HYPOTHESIS_PROFILE says otherwise.
settings.register_profile(
    "ci", max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("thorough", max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def model_device() -> str:
    """Where the real-model tests load the models: the run's ``--device`` option (root ``conftest.py``), default
    ``cpu``, so the same tests run unchanged on a GPU (``./dev test --device cuda``)."""
    return os.environ.get("SPECULAB_TEST_DEVICE", "cpu")


def method_id(method) -> str:
    """A test id from a method's repr without memory addresses (``RejectionDecoding(b=<function f at 0x…>)``): every
    process must collect the same ids (pytest-xdist's workers do, and the root conftest.py refuses others)."""
    return re.sub(r" at 0x[0-9a-f]+", "", repr(method))


#: Monte-Carlo agreement bound in standard errors (SPEC/STYLE: |z| < 5).
Z_BOUND = 5.0


def full_tier_only(params, *ids):
    """``params`` (``pytest.param``s with ids) with those whose id is in ``ids`` marked slow: run in the full tier
    only, for the fast tier's time (its promise: under five minutes on 2 cores). Each is the most expensive case of
    its parametrization, whose cheaper cases — the same check on another seed, method size or planted bug — still
    run in the fast tier. An id that no case has is refused: a renamed case must not return to the fast tier."""
    params = list(params)
    unknown = sorted(set(ids) - {p.id for p in params})
    if unknown:
        raise ValueError(f"full_tier_only: no case has the id(s) {unknown}")
    return [pytest.param(*p.values, id=p.id, marks=(*p.marks, pytest.mark.slow)) if p.id in ids else p for p in params]


@pytest.hookimpl(tryfirst=True)  # before the repository's conftest.py skips what is marked slow
def pytest_collection_modifyitems(config, items):
    for item in items:  # a test that checks agreement through ``agrees`` is a power test too
        if "agrees" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.power)
    # --runslow and the skipping of tests marked slow: the repository's conftest.py


def assert_frozen(obj) -> None:
    """``obj`` is a frozen dataclass: results are values and methods hashable configurations (STYLE 5, 6)."""
    import dataclasses

    assert dataclasses.is_dataclass(obj), type(obj)
    fields = dataclasses.fields(obj)
    field = fields[0].name if fields else "anything"  # a frozen dataclass refuses any attribute
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(obj, field, getattr(obj, field, None))


#: A power check asserts that its check refuses a named wrong answer with at least this probability.
POWER = 0.99


def power(shift: float) -> float:
    """The chance that a ``|z| < Z_BOUND`` check refuses when the truth lies ``shift`` standard errors from the value
    it checks: ``P(|N(shift, 1)| >= Z_BOUND)`` (normal approximation of the estimate)."""
    from scipy.stats import norm

    return float(norm.sf(Z_BOUND - abs(shift)) + norm.cdf(-Z_BOUND - abs(shift)))


def assert_power(record_property, alternative: str, value: float) -> None:
    """Assert that a check refuses ``alternative`` with probability ``value > POWER``, and record it for
    ``benchmarks/power.py`` (the table of every statistical test's power; a JUnit property ``power: …``)."""
    record_property("power", f"{value:.6f} | {alternative}")
    assert value > POWER, (alternative, value)


#: The error every Monte-Carlo agreement check must be able to see (issue: "a test that cannot tell a 10 % error").
REL_ERROR = 0.10


def binomial_se(p, n):
    """Standard error of a frequency over ``n`` draws when its probability is ``p`` (exact ``p``, not the sample's)."""
    p = np.asarray(p, dtype=np.float64)
    return np.sqrt(p * (1 - p) / n)


@pytest.fixture
def agrees(record_property):
    """The Monte-Carlo agreement check with power, recording to this test's JUnit properties (see ``make_agrees``)."""
    return make_agrees(record_property)


def make_agrees(record_property):
    """``agrees(measured, expected, what, se=…, wrong=…, alternative=…)``: a Monte-Carlo check with power.

    Asserts ``|measured − expected| < Z_BOUND · se`` (elementwise for arrays of one shape, both finite — a NaN
    fails; where ``se = 0`` the two must agree to the round-off of the exact value, ``1e-9`` relative, as
    ``Estimate.z`` does). ``measured`` may be an
    ``Estimate`` (its mean and standard error are used) and ``se`` may be given alone.

    Then the power: the chance that this same check refuses the wrong answer ``wrong`` (default: ``expected`` off
    by ``REL_ERROR``, i.e. 10 %, named ``alternative``), computed with ``conftest.power`` from the check's own
    standard error, is recorded for ``benchmarks/power.py`` and asserted above ``POWER``. For arrays it is the
    power of the best-placed entry — a lower bound on the chance that some entry refuses. An entry checked with
    ``se = 0`` (every run gave the same count, or an exact probability of 0 or 1) is checked exactly and refuses
    any other value beyond round-off, with power 1 (also where ``expected = 0``, which has no 10 % error).
    Tests that request this fixture are marked ``power``.

    ``wrong_se`` is the spread of the measurement under the wrong answer where it differs from ``se`` (0 when the
    wrong answer is deterministic, e.g. every row drawing the same token).

    ``carried_by`` is for a check whose sample size is set by cost, not power (the real-model ``compare`` rows on
    a handful of prompts): its power is recorded, visibly, with the name of the test that carries the power for
    the same quantity, and is not asserted.
    """

    def check(
        measured,
        expected,
        what: str,
        *,
        se=None,
        wrong=None,
        alternative: str | None = None,
        wrong_se=None,
        carried_by: str | None = None,
    ) -> None:
        from speculab.counts import Estimate

        if isinstance(measured, Estimate):
            measured, se = measured.mean, measured.se if se is None else se
        assert se is not None, "agrees needs a standard error: an Estimate or se=…"
        measured, expected = np.asarray(measured, dtype=np.float64), np.asarray(expected, dtype=np.float64)
        assert measured.shape == expected.shape and measured.size, (what, "shapes", measured.shape, expected.shape)
        assert np.all(np.isfinite(measured)) and np.all(np.isfinite(expected)), (what, "not finite", measured, expected)
        measured, expected, se = np.broadcast_arrays(measured, expected, np.asarray(se, dtype=np.float64))
        assert np.all(np.isfinite(se)) and np.all(se >= 0), (what, se)
        roundoff = 1e-9 * np.maximum(1.0, np.abs(expected))
        z = np.where(se > 0, np.abs(measured - expected) / np.where(se > 0, se, 1.0), 0.0)
        bad = np.where(se > 0, z >= Z_BOUND, np.abs(measured - expected) > roundoff)
        assert not bad.any(), (what, "measured", measured[bad], "expected", expected[bad], "z", z[bad])
        relative = wrong is None
        assert not (relative and np.any((expected == 0) & (se > 0))), (
            f"{what}: an expected value of 0 has no 10 % error; name a wrong answer (wrong=…, alternative=…)"
        )
        if relative:
            wrong = expected * (1 + REL_ERROR)
            exact_only = not np.any(se > 0)  # every entry checked exactly: it refuses any other value, not only 10 %
            alternative = alternative or (
                f"{what}: any other value (an exact check)" if exact_only else f"{what}: {REL_ERROR:.0%} off"
            )
        wrong = np.broadcast_to(np.asarray(wrong, dtype=np.float64), expected.shape)
        gap = np.abs(wrong - expected)
        exact = relative | (gap > roundoff)  # an entry with se = 0 is checked exactly: it refuses any other value
        if wrong_se is None:
            shift = np.divide(gap, se, out=np.zeros_like(gap), where=se > 0)
            powers = np.where(se > 0, np.vectorize(power, otypes=[float])(shift), exact)
        else:  # the wrong answer's own spread: P(|N(gap, wrong_se²)| >= Z_BOUND·se); a spread of 0 refuses or not
            from scipy.stats import norm

            s1 = np.broadcast_to(np.asarray(wrong_se, dtype=np.float64), gap.shape)
            assert np.all(np.isfinite(s1)) and np.all(s1 >= 0), (what, "wrong_se", s1)
            spread = np.where(s1 > 0, s1, 1.0)
            sampled = norm.sf((Z_BOUND * se - gap) / spread) + norm.cdf((-Z_BOUND * se - gap) / spread)
            powers = np.where(se > 0, np.where(s1 > 0, sampled, gap >= Z_BOUND * se), exact)
        best = float(np.max(powers)) if powers.size else 0.0
        if carried_by is not None:
            record_property("power", f"{best:.6f} | {alternative or what} [not asserted: carried by {carried_by}]")
            return
        assert_power(record_property, alternative or what, best)

    return check


def agrees_json(agrees, out: dict, names=None) -> None:
    """The simulated counts of a ``speculab sim --json`` output against its own theory, each through ``agrees``
    (the output carries every count's mean and standard error beside the theory it is held against)."""
    for name in names or out["z"]:
        agrees(
            out["counts"][name]["mean"],
            out["theory"][name],
            f"{name} (speculab sim --json)",
            se=out["counts"][name]["se"],
        )


def claims_of(module, result: dict) -> list[dict]:
    """A reproduction's claims table (``module.claims``) for ``result``, checked: well-formed rows, and the same
    rows from the JSON file's content as from the returned dict (``speculab report`` reads the file)."""
    import json

    from speculab.repro._io import check_claims, jsonable

    rows = check_claims(module.claims(result))
    assert module.claims(json.loads(json.dumps(jsonable(result)))) == rows
    return rows


def progress_parts(err: str, desc: str) -> dict[int, tuple[int, int, int]]:
    """The parts a piped progress display ``desc`` printed to ``err`` (:mod:`speculab._progress`): per part number,
    (the last count shown, its total, the number of parts announced)."""
    import re

    out = {}
    for line in err.splitlines():
        m = re.match(rf"{re.escape(desc)}, part (\d+) of (\d+): ([\d,]+) of ([\d,]+) ", line)
        if m:
            k, parts, done, total = (int(g.replace(",", "")) for g in m.groups())
            out[k] = (done, total, parts)
    return out


def frequent_token_as_eos(result, monkeypatch) -> int:
    """Make the token that ``result`` (a decode's) outputs most often every pair's EOS for the test, so that decoding
    again ends runs at varied rounds; the token."""
    from collections import Counter

    from speculab.backends.pair import ModelPair

    eos = Counter(t for tokens in result.tokens for t in tokens).most_common(1)[0][0]
    monkeypatch.setattr(ModelPair, "eos_token_id", property(lambda self: eos))
    return eos
