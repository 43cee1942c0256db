"""The ``speculab`` command line: theory, simulation and reproductions side by side.

Every command takes ``--json`` (machine-readable output on stdout) and ``--debug``; every command that draws
random numbers takes ``--seed``.

A command that fails prints one line, ``speculab: error: …``, on stderr and exits with
2 when the input is at fault (a bad value or a missing file: ``ValueError``,
``FileNotFoundError``) and 1 when the run failed (out of memory, a file that cannot be
written, or an unexpected error — the line then says to rerun with ``--debug``, which
shows the traceback instead). Ctrl-C (SIGINT) and SIGTERM stop a command with one line,
``speculab: interrupted``, and exit 130 / 143 (128 + the signal, as shells do); files
are written atomically (:mod:`speculab._files`), so an interrupted command leaves the
previous run's files whole.
"""

from __future__ import annotations

import argparse
import functools
import inspect
import json
import os
import signal
import sys
import threading

import numpy as np

from speculab._budget import work_budget
from speculab._progress import progress
from speculab._validate import SEED_LIMIT
from speculab.repro._io import jsonable
from speculab.validate import METHODS as VALIDATED  # (the module imports torch only when it runs)

__all__ = ["main"]


# -- command-line values ------------------------------------------------------
def _count(minimum: int, below: int | None = None):
    """An argparse type: an integer of at least ``minimum`` (and below ``below``), checked as the command line is
    read — before any model is loaded — and refused in terms of the flag (argparse names it)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
        if value < minimum or (below is not None and value >= below):
            within = f">= {minimum}" if below is None else f"in [{minimum}, {below:,})"
            raise argparse.ArgumentTypeError(f"must be an integer {within}; got {value}")
        return value

    return parse


def _text(text: str) -> str:
    """An argparse type: text that is UTF-8 (a command line's bytes that are not reach Python as lone surrogates)."""
    from speculab._validate import check_text

    try:
        return check_text(text, "text")
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err).replace("text must be", "must be", 1)) from None


def _scale(text: str) -> float:
    """An argparse type: a work budget's scale, a finite number > 0 (``--budget``)."""
    from speculab._budget import check_scale

    try:
        return check_scale(float(text))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be a finite number > 0 (a multiple of the default budgets); got {text!r}"
        ) from None


# -- instances ---------------------------------------------------------------
def _add_instance_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("instance (a saved .npz, or a random one)")
    g.add_argument(
        "--instance", metavar="FILE", help="a Markov instance saved with MarkovInstance.save / `speculab instance`"
    )
    g.add_argument("--T", type=_count(1), default=50, help="horizon (default 50)")
    g.add_argument("--V", type=_count(1), default=7, help="vocabulary size (default 7)")
    g.add_argument(
        "--row-law",
        choices=["dirichlet", "uniform"],
        default="dirichlet",
        help="how each row of P and Q is drawn (default dirichlet)",
    )
    g.add_argument("--concentration", type=float, default=1.0, help="Dirichlet concentration (default 1)")
    g.add_argument(
        "--instance-seed", type=_count(0), default=None, help="seed of the random instance (default: --seed)"
    )


def _instance(args):
    from speculab.theory import MarkovInstance

    if args.instance:
        return MarkovInstance.load(args.instance)
    seed = args.seed if args.instance_seed is None else args.instance_seed
    try:
        return MarkovInstance.random(args.T, args.V, seed, row_law=args.row_law, concentration=args.concentration)
    except ValueError as err:
        if "array is too big" in str(err):  # numpy's refusal of an allocation past its limits: out of memory
            raise MemoryError(
                f"--T {args.T} --V {args.V}: the instance's 2·T·V² = {2 * args.T * args.V**2:,} float64 values"
            ) from None
        raise _flagged(err, ("T", "V", "concentration")) from None


def _flagged(err: ValueError, names) -> ValueError:
    """A check's refusal of one of ``names`` ("K must be …") told in terms of its flag, as argparse tells its own:
    "argument --K: must be …" (Python's "None for ∞" becomes "omit --K"). Other errors are returned as they are."""
    text = str(err)
    for name in names:
        if text.startswith(f"{name} must "):
            flag = "--" + name.replace("_", "-")
            rest = text[len(name) + 1 :].replace(" (or None for ∞)", f" (omit {flag} for ∞)")
            return ValueError(f"argument {flag}: {rest}")
    return err


def _prompt_flagged(err: ValueError, prompts: list[str] | None) -> ValueError:
    """A decode's refusal of one prompt (:class:`~speculab.backends.decode.PromptRefused`) told by the ``--prompt``
    that gave it: "argument --prompt: is empty …", "argument --prompt (#2 of 3): …", "… for --prompt #2 of 3 (…)".
    Other errors, and refusals of the default prompts (no ``--prompt``), as they are."""
    from speculab.backends.decode import PromptRefused

    if not isinstance(err, PromptRefused) or not prompts:
        return err
    which = [] if len(prompts) == 1 else [f"#{err.index + 1} of {len(prompts)}"]
    if err.text.startswith("{prompt} "):
        return ValueError(f"argument --prompt{''.join(f' ({w})' for w in which)}: {err.text[len('{prompt} ') :]}")
    return ValueError(err.naming(" ".join(["--prompt", *which])))


