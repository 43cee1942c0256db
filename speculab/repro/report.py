"""``speculab report``: one self-contained HTML page of every reproduction in a folder.

For each figure that ``speculab repro`` (or ``repro all``) wrote into the folder, the page
shows the figure itself (PNG, embedded), the reproduction's claims table — the paper's claim
beside our exact theory, simulation and real-model measurement of it (each module's
``claims(result)``) —, its summary and its provenance (parameters, wall time, code version).
Figures skipped or failed in the recorded run are listed with the reason. The page has no
external resources: it can be mailed, archived or opened offline.
"""

from __future__ import annotations

import base64
import dataclasses
import html
import json
import math
import os
from datetime import datetime, timezone
from pathlib import Path

from speculab import repro
from speculab.methods import Autoregressive
from speculab._files import atomic_path
from speculab.repro._io import CLAIM_COLUMNS, check_claims
from speculab.repro.runner import changed_files, read_provenance
from speculab.validate import ALPHA, file_digest, timing_note, verdict

__all__ = ["build_report", "figure_result", "REPORT"]

#: The report's default file name inside the results folder.
REPORT = "report.html"

#: Column headings of a claims table.
HEADINGS = {
    "quantity": "quantity",
    "paper": "paper's claim",
    "theory": "theory (exact)",
    "simulation": "simulation",
    "measured": "measured (real models)",
}

STYLE = """
body { font-family: system-ui, sans-serif; margin: 24px; color: #1d1d1f; }
h1 { margin-bottom: 4px; }
h2 { margin-top: 40px; border-bottom: 2px solid #1f3b73; padding-bottom: 4px; }
.meta { color: #555; font-size: 13px; }
table { border-collapse: collapse; margin: 12px 0; font-size: 14px; }
th { background: #1f3b73; color: #ffffff; text-align: left; padding: 6px 10px; }
td { border: 1px solid #c8cfdc; padding: 5px 10px; vertical-align: top; }
td.none { color: #999; }
.figure img { display: block; max-width: 100%; height: auto; margin: 8px 0; }
.skipped { color: #8a5a00; }
.failed { color: #b00020; }
pre { background: #f4f5f8; padding: 10px; font-size: 12px; overflow-x: auto; }
"""


def _e(text) -> str:
    return html.escape(str(text), quote=True)


def _stem(name: str) -> str:
    return name.replace("-", "_")


def figure_result(folder: Path, name: str) -> dict | None:
    """The result reproduction ``name`` wrote into ``folder`` (its JSON), or ``None`` if there is none; raises
    ``ValueError`` naming the file if it is not JSON. Whether its run recorded it is the caller's to check."""
    path = folder / f"{_stem(name)}.json"
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path} is not a reproduction's JSON ({exc})") from None


def _claims_table(rows: list[dict]) -> str:
    used = [c for c in CLAIM_COLUMNS if c == "quantity" or any(r[c] is not None for r in rows)]
    head = "".join(f"<th>{_e(HEADINGS[c])}</th>" for c in used)
    body = "".join(
        "<tr>" + "".join('<td class="none">—</td>' if r[c] is None else f"<td>{_e(r[c])}</td>" for c in used) + "</tr>"
        for r in rows
    )
    return f'<table class="claims"><tr>{head}</tr>{body}</table>'


def _images(folder: Path, name: str, entry: dict | None) -> list[Path]:
    files = entry.get("files", []) if entry else []
    pngs = [folder / f for f in files if f.endswith(".png")]
    own = folder / f"{_stem(name)}.png"
    return pngs or ([own] if own.exists() else [])


def _provenance_line(entry: dict) -> str:
    env = entry.get("environment", {})
    git = env.get("git") or {}
    commit = f", commit {git['commit'][:10]}{' (modified)' if git.get('modified') else ''}" if git else ""
    params = ", ".join(f"{k}={v}" for k, v in entry.get("parameters", {}).items()) or "defaults"
    seconds = f"{entry['seconds']:.1f} s" if "seconds" in entry else "—"
    version = env.get("speculab", "?")
    return f"parameters: {params}; wall time {seconds}; speculab {version}{commit}; {entry.get('started', '')}"


