"""Running reproductions with their provenance: one figure, or every figure that runs here.

Every run records, in ``OUT/provenance.json``, what it ran and where: per figure its status
(``ok``, ``skipped`` with the reason, ``failed`` with the error), its parameters (the
reproduction's defaults with the given overrides: the seed among them), the files it wrote,
its wall time and the environment (speculab's version and git commit, Python and library
versions, the machine), and the sha256 of each file it wrote. ``speculab repro NAME`` adds or replaces its
figure's entry;
``speculab repro all`` runs every figure whose requirements are installed (:func:`missing`),
one after the other, and records the whole run's wall time too. ``speculab report`` reads the
file back.

Each figure runs inside :func:`speculab.sim.checkpoint.resumable` on ``OUT/.NAME.resume/``,
so an interrupted figure continues with ``resume=True``; an interrupted ``run_all`` resumed
also skips the figures already finished with the same parameters on the same code, whose files are still the
ones it wrote (by sha256). A record is data, not trusted: its files must be plain names inside ``OUT`` (no
folders, no absolute paths, nothing hidden), each with its digest, or :func:`read_provenance` refuses it.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import inspect
import json
import math
import os
import platform
import re
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from speculab import repro
from speculab._files import atomic_path, refuse_link
from speculab.repro._io import jsonable

__all__ = [
    "PROVENANCE",
    "environment",
    "missing",
    "parameters",
    "resume_folder",
    "run_figure",
    "run_all",
    "read_provenance",
]

#: The provenance file's name inside a reproduction's output folder.
PROVENANCE = "provenance.json"
FORMAT = "speculab-provenance/1"

#: The libraries whose versions are recorded.
LIBRARIES = (
    "numpy",
    "scipy",
    "matplotlib",
    "array-api-compat",
    "torch",
    "transformers",
    "safetensors",
    "jax",
    "jaxlib",
    "tqdm",
)

#: What a real-model reproduction (one taking ``draft``) imports beyond speculab's own requirements.
REAL_MODELS = ("torch", "transformers", "safetensors")

#: Arguments of a reproduction's ``run`` that say where and how to show it, not what it computes.
NOT_PARAMETERS = ("out_dir", "progress")


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _git_commit() -> dict | None:
    """The git commit speculab was imported from, and whether its tree had changes; ``None`` outside a checkout."""
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return None
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": commit, "modified": bool(dirty)}


def _memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _accelerator() -> str | None:
    """The CUDA device torch would use, if torch is already imported and sees one (importing torch to ask costs
    seconds, so a run that did not need it does not)."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_name(0)


def environment() -> dict:
    """Where a reproduction ran: speculab's version and git commit, Python, library versions, the machine."""
    import speculab

    return {
        "speculab": speculab.__version__,
        "git": _git_commit(),
        "python": platform.python_version(),
        "libraries": {name: _version(name) for name in LIBRARIES},
        "machine": {
            "platform": platform.platform(),
            "processor": platform.machine(),
            "cpus": os.cpu_count(),
            "memory_bytes": _memory_bytes(),
            "accelerator": _accelerator(),
            "torch_threads": sys.modules["torch"].get_num_threads() if "torch" in sys.modules else None,
        },
    }


def needs(name: str) -> tuple[str, ...]:
    """The importable modules a figure needs beyond speculab's requirements: a module's own ``NEEDS``, else torch
    and transformers for a real-model reproduction (one whose ``run`` takes ``draft``)."""
    mod = repro.get(name)
    own = getattr(mod, "NEEDS", None)
    if own is not None:
        return tuple(own)
    return REAL_MODELS if "draft" in inspect.signature(mod.run).parameters else ()


def missing(name: str) -> str | None:
    """Why figure ``name`` cannot run here (``"needs jax (pip install -e '.[jax]')"``), or ``None`` if it can."""
    absent = [m for m in needs(name) if importlib.util.find_spec(m) is None]
    if not absent:
        return None
    extra = "jax" if set(absent) <= {"jax", "jaxlib"} else "torch"
    return f"needs {', '.join(absent)} (pip install -e '.[{extra}]')"


def parameters(name: str, **overrides) -> dict:
    """What figure ``name`` computes with: its ``run``'s defaults, with ``overrides`` (``None`` values ignored)
    applied. An override the figure does not take is refused, naming it."""
    signature = inspect.signature(repro.get(name).run)
    params = {
        k: v.default
        for k, v in signature.parameters.items()
        if k not in NOT_PARAMETERS and v.default is not inspect.Parameter.empty
    }
    for k, v in overrides.items():
        if v is None:
            continue
        if k not in signature.parameters or k in NOT_PARAMETERS:
            raise ValueError(f"{k!r} does not apply to {name} (it takes {', '.join(params) or 'no parameters'})")
        params[k] = v
    return params


