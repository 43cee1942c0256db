"""Build the offline default draft/target pair ``"tiny"`` (``speculab models build-tiny``).

Hubs are unreachable offline, so speculab trains its own pair:

1. **Corpus**: the docstrings of CPython's standard library (PSF licence) and of
   numpy and scipy (BSD-3), read with :mod:`ast` from the installed sources,
   in sorted file order, deduplicated, split 98 % / 2 % into train / held-out by
   a seeded shuffle of documents.
2. **Tokenizer**: one byte-level BPE (the ``tokenizers`` library) shared by both models.
3. **Target**: a GPT-2-style model (4 layers, width 192), trained with next-token
   cross-entropy.
4. **Draft**: a much smaller GPT-2-style model (2 layers, width 64) *distilled*
   from the target (KL(q ‖ p) on the target's soft labels plus cross-entropy),
   as DistillSpec does, which gives a realistic draft/target mismatch.
5. **Report**: held-out perplexities and the mean per-token TV(p, q) at temperature 1,
   written to the model card ``tiny/MODEL_CARD.md`` and ``tiny/metrics.json``.

Weights are stored as float16 safetensors (loaded as float32). With the same corpus
(its SHA-256 is recorded), the same library versions and the same thread count,
the build is deterministic: every random choice comes from the seeds below.
"""

from __future__ import annotations

import ast
import hashlib
import json
import math
import os
import random
import sysconfig
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from speculab._files import atomic_folder, write_text
from speculab._validate import SEED_LIMIT

HERE = Path(__file__).parent
EOS = "<|endoftext|>"


@dataclass(frozen=True)
class BuildConfig:
    vocab_size: int = 2048
    context: int = 256
    seq_len: int = 128
    batch: int = 32
    target_layers: int = 4
    target_width: int = 192
    target_heads: int = 4
    target_steps: int = 1500
    target_lr: float = 3e-3
    draft_layers: int = 2
    draft_width: int = 64
    draft_heads: int = 2
    draft_steps: int = 1200
    draft_lr: float = 5e-3
    distill_weight: float = 0.8  # loss = w · KL(q ‖ p) + (1 − w) · CE
    eval_tokens: int = 40_000
    seed: int = 0
    threads: int = 2


# -- corpus --------------------------------------------------------------------------------
SKIP_DIRS = {"test", "tests", "idlelib", "site-packages", "lib2to3", "tkinter", "turtledemo", "_vendor", "vendored"}


def _docstrings(root: str) -> list[str]:
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("."))
        for name in sorted(filenames):
            if not name.endswith(".py"):
                continue
            try:
                tree = ast.parse(Path(dirpath, name).read_text(encoding="utf-8"))
            except (SyntaxError, UnicodeDecodeError, ValueError):
                continue
            for node in ast.walk(tree):
                if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                    doc = ast.get_docstring(node)
                    if doc and len(doc) >= 40:
                        out.append(doc.strip())
    return out