def _describe(args, inst) -> dict:
    if args.instance:
        return {"file": args.instance, "T": inst.T, "V": inst.V}
    seed = args.seed if args.instance_seed is None else args.instance_seed
    return {"T": inst.T, "V": inst.V, "row_law": args.row_law, "concentration": args.concentration, "seed": seed}


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    fmt = lambda r: "  ".join(str(c).rjust(w) if i else str(c).ljust(w) for i, (c, w) in enumerate(zip(r, widths)))  # noqa: E731
    return "\n".join([fmt(header), fmt(["-" * w for w in widths])] + [fmt(r) for r in rows])


def _emit(args, payload: dict, text: str) -> None:
    print(json.dumps(jsonable(payload), indent=2) if args.json else text)


# -- commands ------------------------------------------------------------------
def cmd_theory_rejections(args) -> None:
    from speculab.theory import sd_expected_rejections

    inst = _instance(args)
    prof = sd_expected_rejections(inst)
    payload = {
        "instance": _describe(args, inst),
        "rejections": prof.rejections,
        "oracle_calls": prof.oracle_calls,
        "acceleration": prof.acceleration,
        "rejections_per_position": prof.rejections_per_position,
    }
    rows = [
        ["E[N_rej]  ([Yin] Thm 1)", f"{prof.rejections:.6f}"],
        ["E[oracle calls]", f"{prof.oracle_calls:.6f}"],
        ["acceleration T / E[N_rej]", f"{prof.acceleration:.4f}"],
    ]
    text = f"speculative decoding (K = ∞) on {inst!r}\n" + _table(rows, ["quantity", "value"])
    if args.per_position:
        text += "\n\n" + _table(
            [[str(n + 1), f"{v:.6f}"] for n, v in enumerate(prof.rejections_per_position)], ["n", "E_q[TV(p_n, q_n)]"]
        )
    _emit(args, payload, text)


def _parse_M(text: str) -> float:
    """``--M``: a whole number in ``[1, 2^53]`` (float64 counts hold each), or ``inf`` for the limit."""
    from speculab.theory.batch import MAX_M

    if text.strip().lower() in ("inf", "infinity", "∞"):
        return float("inf")
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= MAX_M:
        raise argparse.ArgumentTypeError(f"must be a whole number in [1, 2^53] or 'inf'; got {text!r}") from None
    return value


def cmd_theory_batch(args) -> None:
    from speculab.theory import batch_expected_rejections

    inst = _instance(args)
    rows, payload = [], {"instance": _describe(args, inst), "M": {}}
    for M in args.M:
        prof = batch_expected_rejections(inst, M)
        payload["M"][str(M)] = {
            "rejections": prof.rejections,
            "sd_rejections": float(prof.sd_rejections_per_position.sum()),
            "batch_improvement": prof.improvement,
            "oracle_calls": prof.oracle_calls,
            "acceleration": prof.acceleration,
            "rejections_per_position": prof.rejections_per_position,
        }
        rows.append(
            [
                str(M),
                f"{prof.rejections:.6f}",
                f"{prof.sd_rejections_per_position.sum():.6f}",
                f"{prof.improvement:.6f}",
                f"{prof.oracle_calls:.6f}",
                f"{prof.acceleration:.4f}",
            ]
        )
    text = f"batch speculative decoding ([Yin] Thm 3; M = inf is the exact limit) on {inst!r}\n" + _table(
        rows, ["M", "E[N_rej]", "SD term (T1)", "batch improvement", "E[oracle calls]", "acceleration"]
    )
    _emit(args, payload, text)


def _method_options(choices: list[str]) -> dict[str, tuple]:
    """Every command-line parameter of the given methods: field name -> (field, methods that take it)."""
    from speculab.methods import REGISTRY
    from speculab.methods.base import cli_params

    out: dict[str, tuple] = {}
    for name in choices:
        for fname, f in cli_params(REGISTRY[name]).items():
            out.setdefault(fname, (f, []))[1].append(name)
    return out


def _add_method_args(p: argparse.ArgumentParser, *, real_models: bool = False, drafting: bool = False) -> None:
    """``--method NAME`` (from the registry) and every registered method's parameters as options."""
    from speculab.methods import get, names
    from speculab.methods.base import option

    choices = names(real_models=True if real_models else None, cli=True)
    if drafting:  # compare: methods that draft (autoregressive decoding is its reference)
        choices = [n for n in choices if get(n).drafting]
    g = p.add_argument_group("method (`speculab methods` lists them with their options)")
    g.add_argument("--method", choices=choices, default="sd", help="decoding method (default sd)")
    for fname, (f, users) in _method_options(choices).items():
        g.add_argument(
            option(fname),
            dest=fname,
            type=f.metadata["type"],
            choices=f.metadata["choices"],
            default=None,
            help=f"{f.metadata['help']} [{', '.join(users)}]",
        )
    if real_models:
        g.add_argument(
            "--head",
            metavar="FILE",
            default=None,
            help="a head trained on the draft's hidden states, as a reproduction saves it ("
            + "; ".join(f"--method {m}: `speculab repro {r}` writes {f}" for m, (r, f) in HEAD_SOURCES.items())
            + ")",
        )
    p.set_defaults(method_options=tuple(_method_options(choices)))