def read_provenance(out_dir: str | os.PathLike) -> dict:
    """``OUT/provenance.json``'s content (an empty record if there is none yet). A file that is not a speculab
    provenance record — not JSON, another format, a field of another type than :func:`run_figure` and
    :func:`run_all` write (a number as a string, a status no run gives) — is refused, naming it and the field."""
    path = Path(out_dir) / PROVENANCE
    if not path.exists():
        return {"format": FORMAT, "figures": {}}
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path} is not a speculab provenance file ({exc}){_REPAIR}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("figures"), dict):
        raise ValueError(f"{path} is not a speculab provenance file (format {FORMAT!r} expected){_REPAIR}")
    if not all(
        isinstance(e, dict) and isinstance(e.get("status"), str) for e in data["figures"].values()
    ) or not isinstance(data.get("all", {}), dict):
        raise ValueError(f"{path} is not a speculab provenance file (an entry is not a record with a status){_REPAIR}")
    problems = [_problem(e, _ENTRY, f"figures[{n!r}]") for n, e in data["figures"].items()]
    problem = next((p for p in [*problems, _problem(data.get("all", {}), _RUN, "all")] if p), None)
    if problem:  # a field of another type (a number written as a string): shown or compared as if it were the record
        raise ValueError(f"{path}: {problem}{_REPAIR}")
    for name, entry in data["figures"].items():
        files, digests = entry.get("files", []), entry.get("sha256", {})
        if not isinstance(files, list) or not all(plain_name(f) for f in files):
            bad = files if not isinstance(files, list) else [f for f in files if not plain_name(f)]
            raise ValueError(
                f"{path}: figure {name!r} lists files that are not plain names in its folder: {bad!r}{_REPAIR}"
            )
        needed = files if entry["status"] == "ok" or "sha256" in entry else []  # a finished figure's files, all
        if (
            not isinstance(digests, dict)
            or set(digests) != set(needed)
            or not all(isinstance(d, str) and re.fullmatch("[0-9a-f]{64}", d) for d in digests.values())
        ):
            raise ValueError(f"{path}: figure {name!r} has no valid sha256 for each of its files{_REPAIR}")
    return data


_REPAIR = " (remove or repair the file: a figure run again records itself anew)"


def _problem(record, fields: dict, where: str) -> str | None:
    """The first field of ``record`` whose value fails its check in ``fields`` (name -> ``(check, what)``, or name ->
    the fields of a nested record), said with its place ``where``; ``None`` if every field present passes."""
    if not isinstance(record, dict):
        return f"{where} is {record!r}, not a record"
    for name, rule in fields.items():
        if name not in record:
            continue
        value, at = record[name], f"{where}.{name}"
        if isinstance(rule, dict):
            problem = _problem(value, rule, at)
            if problem:
                return problem
        elif not rule[0](value):
            return f"{at} is {value!r}, not {rule[1]}"
    return None


def _text(v) -> bool:
    return isinstance(v, str)


