"""The documentation's measurement tables are the data the tools wrote, never typed by hand.

Each ``benchmarks/tables/NAME.md`` that ``benchmarks/_tables.py`` wrote must be its ``NAME.json`` rendered by its
benchmark's own ``markdown`` (an edited table, or a table left from before its data changed, fails), and every table
the docs include (``--8<-- "NAME.md"``) must exist.
"""

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
TABLES = BENCHMARKS / "tables"
sys.path.insert(0, str(BENCHMARKS))
import _tables  # noqa: E402

#: Each written table by its path under ``benchmarks/tables`` without the suffix (a GPU run's under ``gpu/``).
WRITTEN = sorted(
    p.relative_to(TABLES).with_suffix("").as_posix()
    for p in TABLES.rglob("*.json")
    if "provenance" in json.loads(p.read_text())
)
GPU = TABLES / "gpu"


def _module(name):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_docs_include_only_tables_that_exist():
    includes = {m for page in (ROOT / "docs").glob("*.md") for m in re.findall(r'--8<-- "([^"]+)"', page.read_text())}
    assert includes and sorted(i for i in includes if not (TABLES / i).is_file()) == []


def test_every_written_table_is_included_by_the_docs():
    docs = " ".join(page.read_text() for page in (ROOT / "docs").glob("*.md"))
    assert WRITTEN and [n for n in WRITTEN if f'--8<-- "{n}.md"' not in docs] == []


@pytest.mark.parametrize("name", WRITTEN)
def test_each_table_is_its_data_rendered_by_its_benchmark(name):
    data = json.loads((TABLES / f"{name}.json").read_text())
    tool = name.rsplit("/", 1)[-1]
    assert (TABLES / f"{name}.md").read_text() == _tables.render(data, _module(tool).markdown)
    p = data["provenance"]
    assert p["command"].startswith(f"python benchmarks/{tool}.py") and re.fullmatch("[0-9a-f]{40}", p["commit"] or "")


def test_render_states_where_and_how_it_was_measured():
    """The line under a table names the command, the commit (and uncommitted changes), the libraries and the load."""
    env = {
        "date": "2026-11-29T05:00:00+00:00",
        "commit": "0123456789abcdef0123456789abcdef01234567",
        "modified": True,
        "python": "3.11.7",
        "libraries": {"numpy": "2.4.6", "torch": "2.13.0"},
        "machine": {"platform": "Linux", "cpus": 2, "processor": "EPYC"},
        "load_at_start": [1.25, 1.0, 1.0],
    }
    data = {"x": 3, "provenance": dict(env, load_at_end=[2.5, 2.0, 2.0], command="python benchmarks/b.py --n 3")}
    text = _tables.render(data, lambda d: f"| x |\n| --- |\n| {d['x']} |\n")
    assert text == (
        "| x |\n| --- |\n| 3 |\n\nWritten by `python benchmarks/b.py --n 3` at commit `0123456` with uncommitted "
        "changes on 2026-11-29: Python 3.11.7, numpy 2.4.6, torch 2.13.0; EPYC, 2 CPUs, load average 1.2 at the "
        "start, 2.5 at the end.\n"
    )


def test_sig_gives_three_significant_digits_and_a_dash_for_no_number():
    assert [_tables.sig(x) for x in (1234.5, 25.449, 0.012345, 0.0, float("nan"), float("inf"))] == [
        "1,230",
        "25.4",
        "0.0123",
        "0",
        "—",
        "—",
    ]


def test_a_table_that_cannot_be_rendered_writes_nothing(tmp_path):
    env = _tables.environment()

    def broken(result):
        raise KeyError("rows")

    with pytest.raises(KeyError):
        _tables.write(tmp_path, "b", {"x": 1}, broken, env, [])
    assert list(tmp_path.iterdir()) == []
    path = _tables.write(tmp_path, "b", {"x": 1}, lambda d: f"| {d['x']} |\n", env, ["--n", "1"])
    data = json.loads(path.read_text())
    assert data["x"] == 1 and data["provenance"]["command"] == "python benchmarks/b.py --n 1"
    assert (tmp_path / "b.md").read_text() == _tables.render(data, lambda d: f"| {d['x']} |\n")