#: The reproduction that trains and saves a head for each method that reads one on real models, and its files.
HEAD_SOURCES = {
    "sprinter": ("sprinter-roc", "sprinter_verifier_lam*_previous.safetensors"),
    "specdecpp": ("specdecpp-pareto", "specdecpp_head_wrej*.safetensors"),
}


def _method(args):
    """The method of ``--method`` and its options; on the real-model commands with the head of ``--head FILE``."""
    from speculab.methods import get
    from speculab.methods.capabilities import DraftHead, has

    values = {name: getattr(args, name) for name in args.method_options}
    if not hasattr(args, "head"):  # sim: Markov instances, where the methods' heads are functions or the oracle
        return _build(args.method, values)
    if args.head is None:
        if has(get(args.method), DraftHead):
            reproduction, files = HEAD_SOURCES[args.method]
            raise ValueError(
                f"--method {args.method} on real models needs --head FILE, a head trained on the "
                f"draft's hidden states: `speculab repro {reproduction} --out DIR` saves them as "
                f"DIR/{files}"
            )
        return _build(args.method, values)
    from speculab.backends.heads import load_head

    try:
        head = load_head(args.head)
    except ValueError as err:
        raise ValueError(f"--head {args.head}: {err}") from None
    return _build(args.method, values, head)


def _build(name: str, values: dict, head=None):
    """``speculab.methods.build(name, values, head)``, a parameter's refusal told in terms of its flag
    (:func:`_flagged`)."""
    from speculab.methods import build

    try:
        return build(name, values, head)
    except ValueError as err:
        raise _flagged(err, [k for k, v in values.items() if v is not None]) from None


def _check_head_fits(args, method, pair) -> None:
    """``--head FILE`` against the loaded draft: a head for another model is named by its flag and file."""
    from speculab.backends.decode import hidden_size

    if getattr(args, "head", None) is None:
        return
    width = hidden_size(pair.draft)
    d_in = getattr(method, method.head_param).config.d_in
    if width is not None and d_in != width:
        raise ValueError(
            f"--head {args.head}: the head reads {d_in} features but the draft's hidden states have "
            f"{width} (a head trained on another draft model?)"
        )


def cmd_sim(args) -> None:
    with work_budget(args.budget):
        return _sim(args)


def _sim(args) -> None:
    from speculab.compare import side_by_side
    from speculab.sim import simulate

    from speculab._validate import TooLarge

    inst = _instance(args)
    method = _method(args)
    try:  # the exact theory first: a method without one within its budget is simulated, with the reason shown
        expected, no_theory = method.expected(inst), None
    except TooLarge as err:
        expected, no_theory = None, f"none ({err})"
    if args.checkpoint is not None:
        args.on_interrupt = f" (its finished chunks are kept in {args.checkpoint}: add --resume to continue)"
    if args.engine == "jax" and not args.json:
        print(
            "speculab: the jax engine compiles its round first (seconds, once per process): for one short run "
            "the numpy engine is faster",
            file=sys.stderr,
            flush=True,
        )
    counts = simulate(
        inst,
        method,
        args.n_runs,
        args.seed,
        engine=args.engine,
        progress=not args.json,
        checkpoint=args.checkpoint,
        resume=args.resume,
    )
    head = f"{method} on {inst!r}, {args.n_runs:,} runs, seed {args.seed}, {args.engine} engine"
    comp = side_by_side(expected, counts, head)
    if no_theory is not None:
        comp.settings["theory"] = no_theory
    rows = [
        [
            r.quantity,
            f"{r.measured:.4f}",
            f"{r.measured_se:.4f}",
            "" if np.isnan(r.predicted) else f"{r.predicted:.4f}",
            "" if np.isnan(r.z) else f"{r.z:+.2f}",
        ]
        for r in comp.rows
    ]
    theory = dict(expected.items()) if expected is not None else {}
    payload = {
        "instance": _describe(args, inst),
        "method": repr(method),
        "seed": args.seed,
        "engine": args.engine,
        "counts": counts.to_dict(),
        "theory": theory,
        "theory_source": comp.settings["theory"],
        "z": {r.quantity: r.z for r in comp.rows if r.quantity in theory},
    }
    text = head + f"\ntheory: {comp.settings['theory']}\n" + _table(rows, ["count", "mean", "s.e.", "theory", "z"])
    _emit(args, payload, text)


def cmd_methods(args) -> None:
    from speculab.methods import REGISTRY
    from speculab.methods.base import cli_params, option
    from speculab.methods.capabilities import DraftHead, has

    payload, lines = {}, []
    for name, cls in REGISTRY.items():
        params = {option(k): f.metadata["help"] for k, f in cli_params(cls).items()}
        doc = (cls.__doc__ or "").strip().splitlines()[0].replace("``", "")  # no reST code marks on a terminal
        payload[name] = {
            "class": cls.__name__,
            "summary": doc,
            "options": params,
            "real_models": cls.runs_on_real_models(),
            "cli": cls.constructible_from_cli(),
        }
        where = (
            "simulation"
            if not cls.runs_on_real_models()
            else f"simulation + real models (with --head FILE, from `speculab repro {HEAD_SOURCES[name][0]}`)"
            if has(cls, DraftHead)
            else "simulation + real models"
        )
        lines.append(
            f"{name:10s} {cls.__name__}: {doc}\n{'':10s} {where}; options: "
            + (", ".join(params) if params else "none")
            + ("" if cls.constructible_from_cli() else " (Python only)")
        )
    _emit(args, payload, "\n".join(lines))


