"""Carry ``benchmarks/mutation_equivalent.txt`` across a change that moves code but mutates nothing new.

A rename or a reformatting (``ruff format``) moves a module's mutants to other lines and columns, so the
list of equivalent mutants — keyed by ``line:column`` — stops matching them. When a module's mutants are
the same changes in the same order before and after (the tool enumerates them in the order of the syntax
tree, which a rename or a layout change keeps), the k-th mutant before is the k-th after: this rewrites
each entry's ``line:column`` to its mutant's new place. A module whose mutants changed otherwise (a mutant
more or less, or another change at some index) is left as it is and named, to be remapped by hand.

    python benchmarks/remap_equivalents.py HEAD          # the list at HEAD's sources -> the working tree's
    python benchmarks/remap_equivalents.py 24f6276 --check  # say what would change, write nothing
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mutation import EQUIVALENT, ROOT, mutant_names  # noqa: E402


def remap(before: str, after: str) -> dict[str, str] | None:
    """``{old "line:column": new "line:column"}`` for one module's two sources, or ``None`` when their mutants are
    not the same changes in the same order (then no entry can be carried by its index)."""
    old, new = mutant_names(before), mutant_names(after)
    if len(old) != len(new) or any(a[1] != b[1] for a, b in zip(old, new)):
        return None
    return {a[0]: b[0] for a, b in zip(old, new)}


def remap_lines(lines: list[str], sources) -> tuple[list[str], list[str], list[str]]:
    """The list's ``lines`` with every entry moved; ``sources(module)`` gives ``(before, after)``. Returns the new
    lines, the entries moved (``module:old -> new``) and the modules left alone (with the reason)."""
    maps, moved, left = {}, [], []
    out = []
    for line in lines:
        if not line.strip() or line.lstrip().startswith("#"):
            out.append(line)
            continue
        where, rest = line.split("|", 1)
        module, at = where.strip().split(":", 1)
        if module not in maps:
            before, after = sources(module)
            maps[module] = remap(before, after)
            if maps[module] is None:
                left.append(f"{module}: its mutants differ before and after (remap its entries by hand)")
        mapping = maps[module]
        if mapping is None or at not in mapping:
            if mapping is not None:
                left.append(f"{module}:{at}: no such mutant before")
            out.append(line)
            continue
        if mapping[at] != at:
            moved.append(f"{module}:{at} -> {mapping[at]}")
        out.append(f"{module}:{mapping[at]} |{rest}")
    return out, moved, left


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rev", help="the git revision whose sources the list's line:column entries refer to")
    ap.add_argument("--check", action="store_true", help="print what would change and write nothing")
    args = ap.parse_args(argv)

    def sources(module: str) -> tuple[str, str]:
        shown = subprocess.run(["git", "show", f"{args.rev}:{module}"], cwd=ROOT, capture_output=True, text=True)
        if shown.returncode != 0:
            raise SystemExit(f"remap_equivalents: rev: git show {args.rev}:{module} failed: {shown.stderr.strip()}")
        return shown.stdout, (ROOT / module).read_text()

    lines = EQUIVALENT.read_text().splitlines()
    out, moved, left = remap_lines(lines, sources)
    for m in moved:
        print("moved", m)
    for m in left:
        print("left", m)
    if not args.check and out != lines:
        EQUIVALENT.write_text("\n".join(out) + "\n")
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