def test_the_gpu_page_is_the_gpu_runs_files_rendered():
    """``gpu/gpu.md`` is what ``benchmarks/gpu_tables.py`` renders from the GPU run's files (each checked as
    ``speculab report`` checks it), and the docs include it."""
    assert (GPU / "gpu.md").read_text(encoding="utf-8") == _module("gpu_tables").markdown(GPU)
    docs = (ROOT / "docs" / "measurements.md").read_text()
    assert '--8<-- "gpu/gpu.md"' in docs


def test_the_gpu_page_refuses_an_edited_validation(tmp_path):
    """A number edited in the GPU run's validation.json is refused, not rendered."""
    import shutil

    shutil.copytree(GPU, tmp_path / "gpu")
    path = tmp_path / "gpu" / "validation.json"
    data = json.loads(path.read_text())
    data["speed"][0]["tokens_per_second"] *= 2
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="validation.json is not what `speculab validate --out` writes"):
        _module("gpu_tables").markdown(tmp_path / "gpu")


def test_gpu_check_logs_are_read_step_by_step():
    tables = _module("gpu_tables")
    log = (
        "== validate (limit 125 s): python3 -m speculab.cli validate --device cuda\n"
        "noise\n"
        "== validate: exit 0 after 80 s\n"
        "== tests (limit 125 s): python3 -m pytest -q\n"
        "FAILED tests/test_a.py::test_b - ZeroDivisionError\n"
        "==== 1 failed, 259 passed in 79.11s (0:01:19) ====\n"
        "== tests: exit 1 after 81 s\n"
        "== never-ended (limit 10 s): sleep 99\n"
    )
    assert tables.steps(log) == [
        {"name": "validate", "command": "python3 -m speculab.cli validate --device cuda", "limit": 125, "rc": 0,
         "seconds": 80},
        {"name": "tests", "command": "python3 -m pytest -q", "limit": 125, "rc": 1, "seconds": 81},
    ]  # fmt: skip
    assert tables.pytest_summary(log) == ("1 failed, 259 passed in 79 s", ["tests/test_a.py::test_b"])
    with pytest.raises(ValueError, match="no pytest summary"):
        tables.pytest_summary("== validate: exit 0 after 80 s\n")


#: The benchmarks that time something, the timing ones without ``--threads`` (and why) and those that time nothing.
TIMED = (
    "bench_backend",
    "bench_batched",
    "bench_engine",
    "bench_latency",
    "bench_memory",
    "bench_vllm",
    "compare_tiny",
    "engine_vllm",
    "fast_tier",
    "machine_speed",
    "plan",
)
UNTHREADED = {
    "bench_sim": "numpy in the process itself: its BLAS threads are fixed when numpy loads (OPENBLAS_NUM_THREADS)",
    "bench_jax": "numpy and JAX in the process itself: their threads are fixed when they load (recorded)",
    "bench_theory_scale": "numpy in the process itself: its BLAS threads are fixed when numpy loads (recorded)",
    "mutation": "times tests to set their time-outs, not a speed figure",
    "power": "the statistical tests' power; its seconds are the run's length, not a speed figure",
}
UNTIMED = (
    "_tables",
    "bench_dispatch",
    "gpu_tables",
    "mutation_table",
    "remap_equivalents",
    "repro_table",
    "sample_stacks",
)


def test_every_timing_benchmark_takes_threads_through_the_shared_helper():
    """Each benchmark is classed (a new one too), and one that times takes ``--threads`` from
    ``_tables.add_threads`` (no copies of the flag) and applies it with ``_tables.use_threads``."""
    assert sorted(p.stem for p in BENCHMARKS.glob("*.py")) == sorted([*TIMED, *UNTHREADED, *UNTIMED])
    for name in TIMED:
        text = (BENCHMARKS / f"{name}.py").read_text()
        assert "_tables.add_threads(ap" in text and "_tables.use_threads(args.threads)" in text, name
        assert '"--threads"' not in text and "set_num_threads" not in text, name


@pytest.mark.parametrize("name", TIMED)
@pytest.mark.parametrize("value", ["0", "-2", "two"])
def test_each_timing_benchmark_refuses_a_thread_count_below_one_in_one_line(name, value, capsys):
    with pytest.raises(SystemExit) as stop:
        _module(name).main(["--threads", value])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert stop.value.code == 2
    assert err.endswith("argument --threads: must be an integer >= 1" if value != "two" else "invalid int value: 'two'")