def cmd_certify(args) -> None:
    from speculab.certify import certify

    method = _method(args)
    try:
        with work_budget(args.budget):
            cert = certify(method, V=args.V, remaining=args.remaining, key=args.seed, search=not args.no_search)
    except ValueError as err:
        raise _flagged(err, ("V", "remaining")) from None
    _emit(args, {"method": args.method, **cert.to_dict()}, str(cert))


def cmd_instance(args) -> None:
    inst = _instance(args)
    written = inst.save(args.out)
    _emit(args, {"instance": _describe(args, inst), "file": str(written)}, f"wrote {inst!r} to {written}")


def cmd_repro(args) -> None:
    from speculab import repro
    from speculab.repro import runner

    if args.figure is None or args.list:
        _emit(
            args,
            {k: v[1] for k, v in repro.FIGURES.items()},
            "\n".join(f"{k:17s} {v[1]}" for k, v in repro.FIGURES.items())
            + "\nall               every figure above that can run here (speculab repro all --help)",
        )
        return
    if args.figure == "all":
        return _repro_all(args)
    if args.only or args.skip:
        raise ValueError("--only and --skip apply to `speculab repro all`")
    mod = repro.get(args.figure)
    accepted = inspect.signature(mod.run).parameters
    overrides = {}
    for flag, name in (("seed", "key"), ("n_runs", "n_runs"), ("draft", "draft"), ("target", "target")):
        if getattr(args, flag) is not None:
            if name not in accepted:
                raise ValueError(f"--{flag.replace('_', '-')} does not apply to {args.figure}")
            overrides[name] = getattr(args, flag)
    folder = runner.resume_folder(args.out, args.figure)
    args.on_interrupt = (
        f" (its finished simulations and decoded prompts are kept in {folder}: add --resume to continue)"
    )
    result, _ = runner.run_figure(args.figure, args.out, progress=not args.json, resume=args.resume, **overrides)
    _emit(args, result, mod.summary(result) + f"\n  wrote {args.out}/ (provenance in {args.out}/{runner.PROVENANCE})")


def _repro_all(args) -> None:
    from speculab.repro import runner

    for flag in ("n_runs", "draft", "target"):
        if getattr(args, flag) is not None:
            raise ValueError(f"--{flag.replace('_', '-')} applies to one figure, not to `speculab repro all`")
    args.on_interrupt = (
        " (add --resume to continue: the figures finished by then are kept and the one under way "
        "continues from its checkpoints)"
    )
    run = runner.run_all(
        args.out,
        only=args.only,
        skip=args.skip or (),
        key=args.seed,
        progress=not args.json,
        resume=args.resume,
        echo=(lambda line: None) if args.json else print,
    )
    text = (
        f"repro all: {len(run['ran'])} run, {len(run['kept'])} kept, {len(run['skipped'])} skipped, "
        f"{len(run['failed'])} failed in {run['wall_seconds']:.0f} s; outputs and provenance in {args.out}/"
    )
    _emit(args, run, text)
    if run["failed"]:
        raise RuntimeError(
            f"{len(run['failed'])} reproduction(s) failed: {', '.join(run['failed'])} "
            f"(errors in {args.out}/{runner.PROVENANCE})"
        )


def cmd_report(args) -> None:
    from speculab.repro.report import build_report

    path = build_report(args.out, args.html)
    _emit(args, {"report": str(path)}, f"wrote {path} (self-contained: open it in any browser)")


# -- real models ------------------------------------------------------------------
def _add_pair_args(p: argparse.ArgumentParser, *, folders_only: bool = False) -> None:
    """The model flags; ``folders_only``: a command whose models must be Hugging Face folders on disk (an engine
    loads them itself), which samples (temperature > 0)."""
    g = p.add_argument_group("models")
    g.add_argument(
        "--pair",
        default="tiny",
        help="'tiny' (offline default) — or give --draft and --target"
        if folders_only
        else "'tiny' (offline default) or 'tiny-ngram' (the tiny target with a trigram draft counted on its "
        "training text: a draft much cheaper than its target) — or give --draft and --target",
    )
    where = "a local Hugging Face model folder" if folders_only else "Hugging Face name or local path"
    g.add_argument("--draft", default=None, help=f"draft model: {where}")
    g.add_argument("--target", default=None, help=f"target model: {where}")
    g.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda, cuda:1, …")
    g.add_argument(
        "--dtype",
        default="float32",
        choices=["float32", "bfloat16", "float16"],
        help="the models' weights (default float32; p and q are formed in float64 from their logits "
        "whatever the weights, so every law is exact for what was sampled)",
    )
    g.add_argument("--max-new-tokens", type=_count(1), default=32, help="tokens generated per prompt (default 32)")
    g.add_argument(
        "--temperature", type=float, default=1.0, help="> 0 (default 1)" if folders_only else "0 = greedy (default 1)"
    )
    g.add_argument("--top-k", type=_count(1), default=None)
    g.add_argument("--top-p", type=float, default=None)
    g.add_argument(
        "--threads",
        type=_count(1),
        default=None,
        help="torch's CPU threads (default: torch's own); on a shared machine, at most the idle cores: threads "
        "spinning against other processes make decoding many times slower",
    )