def corpus(key: int) -> tuple[list[str], list[str], dict]:
    """``(train_docs, heldout_docs, provenance)`` from stdlib, numpy and scipy docstrings."""
    import numpy
    import scipy

    sources = {
        "cpython-stdlib": (sysconfig.get_paths()["stdlib"], "PSF-2.0"),
        f"numpy-{numpy.__version__}": (os.path.dirname(numpy.__file__), "BSD-3-Clause"),
        f"scipy-{scipy.__version__}": (os.path.dirname(scipy.__file__), "BSD-3-Clause"),
    }
    docs, counts = [], {}
    seen = set()
    for name, (root, _) in sources.items():
        found = [d for d in _docstrings(root) if not (d in seen or seen.add(d))]
        counts[name] = {"documents": len(found), "characters": sum(map(len, found))}
        docs.extend(found)
    random.Random(key).shuffle(docs)
    n_held = max(1, len(docs) // 50)
    digest = hashlib.sha256("\x00".join(docs).encode()).hexdigest()
    prov = {
        "sources": {k: {"licence": v[1], **counts[k]} for k, v in sources.items()},
        "python": sysconfig.get_python_version(),
        "sha256": digest,
        "train_documents": len(docs) - n_held,
        "heldout_documents": n_held,
    }
    return docs[n_held:], docs[:n_held], prov


# -- tokenizer -----------------------------------------------------------------------------
def train_tokenizer(docs: list[str], vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(docs, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, bos_token=EOS, unk_token=EOS)


def encode(tokenizer, docs: list[str]):
    import torch

    ids = []
    eos = tokenizer.eos_token_id
    for d in docs:
        ids.extend(tokenizer.encode(d))
        ids.append(eos)
    return torch.tensor(ids, dtype=torch.long)


# -- training ------------------------------------------------------------------------------
def _model(cfg: BuildConfig, layers: int, width: int, heads: int, eos: int):
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        vocab_size=cfg.vocab_size,
        n_positions=cfg.context,
        n_embd=width,
        n_layer=layers,
        n_head=heads,
        bos_token_id=eos,
        eos_token_id=eos,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    return GPT2LMHeadModel(config)


def _batches(data, cfg: BuildConfig, steps: int, rng):
    import torch

    L = cfg.seq_len
    for _ in range(steps):
        start = torch.randint(0, data.numel() - L - 1, (cfg.batch,), generator=rng)
        idx = start[:, None] + torch.arange(L + 1)  # (B, L+1)
        yield data[idx]


def _lr(step: int, steps: int, peak: float) -> float:
    warm = max(1, steps // 20)
    if step < warm:
        return peak * (step + 1) / warm
    return peak * 0.5 * (1 + math.cos(math.pi * (step - warm) / max(1, steps - warm)))


def train(model, data, cfg: BuildConfig, steps: int, lr: float, key: int, teacher=None, log=print):
    """Next-token training; with ``teacher``, distillation ``w·KL(q‖p) + (1−w)·CE``."""
    import torch
    import torch.nn.functional as F

    rng = torch.Generator().manual_seed(key)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, betas=(0.9, 0.95))
    model.train()
    t0 = time.perf_counter()
    for step, batch in enumerate(_batches(data, cfg, steps, rng)):
        for group in opt.param_groups:
            group["lr"] = _lr(step, steps, lr)
        x, y = batch[:, :-1], batch[:, 1:]
        logits = model(x).logits  # (B, L, V)
        ce = F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))
        loss = ce
        if teacher is not None:
            with torch.no_grad():
                q_log = F.log_softmax(teacher(x).logits, dim=-1)  # (B, L, V)
            p_log = F.log_softmax(logits, dim=-1)
            kl = (q_log.exp() * (q_log - p_log)).sum(-1).mean()  # KL(q ‖ p)
            loss = cfg.distill_weight * kl + (1 - cfg.distill_weight) * ce
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 100 == 0 or step == steps - 1:
            log(
                f"  step {step:5d}/{steps}  loss {loss.item():.4f}  ce {ce.item():.4f}  {time.perf_counter() - t0:.0f}s"
            )
    model.eval()
    return model


def evaluate(draft, target, data, cfg: BuildConfig) -> dict:
    """Held-out perplexities and mean per-token TV(p, q), KL(q ‖ p) at temperature 1."""
    import torch
    import torch.nn.functional as F

    L = cfg.seq_len
    n = min(cfg.eval_tokens, data.numel() - 1) // L * L
    x = data[:n].view(-1, L)
    y = data[1 : n + 1].view(-1, L)
    nll_p = nll_q = tv = kl = 0.0
    with torch.no_grad():
        for i in range(0, x.size(0), 32):
            xb, yb = x[i : i + 32], y[i : i + 32]
            lp = F.log_softmax(draft(xb).logits, -1)
            lq = F.log_softmax(target(xb).logits, -1)
            nll_p += F.nll_loss(lp.reshape(-1, lp.size(-1)), yb.reshape(-1), reduction="sum").item()
            nll_q += F.nll_loss(lq.reshape(-1, lq.size(-1)), yb.reshape(-1), reduction="sum").item()
            tv += 0.5 * (lp.exp() - lq.exp()).abs().sum(-1).sum().item()
            kl += (lq.exp() * (lq - lp)).sum(-1).sum().item()
    return {
        "heldout_tokens": n,
        "draft_perplexity": math.exp(nll_p / n),
        "target_perplexity": math.exp(nll_q / n),
        "mean_tv": tv / n,
        "mean_kl_target_draft": kl / n,
    }