def _count(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1


def _seconds(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0


def _texts(v) -> bool:
    return isinstance(v, list) and all(map(_text, v))


def _reasons(v) -> bool:
    return isinstance(v, dict) and all(map(_text, v.values()))


_TEXT = (_text, "a string")
_SECONDS = (_seconds, "a number of seconds >= 0")
_COUNT_OR_NONE = (lambda v: v is None or _count(v), "a whole number >= 1 or null")
_TEXT_OR_NONE = (lambda v: v is None or _text(v), "a string or null")
#: Where a run ran, as :func:`environment` records it.
_ENVIRONMENT = {
    "speculab": _TEXT,
    "python": _TEXT,
    "git": (
        lambda v: v is None or (isinstance(v, dict) and _text(v.get("commit")) and isinstance(v.get("modified"), bool)),
        "null or {'commit': a string, 'modified': true or false}",
    ),
    "libraries": (lambda v: isinstance(v, dict) and all(x is None or _text(x) for x in v.values()), "versions"),
    "machine": {
        "platform": _TEXT,
        "processor": _TEXT,
        "cpus": _COUNT_OR_NONE,
        "memory_bytes": _COUNT_OR_NONE,
        "accelerator": _TEXT_OR_NONE,
        "torch_threads": _COUNT_OR_NONE,
    },
}
#: A figure's entry (its files and digests are checked apart), as :func:`run_figure` and :func:`run_all` write it.
_ENTRY = {
    "status": (lambda v: v in ("ok", "skipped", "failed"), "'ok', 'skipped' or 'failed'"),
    "parameters": (lambda v: isinstance(v, dict), "a record of the parameters"),
    "started": _TEXT,
    "seconds": _SECONDS,
    "reason": _TEXT,
    "error": _TEXT,
    "environment": _ENVIRONMENT,
}
#: The record of the last ``repro all`` (``"all"``).
_RUN = {
    "started": _TEXT,
    "finished": _TEXT,
    "figures": (_texts, "a list of figure names"),
    "ran": (_texts, "a list of figure names"),
    "kept": (_texts, "a list of figure names"),
    "skipped": (_reasons, "a record of figure names and reasons"),
    "failed": (_reasons, "a record of figure names and errors"),
    "wall_seconds": _SECONDS,
    "environment": _ENVIRONMENT,
}


def plain_name(name) -> bool:
    """Whether ``name`` is a plain, visible file name (no folder part, not absolute, not ``..``): what a
    provenance record may list (a file read is also refused if it is a link: :func:`changed_files`)."""
    return (
        isinstance(name, str)
        and name not in ("", ".", "..")
        and not name.startswith(".")
        and not any(c in name for c in "/\\\0")
        and not os.path.isabs(name)
    )


def sha256(path: Path) -> str:
    """The file's sha256, read in chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def changed_files(out_dir: str | os.PathLike, entry: dict) -> list[str]:
    """The files of a provenance ``entry`` that are missing from ``out_dir``, are links (to be read, a file must be
    the results folder's own) or differ from what its run wrote (all of them for an entry recorded without
    digests)."""
    out, digests = Path(out_dir), entry.get("sha256", {})
    return [
        f
        for f in entry.get("files", [])
        if f not in digests or (out / f).is_symlink() or not (out / f).is_file() or sha256(out / f) != digests[f]
    ]


def _write_provenance(out_dir: Path, data: dict) -> None:
    text = json.dumps(jsonable(data), indent=2) + "\n"
    with atomic_path(out_dir / PROVENANCE) as tmp:
        tmp.write_text(text)


def _record(out_dir: Path, name: str, entry: dict) -> None:
    data = read_provenance(out_dir)
    data["figures"][name] = entry
    _write_provenance(out_dir, data)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _written(out_dir: Path, since: float) -> list[str]:
    """The files of ``out_dir`` (not its hidden resume folders) written at or after ``since``."""
    return sorted(
        p.name
        for p in out_dir.iterdir()
        if p.is_file() and not p.name.startswith(".") and p.name != PROVENANCE and p.stat().st_mtime >= since
    )


def resume_folder(out_dir: str | os.PathLike, name: str) -> Path:
    """Where figure ``name``'s checkpoints are kept while it runs (removed when it finishes)."""
    return Path(out_dir) / f".{name}.resume"


def _folder(out_dir) -> Path:
    """``out_dir`` made if missing; a path that is a file (or under one) is refused, naming it."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ValueError(f"out_dir {out} is a file, not a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise ValueError(f"out_dir {out} cannot be a folder: a part of its path is a file") from None
    return out


def run_figure(
    name: str, out_dir: str | os.PathLike = "results", *, progress: bool = False, resume: bool = False, **overrides
) -> tuple[dict, dict]:
    """Run reproduction ``name`` with ``overrides`` (``key``, ``n_runs``, ``draft``, ``target``; ``None`` keeps
    the default) and record it in ``OUT/provenance.json``. Returns ``(result, entry)``: the reproduction's JSON
    content and its provenance entry.

    Raises ``ValueError`` for an unknown figure or an override it does not take, before anything runs. An
    exception from the reproduction is recorded as ``failed`` (with its message) and raised again; an
    interruption records nothing, and ``resume=True`` continues it.
    """
    mod = repro.get(name)
    params = parameters(name, **overrides)
    out = _folder(out_dir)
    read_provenance(out)  # a foreign provenance.json is refused before hours of computing, not after
    kwargs = {k: v for k, v in overrides.items() if v is not None}
    if "progress" in inspect.signature(mod.run).parameters:
        kwargs["progress"] = progress
    from speculab.sim.checkpoint import resumable

    refuse_link(resume_folder(out, name), "the resume folder")  # a name speculab chose: never written through
    started, t0 = time.time(), time.perf_counter()
    entry = {"status": "ok", "parameters": params, "started": _now()}
    try:
        with resumable(resume_folder(out, name), resume=resume):
            result = mod.run(out_dir=out, **kwargs)
    except Exception as exc:
        entry.update(
            status="failed",
            error=f"{type(exc).__name__}: {exc}",
            seconds=time.perf_counter() - t0,
            environment=environment(),
        )
        _record(out, name, entry)
        raise
    files = _written(out, started)
    entry.update(
        seconds=time.perf_counter() - t0,
        files=files,
        sha256={f: sha256(out / f) for f in files},
        environment=environment(),
    )
    _record(out, name, entry)
    return result, entry


def _done(previous: dict | None, params: dict, out: Path, code: dict) -> bool:
    """Whether a recorded entry is this figure's finished run with these parameters, on this ``code`` (speculab's
    version and git commit), its files the ones it wrote (by sha256)."""
    if not previous or previous.get("status") != "ok" or previous.get("parameters") != jsonable(params):
        return False
    env = previous.get("environment", {})
    same_code = all(env.get(k) == v for k, v in code.items())
    return same_code and bool(previous.get("files")) and not changed_files(out, previous)


def run_all(
    out_dir: str | os.PathLike = "results",
    *,
    only=None,
    skip=(),
    key=None,
    progress: bool = True,
    resume: bool = False,
    echo=print,
) -> dict:
    """Run every reproduction that can run here (or those in ``only``, less ``skip``), in :data:`FIGURES` order,
    each with its defaults (``key`` overrides every seed), writing into ``out_dir``.

    One progress bar counts the figures, with each figure's own bars under it; ``echo`` gets one line per
    figure: done with its wall time, skipped with what it needs, or failed with the error — a failure does not
    stop the others. ``key`` is given to the figures that take a seed (the others are exact). With
    ``resume=True`` a figure already recorded as finished with the same parameters on the same code is kept,
    and an interrupted one continues. Returns the run's record (also ``provenance.json``'s ``"all"``): the
    figures run, kept, skipped (with the reason: a requirement missing, or left out by ``only``/``skip``) and
    failed, and the wall time.
    """
    chosen = list(repro.FIGURES) if only is None else list(dict.fromkeys(only))
    for name in [*chosen, *skip]:
        repro.get(name)  # an unknown name is refused before anything runs
    names = [n for n in chosen if n not in set(skip)]
    if not names:
        raise ValueError("nothing to run: --only and --skip leave no figure")
    seeded = {name: key if "key" in inspect.signature(repro.get(name).run).parameters else None for name in names}
    plans = {name: parameters(name, key=seeded[name]) for name in names}
    out = _folder(out_dir)
    recorded = read_provenance(out)["figures"]
    code = {k: v for k, v in environment().items() if k in ("speculab", "git")}  # what a kept figure must match
    left_out = {name: "left out by --only/--skip" for name in repro.FIGURES if name not in names}
    run = {"started": _now(), "figures": names, "ran": [], "kept": [], "skipped": dict(left_out), "failed": {}}
    t0 = time.perf_counter()
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(names), desc="repro all", unit="figure", disable=None)
        echo = bar.write
    try:
        for name in names:
            if bar is not None:
                bar.set_postfix_str(name)
            reason = missing(name)
            if reason is not None:
                run["skipped"][name] = reason
                _record(
                    out,
                    name,
                    {
                        "status": "skipped",
                        "reason": reason,
                        "parameters": plans[name],
                        "started": _now(),
                        "environment": environment(),
                    },
                )
                echo(f"skipped {name}: {reason}")
            elif resume and _done(recorded.get(name), plans[name], out, code):
                run["kept"].append(name)
                echo(f"kept    {name}: finished before with the same parameters")
            else:
                folder = resume_folder(out, name)  # the figure under way when the run was interrupted
                try:
                    _, entry = run_figure(
                        name,
                        out,
                        progress=progress,
                        resume=resume and folder.is_dir() and any(folder.iterdir()),
                        key=seeded[name],
                    )
                except Exception as exc:  # recorded by run_figure; the other figures still run
                    run["failed"][name] = f"{type(exc).__name__}: {exc}"
                    echo(f"FAILED  {name}: {type(exc).__name__}: {exc}")
                else:
                    run["ran"].append(name)
                    echo(f"done    {name} in {entry['seconds']:.1f} s")
            if bar is not None:
                bar.update()
    finally:
        if bar is not None:
            bar.close()
    run.update(finished=_now(), wall_seconds=time.perf_counter() - t0, environment=environment())
    data = read_provenance(out)
    data["all"] = run
    _write_provenance(out, data)
    return run