def _add_journal_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--batch-size",
        type=_count(1),
        default=None,
        help="prompts decoded together (default: all): each prompt has its own random stream, so the "
        "same seed gives the same runs whatever the batch size, up to the models' float round-off "
        "in differently shaped batches (a draw at a boundary)",
    )
    p.add_argument(
        "--checkpoint",
        metavar="DIR",
        default=None,
        help="journal each finished batch of the decoding in this folder, removed when the command "
        "finishes; an interrupted run keeps it",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue the run journaled in --checkpoint (same arguments): only the unfinished batches are "
        "decoded, and the output is the uninterrupted run's",
    )


def _pair(args):
    from speculab.backends import load_pair, resolve_device

    if (args.draft is None) != (args.target is None):
        raise ValueError("give both --draft and --target, or neither (then --pair is used)")
    try:
        resolve_device(args.device)  # a device this machine lacks: told as the flag's, before anything loads
    except ValueError as err:
        raise _flagged(err, ("device",)) from None
    import torch

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    if args.draft is not None:
        return load_pair(args.draft, args.target, device=args.device, dtype=dtype)
    if args.pair == "tiny-ngram":
        from speculab.backends.pair import TINY_DIR, training_ngram_draft

        pair = load_pair(training_ngram_draft(_tokenizer(TINY_DIR / "target")), "tiny", device=args.device, dtype=dtype)
        pair.name = "tiny-ngram"
        return pair
    if args.pair != "tiny":
        raise ValueError(f"--pair must be 'tiny' or 'tiny-ngram' (or use --draft/--target); got {args.pair!r}")
    return load_pair("tiny", device=args.device, dtype=dtype)


def _tokenizer(folder):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder))


def _sampling(args):
    from speculab.backends import Sampling

    try:
        return Sampling(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p)
    except ValueError as err:
        raise _flagged(err, ("temperature", "top_k", "top_p")) from None


def _journaled(args):
    """``--checkpoint DIR`` / ``--resume`` of the real-model commands: decoding inside
    :func:`speculab.sim.checkpoint.resumable` (each finished prompt or batch journaled), or nothing."""
    import contextlib

    from speculab.sim.checkpoint import resumable

    if args.checkpoint is None:
        if args.resume:
            raise ValueError("--resume needs --checkpoint DIR: the folder the interrupted run journaled in")
        return contextlib.nullcontext()
    args.on_interrupt = f" (its decoded prompts are kept in {args.checkpoint}: add --resume to continue)"
    return resumable(args.checkpoint, resume=args.resume, stale="refuse")


def cmd_run(args) -> None:
    from speculab.backends import decode

    method, sampling, journaled = _method(args), _sampling(args), _journaled(args)  # checked before the models load
    pair = _pair(args)
    _check_head_fits(args, method, pair)
    prompts = args.prompt or ["Return the"]
    with journaled, progress("decoding", enabled=not args.json):
        res = decode(
            pair,
            prompts,
            method,
            max_new_tokens=args.max_new_tokens,
            sampling=sampling,
            key=args.seed,
            batch_size=args.batch_size,
        )
    payload = {
        "pair": pair.name,
        "method": repr(method),
        "seed": args.seed,
        "texts": res.texts,
        "tokens": res.tokens,
        "counts": res.counts.to_dict(),
    }
    lines = [f"{method} on the {pair.name} pair, seed {args.seed}"]
    c = res.counts
    for i, (prompt, text) in enumerate(zip(prompts, res.texts)):
        lines.append(
            f"\n[{prompt}]{text}\n  tokens {c.tokens[i]}, target calls {c.oracle_calls[i]}, "
            f"rejections {c.rejections[i]}, draft tokens {c.draft_calls[i]}, bonus {c.bonus[i]}"
        )
    _emit(args, payload, "\n".join(lines))


def cmd_compare(args) -> None:
    from speculab.compare import compare

    method, sampling, journaled = _method(args), _sampling(args), _journaled(args)  # checked before the models load
    pair = _pair(args)
    _check_head_fits(args, method, pair)
    with journaled, progress("decoding (all runs)", enabled=not args.json):
        comp = compare(
            pair,
            method,
            args.prompt or None,
            runs_per_prompt=args.runs_per_prompt,
            max_new_tokens=args.max_new_tokens,
            sampling=sampling,
            key=args.seed,
            speed=args.speed,
            batch_size=args.batch_size,
        )
    _emit(args, comp.to_dict(), str(comp))


def cmd_validate(args) -> int:
    from pathlib import Path

    from speculab._files import atomic_path
    from speculab.validate import validate

    if args.out is not None:
        _check_writable(args.out)  # before minutes of decoding, not after
    sampling = _sampling(args)
    pair = _pair(args)
    runs = args.runs if args.runs is not None else (20_000 if pair.device.type == "cuda" else 4_000)
    report = validate(
        pair,
        key=args.seed,
        runs=runs,
        methods=args.methods,
        sampling=sampling,
        compare_runs=args.compare_runs,
        max_new_tokens=args.max_new_tokens,
        speed=not args.no_speed,
        batch_prompts=args.batch_prompts,
        speed_tokens=args.speed_tokens,
    )
    payload = report.to_dict()
    if args.out is not None:
        path = Path(args.out) / "validation.json"
        with atomic_path(path) as tmp:
            Path(tmp).write_text(report.to_json())
        payload["written"] = str(path)
    _emit(args, payload, str(report) + (f"\n\nwrote {payload['written']}" if args.out is not None else ""))
    return 0 if report.passed else 1


