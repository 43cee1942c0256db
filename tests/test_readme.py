"""The README is a front door: short, its Python example runs as written (in a fresh interpreter), its links lead
somewhere, and the reproductions it points to are all listed in the docs."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_the_readme_has_an_example_and_stays_a_front_door():
    """At most 200 lines of at most 120 characters; measurements, tables and history live in the docs and git."""
    lines = README.read_text().splitlines()
    assert BLOCKS and len(lines) <= 200
    assert [n for n, line in enumerate(lines, 1) if len(line) > 120] == []


def test_the_readmes_links_lead_to_files():
    links = re.findall(r"\]\(([^)#]+)\)", README.read_text())
    assert links and all((README.parent / link).is_file() for link in links), links


def test_the_readmes_method_table_is_the_registry():
    """One row per registered method, by its name."""
    from speculab.methods import REGISTRY

    rows = re.findall(r"^\| `([\w-]+)` \| `", README.read_text(), flags=re.M)
    assert sorted(rows) == sorted(REGISTRY)


@pytest.mark.slow
@pytest.mark.parametrize("code", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_readme_example_runs(code):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr == "", done.stderr[-3000:]  # quiet: no weight-loading bars, no warnings
    assert "Estimate(" not in done.stdout and "se=nan" not in done.stdout  # a summary reads as numbers, not tuples


def test_every_reproduction_has_its_script_and_its_rows():
    """Each `speculab repro NAME` has papers_repro/<module>.py calling it, a row in papers_repro/README.md and one in
    the docs' table of reproductions."""
    from speculab.repro import FIGURES

    root = README.parent
    listing = (root / "papers_repro" / "README.md").read_text()
    front = (root / "docs" / "reproductions.md").read_text()
    for name, (module, _) in FIGURES.items():
        script = root / "papers_repro" / f"{module.rsplit('.', 1)[1]}.py"
        assert script.exists() and f'"{name}"' in script.read_text(), name
        assert f"`{script.name}`" in listing, name
        assert f"`speculab repro {name}`" in front, name