def heldout_prompts(held_docs: list[str], n: int = 32, words: int = 6) -> list[str]:
    """Openings (first ``words`` words of the first line) of held-out documents, as prompts."""
    out = []
    for doc in held_docs:
        first = doc.splitlines()[0].split()
        if len(first) >= words:
            out.append(" ".join(first[:words]))
        if len(out) == n:
            break
    return out


def _save(model, path: Path) -> None:
    import torch

    model.to(torch.float16).save_pretrained(path, safe_serialization=True)
    model.to(torch.float32)


#: ``build-tiny --quick``: a few steps only, to check the pipeline (the shipped pair takes the defaults).
QUICK = {"target_steps": 40, "draft_steps": 20, "eval_tokens": 4000}


def _seeds(key: int) -> tuple[int, int, int, int]:
    """The build's four torch seeds from ``key`` (``cfg.seed``): the target's initialisation and training, the
    draft's initialisation and training — ``key`` to ``key + 3``, wrapped below 2⁶⁴ (torch's limit), so that every
    seed the command line takes builds, and seed 0 builds the shipped pair."""
    return tuple((key + k) % SEED_LIMIT for k in range(4))


def build(out_dir: str | Path = HERE, cfg: BuildConfig = BuildConfig(), log=print) -> dict:
    """Build tokenizer, target and draft; write them and the model card to ``out_dir``.

    Raises ``ValueError`` naming ``seed`` if ``cfg.seed`` is not an int in [0, 2⁶⁴), before any work."""
    if isinstance(cfg.seed, bool) or not isinstance(cfg.seed, int) or not 0 <= cfg.seed < SEED_LIMIT:
        raise ValueError(f"seed must be an int in [0, 2**64); got {cfg.seed!r}")
    import torch

    out = Path(out_dir)
    torch.set_num_threads(cfg.threads)
    torch.use_deterministic_algorithms(True)
    t0 = time.perf_counter()
    train_docs, held_docs, prov = corpus(cfg.seed)
    log(
        f"corpus: {prov['train_documents']} train / {prov['heldout_documents']} held-out documents, sha256 "
        f"{prov['sha256'][:12]}"
    )
    tok = train_tokenizer(train_docs, cfg.vocab_size)
    train_ids, held_ids = encode(tok, train_docs), encode(tok, held_docs)
    log(f"tokens: {train_ids.numel():,} train / {held_ids.numel():,} held-out")

    init_target, train_target, init_draft, train_draft = _seeds(cfg.seed)
    torch.manual_seed(init_target)  # model initialisation (this is an entry point)
    target = _model(cfg, cfg.target_layers, cfg.target_width, cfg.target_heads, tok.eos_token_id)
    log(f"target: {sum(p.numel() for p in target.parameters()):,} parameters")
    train(target, train_ids, cfg, cfg.target_steps, cfg.target_lr, train_target, log=log)
    # round the target to its shipped float16 weights before distilling, so the draft learns the shipped target
    target = target.to(torch.float16).to(torch.float32)

    torch.manual_seed(init_draft)
    draft = _model(cfg, cfg.draft_layers, cfg.draft_width, cfg.draft_heads, tok.eos_token_id)
    log(f"draft: {sum(p.numel() for p in draft.parameters()):,} parameters")
    train(draft, train_ids, cfg, cfg.draft_steps, cfg.draft_lr, train_draft, teacher=target, log=log)
    draft = draft.to(torch.float16).to(torch.float32)

    metrics = evaluate(draft, target, held_ids, cfg)
    metrics.update(
        {
            "draft_parameters": sum(p.numel() for p in draft.parameters()),
            "target_parameters": sum(p.numel() for p in target.parameters()),
            "train_tokens": int(train_ids.numel()),
            "build_seconds": time.perf_counter() - t0,
            "torch": torch.__version__,
        }
    )
    log(json.dumps(metrics, indent=2))
    info = {"config": asdict(cfg), "corpus": prov, "metrics": metrics}
    write_pair(out, {"target": target, "draft": draft}, tok, info, heldout_prompts(held_docs))
    return info