def _check_writable(folder: str) -> None:
    """Create ``folder`` and write (then remove) a file in it, or say in one line why it cannot be."""
    import tempfile
    from pathlib import Path

    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise OSError(f"cannot write to --out {folder}: {exc.strerror or exc}") from exc


def cmd_build_tiny(args) -> None:
    from speculab.backends.tiny.build import QUICK, BuildConfig, build

    cfg = BuildConfig(seed=args.seed, **(QUICK if args.quick else {}))
    _check_writable(args.out)  # before minutes of training, not after
    info = build(args.out, cfg, log=(lambda *_: None) if args.json else print)
    m = info["metrics"]
    _emit(
        args,
        info,
        f"wrote {args.out}: target ppl {m['target_perplexity']:.1f}, draft ppl "
        f"{m['draft_perplexity']:.1f}, mean TV(p, q) {m['mean_tv']:.3f}",
    )


#: Examples shown by every command's ``--help`` (each is a valid command line: ``tests/test_cli.py`` parses them).
EXAMPLES = {
    "theory rejections": [
        "speculab theory rejections --T 50 --V 7 --row-law uniform --seed 10",
        "speculab theory rejections --instance inst.npz --per-position --json",
    ],
    "theory batch": ["speculab theory batch --T 50 --V 7 --row-law uniform --seed 10 --M 1 2 4 8 inf"],
    "sim": [
        "speculab sim --T 50 --V 7 --seed 0 --n-runs 100000",
        "speculab sim --method batch --M 4 --n-runs 20000 --engine jax",
        "speculab sim --method block --K 4 --checkpoint sim.jsonl   # Ctrl-C, then the same + --resume",
    ],
    "methods": ["speculab methods", "speculab methods --json"],
    "instance": ["speculab instance --T 50 --V 7 --seed 3 --out inst.npz"],
    "certify": [
        "speculab certify --method block --K 2",
        "speculab certify --method biased --eps 0.1 --rejection opt --K 1 --V 4 --json",
    ],
    "run": [
        "speculab run --pair tiny --method sd --K 4 --prompt 'Return the'",
        "speculab run --pair tiny --method batch --M 4 --temperature 0.8 --top-k 50 --json",
        "speculab run --method specdecpp --h 0.7 --head results/specdecpp_head_wrej6.safetensors",
    ],
    "compare": [
        "speculab compare --pair tiny --method sd",
        "speculab compare --pair tiny --method sd --K 2 --speed",
        "speculab compare --draft EleutherAI/pythia-70m --target EleutherAI/pythia-1.4b --method sd",
        "speculab compare --pair tiny --method batch --M 4 --batch-size 32 --checkpoint ckpt",
        "speculab compare --method sprinter --head results/sprinter_verifier_lam1.0_previous.safetensors",
    ],
    "plan": [
        "speculab plan --pair tiny                          # lossless rules, K = 1..8, the best 3 confirmed",
        "speculab plan --bias-budget 0.02 --k 2,4,8 --out results",
        "speculab plan --draft DRAFT --target TARGET --device cuda --dtype bfloat16",
    ],
    "engine vllm": [
        "speculab engine vllm --pair tiny                   # every configuration at K = 4 (./dev vllm first)",
        "speculab engine vllm --kinds greedy,probabilistic --k 1,2,4,8 --out vllm.json",
        "speculab engine vllm --draft DRAFT_DIR --target TARGET_DIR --vllm-python ~/vllm-env/bin/python",
    ],
    "validate": [
        "speculab validate --device cuda --out results      # then: speculab report --out results",
        "speculab validate --device cpu --runs 2000 --no-speed --json",
        "speculab validate --draft EleutherAI/pythia-70m --target EleutherAI/pythia-1.4b --dtype bfloat16",
    ],
    "models build-tiny": [
        "speculab models build-tiny --out tiny-pair",
        "speculab models build-tiny --out /tmp/t --quick",
    ],
    "repro": [
        "speculab repro --list",
        "speculab repro yin-fig2a --n-runs 100000 --out results",
        "speculab repro all --out results              # every figure that runs here, with provenance",
        "speculab repro all --out results --resume     # after an interruption",
        "speculab repro all --only yin-fig2a yin-fig3 --out results",
    ],
    "report": [
        "speculab report --out results                 # writes results/report.html",
        "speculab report --out results --html /tmp/report.html",
    ],
}


