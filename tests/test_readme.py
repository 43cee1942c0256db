"""The README's Python examples run as written (each in a fresh interpreter, so a registered example method
does not leak into the registry of the other tests)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_the_readme_has_examples():
    assert len(BLOCKS) >= 2 and any("@register" in b for b in BLOCKS)


@pytest.mark.parametrize("code", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_readme_example_runs(code):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]


def test_every_reproduction_has_its_script_and_its_rows():
    """Each `speculab repro NAME` has papers_repro/<module>.py calling it, a row in papers_repro/README.md and one in
    the README's table of reproductions."""
    from speculab.repro import FIGURES

    root = README.parent
    listing = (root / "papers_repro" / "README.md").read_text()
    front = README.read_text()
    for name, (module, _) in FIGURES.items():
        script = root / "papers_repro" / f"{module.rsplit('.', 1)[1]}.py"
        assert script.exists() and f'"{name}"' in script.read_text(), name
        assert f"`{script.name}`" in listing, name
        assert f"`speculab repro {name}`" in front, name