def _section(folder: Path, name: str, entry: dict | None, result: dict) -> str:
    mod = repro.get(name)
    parts = [
        f'<section id="{_e(name)}"><h2>{_e(name)}: {_e(repro.FIGURES[name][1])}</h2>',
        f'<p class="meta">{_e(_provenance_line(entry))}</p>',
    ]
    for png in _images(folder, name, entry):
        data = base64.b64encode(png.read_bytes()).decode("ascii")
        parts.append(f'<div class="figure"><img alt="{_e(png.name)}" src="data:image/png;base64,{data}"></div>')
    try:
        if hasattr(mod, "claims"):
            parts.append(_claims_table(check_claims(mod.claims(result))))
        summary = mod.summary(result)
    except (KeyError, TypeError, AttributeError, IndexError, ValueError) as exc:
        raise ValueError(
            f"{folder / (_stem(name) + '.json')} is not a result of {name} "
            f"({type(exc).__name__}: {exc}); rerun `speculab repro {name}`"
        ) from None
    parts.append(f"<details><summary>summary</summary><pre>{_e(summary)}</pre></details></section>")
    return "\n".join(parts)


def _environment(data: dict) -> str:
    entries = [e for e in data["figures"].values() if "environment" in e]
    if not entries:
        return ""
    env = (data.get("all") or {}).get("environment") or entries[-1]["environment"]
    libs = ", ".join(f"{k} {v}" for k, v in env.get("libraries", {}).items() if v)
    m = env.get("machine", {})
    memory = f", {m['memory_bytes'] / 2**30:.0f} GiB" if m.get("memory_bytes") else ""
    device = m.get("accelerator") or "CPU only"
    return (
        f'<p class="meta">speculab {_e(env.get("speculab"))}, Python {_e(env.get("python"))}; {_e(libs)}<br>'
        f"{_e(m.get('platform'))}, {_e(m.get('cpus'))} CPUs{_e(memory)}, {_e(device)}</p>"
    )


#: What ``speculab validate --out DIR`` writes beside the reproductions (shown in its own section).
VALIDATION = "validation.json"


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


#: The fields of ``validation.json``'s rows and the checks each value must pass.
_VALIDATION_ROWS = {
    "laws": {
        "method": lambda v: isinstance(v, str),
        "runs": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "lossless": lambda v: isinstance(v, bool),
        "refused": lambda v: isinstance(v, bool),
        "ok": lambda v: isinstance(v, bool),
        "power": _is_number,
        "first": lambda v: isinstance(v, list) and len(v) == 3 and all(map(_is_number, v)),
        "joint": lambda v: isinstance(v, list) and len(v) == 3 and all(map(_is_number, v)),
        "detectable": lambda v: isinstance(v, list) and len(v) == 2 and all(map(_is_number, v)),
    },
    "compare": {
        "method": lambda v: isinstance(v, str),
        "quantity": lambda v: isinstance(v, str),
        "predicted": _is_number,
        "measured": _is_number,
        "z": _is_number,
        "holds": lambda v: v is None or isinstance(v, bool),
        "gates": lambda v: isinstance(v, bool),
    },
    "speed": {
        "what": lambda v: isinstance(v, str),
        "tokens": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "seconds": _is_number,
        "tokens_per_second": _is_number,
        "note": lambda v: isinstance(v, str),
    },
}
_LATENCY = ("predicted", "measured", "error")


def _validation(folder: Path) -> dict | None:
    """``validation.json`` of the folder, checked field by field to be what
    :meth:`speculab.validate.Validation.to_dict` writes (a value of another type is refused, naming the file)."""
    path = folder / VALIDATION
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path} is not what `speculab validate --out` writes ({exc}); run it again") from None
    problem = _validation_problem(data) or _digest_problem(data)
    if problem:
        raise ValueError(f"{path} is not what `speculab validate --out` writes ({problem}); run it again")
    return data


def _digest_problem(data: dict) -> str | None:
    """Whether ``data`` carries the digest of its content (:func:`speculab.validate.file_digest`): a file edited
    since ``validate`` wrote it does not. Unkeyed, so it cannot tell a file signed again after an edit."""
    if data.get("digest") != file_digest({k: v for k, v in data.items() if k != "digest"}):
        return "its digest does not match its content: edited since `speculab validate` wrote it"
    return None


#: The settings the validation section prints (text), beside ``runs``.
_SETTINGS = ("pair", "device", "device_name", "dtype", "torch")