def _leaves(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """Every command's parser with its words (``("theory", "batch")``)."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield " ".join(path), parser
    for action in subs:
        for name, child in action.choices.items():
            yield from _leaves(child, (*path, name))


# -- parser --------------------------------------------------------------------
class _Parser(argparse.ArgumentParser):
    """argparse, with a usage error said in one line (which command's ``--help`` to read) rather than the usage."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="speculab", description=__doc__.splitlines()[0].replace("``", ""))
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p, seed_default: int | None = 0, *, seeded: bool = True):
        if seeded:
            p.add_argument(
                "--seed", type=_count(0, SEED_LIMIT), default=seed_default, help=f"random seed (default {seed_default})"
            )
        p.add_argument("--json", action="store_true", help="print JSON instead of a table")
        p.add_argument("--debug", action="store_true", help="on an error, show the traceback")

    th = sub.add_parser("theory", help="exact closed forms").add_subparsers(dest="quantity", required=True)
    p = th.add_parser("rejections", help="[Yin] Thm 1: expected rejections, oracle calls, acceleration of SD")
    common(p)
    _add_instance_args(p)
    p.add_argument("--per-position", action="store_true", help="also list E_q[TV(p_n, q_n)] per position")
    p.set_defaults(func=cmd_theory_rejections)

    p = th.add_parser("batch", help="[Yin] Thm 3: expected rejections of batch SD, SD term and batch improvement")
    common(p)
    _add_instance_args(p)
    p.add_argument(
        "--M",
        type=_parse_M,
        nargs="+",
        default=[1, 2, 4, 8, float("inf")],
        help="numbers of drafts (default 1 2 4 8 inf)",
    )
    p.set_defaults(func=cmd_theory_batch)

    p = sub.add_parser("sim", help="Monte-Carlo simulation, with theory and z-scores beside it")
    common(p)
    _add_instance_args(p)
    _add_method_args(p)
    p.add_argument("--n-runs", type=_count(1), default=10_000, help="number of runs (default 10000)")
    p.add_argument(
        "--engine",
        choices=("numpy", "jax"),
        default="numpy",
        help="numpy (reference) or jax (jitted, every method; it compiles first, seconds once per "
        "process, so it pays off on long runs and sweeps in Python)",
    )
    p.add_argument("--checkpoint", default=None, help="record each finished chunk of runs in this JSON-lines file")
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue the simulation recorded in --checkpoint (same arguments): the same final numbers",
    )
    p.add_argument(
        "--budget",
        type=_scale,
        default=1.0,
        metavar="K",
        help="multiply the work budgets of the exact computations that explode (block paths, SpecDec++'s "
        "draft tree, optimal multi-draft linear programs) by K (default 1): past its budget a "
        "method's theory is 'none' with the estimate",
    )
    p.set_defaults(func=cmd_sim)

    p = sub.add_parser("methods", help="list the registered methods and their options")
    common(p, seeded=False)
    p.set_defaults(func=cmd_methods)

    p = sub.add_parser("certify", help="is a method lossless? its exact bias on a battery of pairs, and the worst pair")
    common(p)
    _add_method_args(p)
    p.add_argument("--V", type=_count(2), default=3, help="vocabulary size of the pairs (default 3)")
    p.add_argument(
        "--remaining",
        type=_count(1),
        default=2,
        help="tokens a round may output: the method drafts its draft_length of it (default 2)",
    )
    p.add_argument("--no-search", action="store_true", help="the battery of pairs only, no search for a worse pair")
    p.add_argument(
        "--budget",
        type=_scale,
        default=1.0,
        metavar="K",
        help="multiply the work budget of the exact laws (MAX_VALUES) and of the search by K (default 1)",
    )
    p.set_defaults(func=cmd_certify)

    p = sub.add_parser("instance", help="save a random Markov instance to .npz")
    common(p)
    _add_instance_args(p)
    p.add_argument("--out", required=True, help="output .npz path")
    p.set_defaults(func=cmd_instance)

    p = sub.add_parser("run", help="decode prompts with a real draft/target pair")
    common(p)
    _add_pair_args(p)
    _add_method_args(p, real_models=True)
    p.add_argument("--prompt", action="append", type=_text, help="a prompt (repeatable; default 'Return the')")
    _add_journal_args(p)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("compare", help="theory vs measured counts on a real draft/target pair")
    common(p)
    _add_pair_args(p)
    _add_method_args(p, real_models=True, drafting=True)
    p.add_argument(
        "--prompt", action="append", type=_text, help="a prompt (repeatable; default: the tiny pair's held-out prompts)"
    )
    p.add_argument("--runs-per-prompt", type=_count(1), default=8, help="independent runs per prompt (default 8)")
    p.add_argument(
        "--speed",
        action="store_true",
        help="also the latency model's predicted speed-up over AR vs the clock (fit on half the prompts)",
    )
    _add_journal_args(p)
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("validate", help="the real-model backend on a device: laws, theory vs measured, speed")
    common(p)
    _add_pair_args(p)
    p.set_defaults(max_new_tokens=32)
    p.add_argument(
        "--runs", type=_count(1), default=None, help="runs of each law test (default 20,000 on CUDA, 4,000 elsewhere)"
    )
    p.add_argument(
        "--methods",
        nargs="+",
        default=list(VALIDATED),
        choices=list(VALIDATED),
        help="the lossless methods whose law is tested (default all; the biased control always runs)",
    )
    p.add_argument(
        "--compare-runs",
        type=_count(0),
        default=4,
        help="runs per prompt of each method's compare rows (0: none; default 4)",
    )
    p.add_argument("--no-speed", action="store_true", help="leave out the timings")
    p.add_argument("--batch-prompts", type=_count(1), default=256, help="prompts of the batched timings (default 256)")
    p.add_argument("--speed-tokens", type=_count(1), default=64, help="tokens per prompt of the timings (default 64)")
    p.add_argument("--out", default=None, help="also write OUT/validation.json (speculab report shows it)")
    p.set_defaults(func=cmd_validate)

    from speculab.engines.command import add_parser as add_engine_parser

    add_engine_parser(sub, common, functools.partial(_add_pair_args, folders_only=True), _count, _sampling)

    from speculab.planning.command import add_parser as add_plan_parser

    add_plan_parser(sub, common, _add_pair_args, _count, _pair, _sampling)

    models = sub.add_parser("models", help="the offline tiny model pair").add_subparsers(dest="action", required=True)
    p = models.add_parser("build-tiny", help="train the tiny draft/target pair (deterministic; ~20 min on 2 CPUs)")
    common(p)
    p.add_argument("--out", required=True, help="output folder (the shipped pair lives in speculab/backends/tiny)")
    p.add_argument(
        "--quick",
        action="store_true",
        help="40 target and 20 draft steps, 4,000 tokens evaluated (to check the pipeline)",
    )
    p.set_defaults(func=cmd_build_tiny)

    p = sub.add_parser("repro", help="reproduce a paper figure (PNG, PDF + JSON), or all of them")
    p.add_argument("figure", nargs="?", help="figure name, or 'all'; omit or --list to list them")
    common(p, seed_default=None)
    p.add_argument("--list", action="store_true", help="list the figures")
    p.add_argument("--n-runs", type=_count(1), default=None, help="override the number of simulated runs")
    p.add_argument("--out", default="results", help="output folder (default ./results)")
    p.add_argument("--draft", default=None, help="real-model reproductions: draft model name or path")
    p.add_argument("--target", default=None, help="real-model reproductions: target model name or path")
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue an interrupted run (same seed and options): its finished simulations, JAX sweeps "
        "and decoded batches are read back, not rerun, and the one under way continues; with 'all', "
        "figures already finished with the same parameters are kept",
    )
    p.add_argument("--only", nargs="+", metavar="NAME", help="with 'all': run only these figures")
    p.add_argument("--skip", nargs="+", metavar="NAME", help="with 'all': leave these figures out")
    p.set_defaults(func=cmd_repro)

    p = sub.add_parser("report", help="one self-contained HTML page of the reproductions in a folder")
    common(p, seeded=False)
    p.add_argument("--out", default="results", help="the reproductions' folder (default ./results)")
    p.add_argument("--html", default=None, help="where to write the page (default OUT/report.html)")
    p.set_defaults(func=cmd_report)
    for words, leaf in _leaves(parser):
        leaf.formatter_class = argparse.RawDescriptionHelpFormatter
        leaf.epilog = (
            "examples:\n"
            + "\n".join(f"  {line}" for line in EXAMPLES[words])
            + "\n\n--json prints one JSON object instead of the table (its keys: docs/cli.md)"
        )
    return parser