def test_use_threads_sets_torch_and_the_thread_variables_of_the_processes_a_run_starts(monkeypatch):
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    for name in _tables.THREAD_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    try:
        assert _tables.use_threads(1) == 1 == torch.get_num_threads()
        assert [_tables.os.environ[name] for name in _tables.THREAD_VARIABLES] == ["1", "1", "1"]
        assert _tables.use_threads(None) == 1  # None: as it was
    finally:
        torch.set_num_threads(before)


def test_a_written_table_records_torchs_threads_and_says_them(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    path = _tables.write(tmp_path, "b", {"x": 1}, lambda d: f"| {d['x']} |\n", _tables.environment(), [])
    data = json.loads(path.read_text())
    threads = torch.get_num_threads()
    assert data["provenance"]["threads"] == threads
    assert f"torch on {threads} thread{'s' if threads != 1 else ''}, load average" in (tmp_path / "b.md").read_text()
    monkeypatch.delitem(sys.modules, "torch")  # a run that never loaded torch: no count
    path = _tables.write(tmp_path, "c", {"x": 1}, lambda d: f"| {d['x']} |\n", _tables.environment(), [])
    assert json.loads(path.read_text())["provenance"]["threads"] is None
    assert "torch on" not in (tmp_path / "c.md").read_text()


@pytest.mark.parametrize("value", ["-0.1", "1.5", "nan"])
def test_the_fast_tier_benchmark_refuses_a_background_outside_one_core(value, capsys):
    with pytest.raises(SystemExit) as stop:
        _module("fast_tier").main(["--background", value])
    assert stop.value.code == 2 and "argument --background: a share of one core in [0, 1]" in capsys.readouterr().err


def test_the_fast_tier_benchmark_reads_pytests_last_summary_line():
    summary = _module("fast_tier").summary
    out = "3 passed in 1.00s\n...\n== 1 failed, 3,352 passed, 311 skipped, 4 errors in 313.36s (0:05:13) ==\n"
    assert summary(out) == {
        "counts": {"failed": 1, "passed": 3352, "skipped": 311, "errors": 4},
        "pytest_seconds": 313.36,
    }
    assert summary("== 4 errors in 3.00s ==")["counts"] == {"errors": 4}
    with pytest.raises(ValueError, match="no pytest summary line"):
        summary("collected 0 items\n")


def test_the_machine_speed_benchmark_times_each_repetition_and_takes_medians_per_window():
    """A fake clock: each call of the work takes one more second than the last, so the rates and the windows'
    medians are known exactly; the spread is the fastest window's median over the slowest's."""
    speed = _module("machine_speed")
    now, took = [0.0], [0.0]

    def clock():
        return now[0]

    def work():
        took[0] += 1.0
        now[0] += took[0]
        return 12

    runs = speed.repeat(work, 10.0, clock, load=lambda: now[0] / 10)  # the load: a tenth of the time, as it starts
    # calls of 1, 2, 3, 4 s start at 0, 1, 3, 6; the 5th would start at 10: none
    assert runs == [(0.0, 12.0, 0.0), (1.0, 6.0, 0.1), (3.0, 4.0, 0.3), (6.0, 3.0, 0.6)]
    assert speed.windows(runs, 2.0) == [9.0, 4.0, 3.0]  # windows 0–2 s (two runs), 2–4 s, 6–8 s
    row = speed.summary("w", "unit", runs, 2.0)
    assert row["spread"] == 3.0 and (row["min"], row["median"], row["max"]) == (3.0, 5.0, 12.0)
    assert row["window_loads"] == [0.05, 0.3, 0.6]


@pytest.mark.parametrize(
    "bad, message",
    [
        (["--window", "0"], "--window: must be above 0 and at most --seconds (90)"),
        (["--window", "100"], "--window: must be above 0 and at most --seconds (90)"),
        (["--seconds", "inf"], "--seconds: must be above 0 and finite; got inf"),
        (["--seconds", "-1"], "--seconds: must be above 0 and finite; got -1"),
    ],
)
def test_the_machine_speed_benchmark_refuses_times_it_cannot_fill(bad, message, capsys):
    with pytest.raises(SystemExit) as stop:
        _module("machine_speed").main(bad)
    assert stop.value.code == 2 and f"argument {message}" in capsys.readouterr().err