def _validation_problem(data) -> str | None:
    """What makes ``data`` other than what ``Validation.to_dict`` writes: a field missing or of another type first,
    then a value no validation gives (a count below one, a p-value that is not its G's, a verdict its rows do not
    give, …), or ``None``."""
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("settings"), dict)
        or not isinstance(data.get("passed"), bool)
    ):
        return "no settings or verdict"
    settings = data["settings"]
    for name in _SETTINGS:
        if not isinstance(settings.get(name), str):
            return f"settings.{name} is missing or not a string"
    if not _is_count(settings.get("runs")):
        return "settings.runs is missing or not a whole number ≥ 1"
    if (settings["device_name"] == "cpu") == settings["device"].startswith("cuda"):
        return "settings.device_name is not the device's (a CUDA device's name, or cpu for any other device)"
    for name, ok in _TIMING_SETTINGS.items():
        if name in settings and not ok(settings[name]):
            return f"settings.{name} is not what validate writes"
    for key, fields in _VALIDATION_ROWS.items():
        problem = _rows_problem(key, data.get(key), fields, lambda row, key=key: _ROW_SENSE[key](row, settings))
        if problem:
            return problem
    laws = data["laws"]
    if [r["lossless"] for r in laws] != [True] * (len(laws) - 1) + [False]:
        return "laws does not end with the control, the one method that is not lossless (every validation tests it)"
    latency = data.get("latency")
    if latency is not None and not (isinstance(latency, dict) and all(_is_number(latency.get(k)) for k in _LATENCY)):
        return "latency is not the predicted, measured and error of the latency model"
    if data["passed"] != verdict([r["ok"] for r in laws], data["compare"]):
        return f"passed is {str(data['passed']).lower()}, which its law tests and gating compare rows do not give"
    return None