def write_pair(out: Path, models: dict, tok, info: dict, prompts) -> None:
    """The built pair in ``out``: a complete Hugging Face model directory per model (its weights and the
    tokenizer), the metrics, the held-out prompts and the model card. Each folder is filled beside its name and
    renamed into place, each file written atomically (:mod:`speculab._files`): a symbolic link planted at one of
    these names is replaced, never written through."""
    out.mkdir(parents=True, exist_ok=True)
    for name, model in models.items():
        with atomic_folder(out / name) as folder:
            _save(model, folder)
            tok.save_pretrained(folder)
    write_text(out / "metrics.json", json.dumps(info, indent=2) + "\n")
    write_text(out / "prompts.json", json.dumps(prompts, indent=1) + "\n")
    write_text(out / "MODEL_CARD.md", model_card(info))


def model_card(info: dict) -> str:
    m, c, prov = info["metrics"], info["config"], info["corpus"]
    rows = "\n".join(
        f"| {k} | {v['licence']} | {v['documents']:,} | {v['characters']:,} |" for k, v in prov["sources"].items()
    )
    models = "\n".join(
        f"| {label} | {c[f'{w}_layers']} | {c[f'{w}_width']} | {c[f'{w}_heads']} | {m[f'{w}_parameters']:,} "
        f"| {m[f'{w}_perplexity']:.2f} |"
        for label, w in (("target `q`", "target"), ("draft `p`", "draft"))
    )
    target = (
        f"Target: {c['target_steps']} AdamW steps, batch {c['batch']} × {c['seq_len']} tokens, "
        f"peak lr {c['target_lr']}, cosine schedule."
    )
    return f"""# speculab "tiny" draft/target pair

Two GPT-2-style causal language models with one shared byte-level BPE tokenizer
({c["vocab_size"]} tokens), trained by `speculab models build-tiny` on a CPU, so that
speculative decoding can be run and measured offline. Not for any use beyond that.

| model | layers | width | heads | parameters | held-out perplexity |
| --- | --- | --- | --- | --- | --- |
{models}

Mismatch on held-out text at temperature 1 ({m["heldout_tokens"]:,} positions):
mean TV(p, q) = **{m["mean_tv"]:.3f}**, mean KL(q ‖ p) = {m["mean_kl_target_draft"]:.3f} nats.

## Training data and licences

Docstrings read with `ast` from the installed sources (Python {prov["python"]}),
deduplicated, shuffled with seed {c["seed"]}, 2 % of documents held out.
Corpus SHA-256: `{prov["sha256"]}`.

| source | licence | documents | characters |
| --- | --- | --- | --- |
{rows}

CPython's documentation is under the PSF License Agreement (not public domain);
numpy and scipy under the BSD 3-Clause licence. The weights are derived from that text.

## Training

{target}
Draft: {c["draft_steps"]} steps distilled from the (float16-rounded) target with loss
{c["distill_weight"]}·KL(q ‖ p) + {1 - c["distill_weight"]:.1f}·CE, peak lr {c["draft_lr"]}.
Weights are stored in float16 and loaded as float32. Build time {m["build_seconds"] / 60:.1f} min
on {c["threads"]} CPU threads (torch {m["torch"]}).

Rebuild: `speculab models build-tiny --out DIR` (deterministic for the same corpus hash,
library versions and thread count).
"""


if __name__ == "__main__":  # pragma: no cover
    build()