class _Terminated(BaseException):
    """SIGTERM, raised where the command is (as SIGINT raises ``KeyboardInterrupt``) so it unwinds the same way."""


def _terminate(signum, frame):
    raise _Terminated


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as stop:  # --help (0), or a command line argparse refuses (2, its one line printed)
        return stop.code if isinstance(stop.code, int) else 2
    main_thread = threading.current_thread() is threading.main_thread()  # only there can a handler be set
    previous = signal.signal(signal.SIGTERM, _terminate) if main_thread else None
    try:
        code = args.func(args)
    except KeyboardInterrupt:
        print("speculab: interrupted" + getattr(args, "on_interrupt", ""), file=sys.stderr)
        return 128 + signal.SIGINT
    except _Terminated:
        print("speculab: interrupted (terminated)" + getattr(args, "on_interrupt", ""), file=sys.stderr)
        return 128 + signal.SIGTERM
    except BrokenPipeError:  # the reader left early (speculab repro --list --json | head): stop without a word
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nor an error when Python flushes at exit
        return 128 + signal.SIGPIPE  # what a shell reports for a writer stopped by SIGPIPE
    except Exception as exc:
        if args.debug:
            raise
        if isinstance(exc, ValueError) and hasattr(args, "max_new_tokens"):  # a decode's refusal, told by its flag
            exc = _flagged(_prompt_flagged(exc, getattr(args, "prompt", None)), ("max_new_tokens",))
        print(f"speculab: error: {_one_line(exc)}", file=sys.stderr)
        return 2 if isinstance(exc, (ValueError, FileNotFoundError)) else 1
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)
    return code or 0


def _one_line(exc: Exception) -> str:
    """What a failed command prints: the message for the errors speculab raises on purpose, the error's type and
    first line otherwise (with how to see the traceback)."""
    if isinstance(exc, (ValueError, OSError)):
        return str(exc)
    if isinstance(exc, MemoryError):  # e.g. --T 5 --V 100000: a (T, V, V) instance that cannot be held
        return f"out of memory ({type(exc).__name__}: {exc}); use a smaller --T or --V"
    first = (str(exc).strip().splitlines() or [""])[0]
    return f"unexpected {type(exc).__name__}: {first} (rerun with --debug for the traceback)"


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