def _is_count(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 1


def _is_load(x) -> bool:
    """A load average (≥ 0), or ``None``: a validation without timings."""
    return x is None or (_is_number(x) and 0 <= x < math.inf)


#: Where the timings ran, and the warning when the load made them meaningless: checked where present (a file
#: written before they were recorded has none of them).
_TIMING_SETTINGS = {
    "threads": _is_count,
    "cpus": lambda x: x is None or _is_count(x),
    "load_at_start": _is_load,
    "load_at_end": _is_load,
    "load_warning": lambda x: x is None or isinstance(x, str),
}


def _g_test_sense(name: str, statistic: float, df: int | float, p: float) -> str | None:
    """Whether ``(statistic, df, p)`` is a G-test's: ``G ≥ 0`` (∞ for a draw the law cannot make), a whole ``df ≥ 1``
    and ``p`` the χ² tail of ``G`` on ``df`` (:func:`speculab.stats.g_test`)."""
    from scipy.stats import chi2

    if not (
        statistic >= 0 and isinstance(df, int) and df >= 1 and math.isclose(p, chi2.sf(statistic, df), rel_tol=1e-9)
    ):
        return f"{name} is not a G-test's (G ≥ 0, df a whole number ≥ 1, p the χ² tail of G on df)"
    return None


def _law_sense(row: dict, settings: dict) -> str | None:
    if row["runs"] != settings["runs"]:
        return "runs is not settings.runs (every law test draws that many)"
    problem = _g_test_sense("first", *row["first"]) or _g_test_sense("joint", *row["joint"])
    if problem:
        return problem
    if row["refused"] != (min(row["first"][2], row["joint"][2]) < ALPHA / 2):
        return f"refused is not whether a p is below α/2 = {ALPHA / 2:g}"
    if not 0 <= row["power"] <= 1:
        return "power is not a probability"
    if not all(0 <= tv < math.inf for tv in row["detectable"]):
        return "detectable is not two total variations ≥ 0"
    if row["ok"] != (row["refused"] != row["lossless"]):
        return "ok is not whether the test refused exactly the method that is not lossless"
    return None


def _compare_sense(row: dict, settings: dict) -> str | None:
    z, holds = row["z"], row["holds"]
    if not ((math.isfinite(z) and holds is None) or (math.isnan(z) and holds is not None)):
        return "z and holds are not a compare row's (a finite z, or none and whether the check holds)"
    return None


def _speed_sense(row: dict, settings: dict) -> str | None:
    tokens, seconds = row["tokens"], row["seconds"]
    if tokens < 0 or not 0 <= seconds < math.inf:
        return "tokens or seconds is negative or not finite"
    rate = tokens / seconds if seconds > 0 else math.nan
    if not (
        math.isclose(row["tokens_per_second"], rate, rel_tol=1e-12)
        or (math.isnan(rate) and math.isnan(row["tokens_per_second"]))  # no seconds on the clock: no rate
    ):
        return "tokens_per_second is not tokens / seconds"
    return None


#: Each row kind's values checked for sense (given the settings), once their types are right: what is wrong, or
#: ``None``.
_ROW_SENSE = {"laws": _law_sense, "compare": _compare_sense, "speed": _speed_sense}


def _table(head: list[str], rows: list[list]) -> str:
    """An HTML table of text cells (escaped)."""
    cells = lambda tag, row: "".join(f"<{tag}>{_e(c)}</{tag}>" for c in row)  # noqa: E731
    return f"<table><tr>{cells('th', head)}</tr>" + "".join(f"<tr>{cells('td', r)}</tr>" for r in rows) + "</table>"


def _validation_section(data: dict) -> str:
    """The backend's validation on a device: its verdict, law tests, compare rows and timings."""
    s = data["settings"]
    outcome = "passed" if data["passed"] else "FAILED"
    parts = [
        '<section id="validation"><h2>validation: the real-model backend on a device</h2>',
        f'<p class="meta">{_e(s.get("pair"))} pair on {_e(s.get("device"))} ({_e(s.get("device_name"))}, '
        f"{_e(s.get('dtype'))}, torch {_e(s.get('torch'))}): <b>{outcome}</b>; "
        f"{_e(s.get('runs'))} runs per law test (<code>speculab validate</code>)</p>",
        _table(
            [
                "method",
                "first token: G (df), p",
                "first tokens: G (df), p",
                "refused",
                "power vs the control",
                "TV refused w.p. 0.99",
                "as it should",
            ],
            [
                [
                    r["method"],
                    "{:.1f} ({}), {:.2g}".format(*r["first"]),
                    "{:.1f} ({}), {:.2g}".format(*r["joint"]),
                    "yes" if r["refused"] else "no",
                    f"{r['power']:.3f}",
                    "{:.3f}, {:.3f}".format(*r["detectable"]),
                    "✓" if r["ok"] else "✗",
                ]
                for r in data["laws"]
            ],
        ),
    ]
    if data["compare"]:
        parts.append(
            _table(
                ["method", "quantity", "predicted", "measured", "z"],
                [
                    [
                        r["method"],
                        r["quantity"] + ("" if r["gates"] else " (model check)"),
                        f"{r['predicted']:.4g}",
                        f"{r['measured']:.4g}",
                        f"{r['z']:+.2f}" if math.isfinite(r["z"]) else ("holds" if r["holds"] else "fails"),
                    ]
                    for r in data["compare"]
                ],
            )
        )
    if data["speed"]:
        parts.append(
            _table(
                ["timed", "tokens / s", "tokens", "seconds"],
                [
                    [r["what"], f"{r['tokens_per_second']:,.0f}", f"{r['tokens']:,}", f"{r['seconds']:.2f}"]
                    for r in data["speed"]
                ],
            )
        )
        where = timing_note(s).removeprefix("; ")
        if where:
            parts.append(f'<p class="meta">timed with {_e(where)}</p>')
        if s.get("load_warning"):
            parts.append(f"<p><b>{_e(s['load_warning'])}</b></p>")
    lat = data.get("latency")
    if isinstance(lat, dict):
        parts.append(
            f"<p>latency model: SD speed-up over autoregressive decoding predicted {lat['predicted']:.3f}, "
            f"measured {lat['measured']:.3f} (error {lat['error']:+.1%})</p>"
        )
    parts.append("</section>")
    return "\n".join(parts)


PLAN = "plan.json"


def _plan(folder: Path) -> dict | None:
    """``plan.json`` of the folder (``speculab plan --out``), checked field by field to be what the command writes
    (:func:`plan_problem`) and signed by it (its digest): a value of another type, one no run gives, or values that
    make no sense together (a digest recomputed after an edit is no proof of sense) are refused naming the field."""
    path = folder / PLAN
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a plan ({exc}); rerun `speculab plan --out {folder}`") from None
    problem = plan_problem(data) or _plan_digest_problem(data)
    if problem:
        raise ValueError(f"{path}: {problem}; rerun `speculab plan --out {folder}`")
    return data


def _plan_digest_problem(data: dict) -> str | None:
    from speculab.planning.command import plan_digest

    if data.get("digest") != plan_digest({k: v for k, v in data.items() if k != "digest"}):
        return (
            "its digest does not match its content: edited since `speculab plan` wrote it "
            "(or written before plans were signed)"
        )
    return None


def _positive(x) -> bool:
    return _is_number(x) and math.isfinite(x) and x > 0


def _at_least_one(x) -> bool:
    return _is_number(x) and math.isfinite(x) and x >= 1


def _is_text(x) -> bool:
    return isinstance(x, str)


def _se_or_none(x) -> bool:
    """A standard error as plan.json holds it: a finite number ≥ 0, or ``null`` where there is none (one prompt)."""
    return x is None or (_is_number(x) and math.isfinite(x) and x >= 0)


def _number_or_none(x) -> bool:
    return x is None or (_is_number(x) and math.isfinite(x))


#: The fields of ``plan.json``'s settings and rows, and the checks each value must pass (what the command writes).
_PLAN_SETTINGS = {
    "pair": _is_text,
    "max_new_tokens": _is_count,
    "contexts": _is_count,
    "bias_budget": lambda x: _is_number(x) and 0 <= x <= 1,
}
_PLAN_ROWS = {
    "ranked": {
        "method": _is_text,
        "K": lambda x: isinstance(x, int) and not isinstance(x, bool) and x >= 0,
        "nodes": lambda x: isinstance(x, int) and not isinstance(x, bool) and x >= 0,
        "tokens_per_round": _at_least_one,
        "tokens_per_call": _at_least_one,
        "bias": lambda x: _is_number(x) and 0 <= x <= 1,
        "tokens_per_second": _positive,
        "tokens_per_round_se": _se_or_none,
        "tokens_per_second_se": _se_or_none,
        "allowed": lambda x: isinstance(x, bool),
    },
    "confirmed": {
        "method": _is_text,
        "predicted": _positive,
        "measured": _positive,
        "error": lambda x: _is_number(x) and math.isfinite(x),
        "predicted_speedup": _positive,
        "measured_speedup": _positive,
        "predicted_per_call": _at_least_one,
        "measured_per_call": _at_least_one,
        "predicted_se": _se_or_none,
        "measured_se": _se_or_none,
        "per_call_z": _number_or_none,
    },
    "engine": {
        "configuration": _is_text,
        "rule": _is_text,
        "predicted_per_call": _at_least_one,
        "predicted_per_call_se": _se_or_none,
        "z": _number_or_none,
    },
}


def plan_problem(data) -> str | None:
    """What makes ``data`` other than what ``speculab plan`` writes (a field missing or of another type, a rate no
    run gives, fewer than one token per call, a bias that is not a TV, fields that disagree: :func:`_plan_sense`),
    naming the field; or ``None``."""
    if not isinstance(data, dict) or not isinstance(data.get("settings"), dict):
        return "no settings"
    for name, ok in _PLAN_SETTINGS.items():
        if not ok(data["settings"].get(name)):
            return f"settings.{name} is missing or not what a plan writes"
    if not isinstance(data.get("verdict"), str):
        return "no verdict"
    if not isinstance(data.get("ranked"), list) or not data["ranked"]:
        return "no ranked candidates"
    for key, fields in _PLAN_ROWS.items():
        problem = _rows_problem(key, data.get(key), fields, _engine_sense if key == "engine" else lambda row: None)
        if problem:
            return problem
    return _plan_sense(data)


def _plan_sense(data: dict) -> str | None:
    """What in a plan whose fields each pass their checks no plan writes together (a digest recomputed after an
    edit proves nothing about sense), among the values the page shows: candidates out of order, twice, or allowed
    against the bias budget, more tokens a round than the drafted ``nodes`` + 1 (a full round, away from the
    horizon), or a call than that and ``max_new_tokens``; a confirmation of a candidate not ranked, predicting other
    than its ranked row, measuring more tokens a call than that bound, whose error is not ``predicted / measured −
    1``, whose speed-ups are not its rates over autoregressive decoding's, or whose z has the sign of neither side;
    a verdict other than the one its confirmations give."""
    from speculab.planning.plan import Confirmation, Plan, with_speedups

    ranked, confirmed, budget = data["ranked"], data["confirmed"], data["settings"]["bias_budget"]
    for key, rows in (("ranked", ranked), ("confirmed", confirmed)):
        names = [row["method"] for row in rows]
        twice = next((i for i, name in enumerate(names) if name in names[:i]), None)
        if twice is not None:
            return f"{key}[{twice}].method {json.dumps(names[twice])} is listed twice"
    for i in range(1, len(ranked)):
        if ranked[i]["tokens_per_second"] > ranked[i - 1]["tokens_per_second"]:
            return f"ranked[{i}] is faster than ranked[{i - 1}]: candidates are ranked fastest first"
    by_name = {row["method"]: row for row in ranked}
    run = data["settings"]["max_new_tokens"]

    def beyond(value: float, row: dict, per_call: bool) -> str | None:
        """Why ``value`` tokens a round (or a call: within the run too) are more than ``row``'s drafts make."""
        bound, what = row["nodes"] + 1, f"nodes + 1 = {row['nodes'] + 1}"
        if per_call and run < bound:
            bound, what = run, f"max_new_tokens = {run}"
        return f"{value!r}, more than {what}" if value > bound * (1 + 1e-12) else None  # float sums' round-off

    for i, row in enumerate(ranked):
        if row["allowed"] != (row["bias"] <= budget):
            allowed = json.dumps(row["allowed"])
            return f"ranked[{i}].allowed is {allowed} for a bias of {row['bias']:g} and a budget of {budget:g}"
        for name in ("tokens_per_round", "tokens_per_call"):
            problem = beyond(row[name], row, per_call=name == "tokens_per_call")
            if problem:
                return f"ranked[{i}].{name} is {problem}"
    if confirmed and all(row["method"] != _AR for row in confirmed):
        return "confirmed: no autoregressive decoding, the speed-ups' reference"
    nan = lambda se: math.nan if se is None else se  # noqa: E731  (JSON's null: an se no run had)
    told = confirmed and with_speedups(
        [
            Confirmation(
                row["method"],
                row["predicted"],
                nan(row["predicted_se"]),
                row["measured"],
                nan(row["measured_se"]),
                row["predicted_per_call"],
                row["measured_per_call"],
                row.get("runs", 0),
            )
            for row in confirmed
        ]
    )
    for i, row in enumerate(confirmed):
        if row["method"] not in by_name:
            return f"confirmed[{i}].method {json.dumps(row['method'])} is not a ranked candidate"
        own = by_name[row["method"]]
        if (row["predicted"], row["predicted_per_call"]) != (own["tokens_per_second"], own["tokens_per_call"]):
            return f"confirmed[{i}]'s predictions are not its ranked row's tokens per second and per call"
        problem = beyond(row["measured_per_call"], own, per_call=True)
        if problem:
            return f"confirmed[{i}].measured_per_call is {problem} (its ranked row's)"
        for name, formula in (
            ("error", "predicted / measured - 1"),
            ("predicted_speedup", "predicted over autoregressive decoding's"),
            ("measured_speedup", "measured over autoregressive decoding's"),
        ):
            value = getattr(told[i], name)
            if not math.isclose(row[name], value, rel_tol=1e-9, abs_tol=1e-12):
                return f"confirmed[{i}].{name} is {row[name]!r}, not {formula} ({value!r})"
        z, gap = row["per_call_z"], row["measured_per_call"] - row["predicted_per_call"]
        if z is not None and (z > 0) - (z < 0) != (gap > 0) - (gap < 0):
            return f"confirmed[{i}].per_call_z is {z!r} where measured - predicted per call is {gap!r}"
    verdict = Plan(data["settings"], None, confirmed=told).verdict()
    if data["verdict"] != verdict:
        return f"verdict {json.dumps(data['verdict'])} is not its confirmations' ({json.dumps(verdict)})"
    return None


_AR = repr(Autoregressive())


def _engine_sense(row: dict) -> str | None:
    """An engine row that ran (no ``error``) has its measurements: tokens per call (at least one), its standard
    error, and tokens per second; every row's ``z`` and ``verdict`` are the ones its numbers give
    (:class:`~speculab.planning.engine.EngineRow`)."""
    from speculab.planning.engine import EngineRow

    numbers = ("measured_per_call", "measured_per_call_se", "tokens_per_second", "predicted_per_call_se")
    if row.get("error") is not None:
        if not (_is_text(row["error"]) and row["error"]):
            return "error is not a message"
        wrong = next((k for k in numbers if not _se_or_none(row.get(k))), None)  # a failed row's: null (NaN) or not
        if wrong:
            return f"{wrong} is {json.dumps(row.get(wrong))}, a value no run writes"
    elif not _at_least_one(row.get("measured_per_call")):
        return "measured_per_call: fewer than one token per target call, which no run gives"
    elif not _se_or_none(row.get("measured_per_call_se")) or not _positive(row.get("tokens_per_second")):
        return "measured_per_call_se or tokens_per_second is missing or not what a run gives"
    given = {f.name: row[f.name] for f in dataclasses.fields(EngineRow) if f.name in row}
    engine = EngineRow(**given | {k: math.nan if row.get(k) is None else row[k] for k in numbers})
    z = engine.z if math.isfinite(engine.z) else None
    if (row.get("z") is None) != (z is None) or (z is not None and not math.isclose(row["z"], z, rel_tol=1e-9)):
        return f"z is {json.dumps(row.get('z'))}, not (measured - predicted) / its standard error ({json.dumps(z)})"
    if row.get("verdict") != engine.verdict:
        return f"verdict is {json.dumps(row.get('verdict'))}, not its numbers' ({json.dumps(engine.verdict)})"
    return None


def _rows_problem(key: str, rows, fields: dict, sense) -> str | None:
    """What is wrong with the first of ``rows`` (a file's ``key`` list) that has a field of ``fields`` missing or
    failing its check (its type or its bounds), or fails ``sense(row)`` (a value no run gives), naming the row and
    the field; or ``None``."""
    if not isinstance(rows, list):
        return f"{key!r} is not a list"
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            return f"{key}[{i}] is not an object"
        for name, ok in fields.items():
            if name not in row or not ok(row[name]):
                return f"{key}[{i}].{name} " + (
                    f"is {json.dumps(row[name])}, a value no run writes" if name in row else "is missing"
                )
        problem = sense(row)
        if problem:
            return f"{key}[{i}].{problem}"
    return None


def _plan_section(folder: Path, data: dict) -> str:
    """The plan: its figure, its best candidates and its confirmations."""
    s = data["settings"]
    parts = [
        '<section id="plan"><h2>plan: the best configuration for a pair on this machine</h2>',
        f'<p class="meta">{_e(s.get("pair"))} pair, runs of {_e(s.get("max_new_tokens"))} tokens, bias budget '
        f"{_e(s.get('bias_budget'))}, rounds along {_e(s.get('contexts'))} contexts "
        "(<code>speculab plan</code>)</p>",
    ]
    png = folder / "plan.png"
    if png.exists():
        data64 = base64.b64encode(png.read_bytes()).decode("ascii")
        parts.append(f'<div class="figure"><img alt="plan.png" src="data:image/png;base64,{data64}"></div>')
    parts.append(
        _table(
            ["rank", "method", "tokens / round", "tokens / call", "bias", "tokens / s"],
            [
                [
                    i,
                    r["method"],
                    f"{r['tokens_per_round']:.3f}",
                    f"{r['tokens_per_call']:.3f}",
                    f"{r['bias']:.4f}",
                    f"{r['tokens_per_second']:.1f}",
                ]
                for i, r in enumerate([r for r in data["ranked"] if r["allowed"]][:10], 1)
            ],
        )
    )
    if data["confirmed"]:
        parts.append(
            _table(
                [
                    "confirmed",
                    "tokens / s predicted",
                    "measured (± s.e. over held-out prompts)",
                    "error",
                    "speed-up predicted",
                    "measured",
                    "tokens / call predicted",
                    "measured",
                    "z",
                ],
                [
                    [
                        r["method"],
                        f"{r['predicted']:.1f}",
                        f"{r['measured']:.1f}" + ("" if r["measured_se"] is None else f" ± {r['measured_se']:.1f}"),
                        f"{r['error']:+.1%}",
                        f"{r['predicted_speedup']:.3f}",
                        f"{r['measured_speedup']:.3f}",
                        f"{r['predicted_per_call']:.3f}",
                        f"{r['measured_per_call']:.3f}",
                        "—" if r["per_call_z"] is None else f"{r['per_call_z']:+.1f}",
                    ]
                    for r in data["confirmed"]
                ],
            )
        )
    parts.append(f"<p>{_e(data['verdict'])}</p>")
    if data.get("engine"):
        parts.append(
            _table(
                [
                    "vLLM configuration",
                    "predicted by",
                    "tokens / call predicted",
                    "measured",
                    "z",
                    "tokens / s",
                    "verdict",
                ],
                [
                    [r["configuration"], r["rule"], f"{r['predicted_per_call']:.3f}"]
                    + (
                        [f"vLLM failed: {r['error']}", "—", "—"]
                        if r.get("error")
                        else [
                            f"{r['measured_per_call']:.3f}",
                            "—" if r.get("z") is None else f"{r['z']:+.1f}",
                            f"{r['tokens_per_second']:.0f}",
                        ]
                    )
                    + [str(r.get("verdict", "—")) + (f" ({r['note']})" if r.get("note") else "")]
                    for r in data["engine"]
                ],
            )
        )
    parts.append("</section>")
    return "\n".join(parts)


def build_report(out_dir: str | os.PathLike = "results", path: str | os.PathLike | None = None) -> Path:
    """Write the HTML report of the reproductions in ``out_dir`` to ``path`` (default ``out_dir/report.html``)
    and return its path.

    Reads ``provenance.json`` (:mod:`speculab.repro.runner`) and each figure's JSON and PNG. Raises
    ``ValueError`` if the folder holds no reproduction, or a file in it is not what it should be: a record
    naming a file outside the folder, or a figure whose files are not the ones its run wrote (by sha256)."""
    folder = Path(out_dir)
    if not folder.is_dir():
        raise ValueError(f"{folder} is not a folder (run `speculab repro all --out {folder}` first)")
    validation = _validation(folder)
    planned = _plan(folder)
    data = read_provenance(folder)
    for name, entry in data["figures"].items():
        changed = changed_files(folder, entry) if entry["status"] == "ok" else []  # read_provenance: digests there
        if changed:
            raise ValueError(
                f"{folder / changed[0]} is not the file `speculab repro {name}` wrote (its sha256 in "
                f"{folder / 'provenance.json'} differs, or it is missing): run the figure again"
            )
    results = {name: figure_result(folder, name) for name in repro.FIGURES}
    # a figure is shown only as its recorded run wrote it: a result without a record is not vouched for
    shown = [
        name
        for name in repro.FIGURES
        if results[name] is not None and data["figures"].get(name, {}).get("status") == "ok"
    ]
    if not shown and validation is None and planned is None:
        raise ValueError(
            f"no reproductions in {folder}: run `speculab repro all --out {folder}` (or "
            f"`speculab validate --out {folder}`, `speculab plan --out {folder}`) first"
        )
    overview = ["<tr><th>figure</th><th>status</th><th>wall time</th><th>what</th></tr>"]
    not_run = (data.get("all") or {}).get("skipped", {})
    for name in repro.FIGURES:
        entry = data["figures"].get(name)
        if name not in shown and not entry and name in not_run:
            entry = {"status": "skipped", "reason": not_run[name]}
        if name in shown:
            status = '<a href="#{0}">shown</a>'.format(_e(name))
        elif results[name] is not None and not entry:
            status = (
                f'<span class="skipped">not shown: {_e(_stem(name))}.json has no record in provenance.json '
                f"(run <code>speculab repro {_e(name)}</code>)</span>"
            )
        elif entry and entry["status"] in ("skipped", "failed"):
            reason = entry.get("reason") or entry.get("error", "")
            status = f'<span class="{entry["status"]}">{entry["status"]}: {_e(reason)}</span>'
        else:
            continue
        seconds = f"{entry['seconds']:.1f} s" if entry and "seconds" in entry else "—"
        overview.append(
            f"<tr><td>{_e(name)}</td><td>{status}</td><td>{seconds}</td><td>{_e(repro.FIGURES[name][1])}</td></tr>"
        )
    run = data.get("all")
    total = (
        f"; last <code>speculab repro all</code>: {run['wall_seconds'] / 60:.1f} min wall time"
        if run and "wall_seconds" in run
        else ""
    )
    generated = datetime.now(timezone.utc).isoformat(timespec="seconds")
    page = "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            "<title>speculab report</title>",
            f"<style>{STYLE}</style></head><body>",
            "<h1>speculab: "
            + (
                "reproductions"
                if shown
                else " and ".join(n for n, d in (("validation", validation), ("plan", planned)) if d)
            )
            + "</h1>",
            f'<p class="meta">{len(shown)} figures from {_e(folder.resolve())}, '
            f"report generated {generated}{total}</p>",
            _environment(data),
            f'<table class="overview">{"".join(overview)}</table>' if len(overview) > 1 else "",
            _validation_section(validation) if validation is not None else "",
            _plan_section(folder, planned) if planned is not None else "",
            *(_section(folder, name, data["figures"].get(name), results[name]) for name in shown),
            "</body></html>",
        ]
    )
    target = Path(path) if path is not None else folder / REPORT
    if target.is_dir():
        raise ValueError(f"{target} is a folder: the report is written to a file (its folder is made if missing)")
    blocked = next((up for up in target.parents if up.exists() and not up.is_dir()), None)
    if blocked is not None:
        raise ValueError(f"{target} cannot be written: {blocked} is a file, not a folder")
    try:
        with atomic_path(target) as tmp:
            tmp.write_text(page, encoding="utf-8")
    except OSError as exc:
        raise OSError(f"cannot write the report to {target}: {exc.strerror or exc}") from exc
    return target
