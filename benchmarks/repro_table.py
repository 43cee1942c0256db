"""The reproductions' claims, as the documentation shows them: each figure's claims table, from a results folder.

Reads a folder that ``speculab repro all --out DIR`` (or single ``speculab repro NAME --out DIR`` runs) wrote, and
for each figure recorded as finished there — its files unchanged since its run (by the sha256 its provenance
record holds) — computes the reproduction's own ``claims(result)`` from its JSON: the paper's claim beside our exact
theory, simulation and real-model measurement. The page ``docs/reproductions.md`` includes the table this writes;
``speculab report`` shows the same claims beside each figure.

    python benchmarks/repro_table.py --results DIR [--out benchmarks/tables]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _tables  # noqa: E402


def collect(results: Path) -> dict:
    """``{"figures": [...], "missing": [...]}``: each figure recorded as finished in ``results`` (in the order of
    ``speculab.repro.FIGURES``) with its run's parameters, wall time, commit and claims; the others by name."""
    from speculab import repro
    from speculab.repro._io import check_claims
    from speculab.repro.report import figure_result
    from speculab.repro.runner import changed_files, read_provenance

    data = read_provenance(results)  # ValueError naming the file if it is not a provenance record
    figures, missing = [], []
    for name, (_, what) in repro.FIGURES.items():
        entry = data["figures"].get(name)
        if not entry or entry["status"] != "ok":
            missing.append(name)
            continue
        changed = changed_files(results, entry)
        if changed:
            raise ValueError(f"{results / changed[0]} is not the file `speculab repro {name}` wrote: run it again")
        result = figure_result(results, name)
        if result is None:
            raise ValueError(f"{name} is recorded as finished in {results} but its JSON is not there: run it again")
        git = entry.get("environment", {}).get("git") or {}
        figures.append(
            {
                "name": name,
                "what": what,
                "parameters": entry.get("parameters", {}),
                "seconds": entry.get("seconds"),
                "commit": git.get("commit"),
                "modified": bool(git.get("modified")),
                "claims": check_claims(repro.get(name).claims(result)),
            }
        )
    return {"figures": figures, "missing": missing}


def markdown(result: dict) -> str:
    """Per figure: its command, what it reproduces, its run, and its claims table (the columns some row uses)."""
    from speculab.repro.report import HEADINGS as columns  # the report's own column headings

    parts = []
    for f in result["figures"]:
        used = [c for c in columns if c == "quantity" or any(r[c] is not None for r in f["claims"])]
        params = ", ".join(f"{k}={v}" for k, v in f["parameters"].items()) or "defaults"
        commit = f"`{f['commit'][:7]}`" + (" (modified)" if f["modified"] else "") if f["commit"] else "?"
        seconds = "—" if f["seconds"] is None else f"{f['seconds']:.0f} s"
        lines = [
            f"### `speculab repro {f['name']}`",
            "",
            f"{f['what']}. Parameters: {params}; {seconds}; commit {commit}.",
            "",
            "| " + " | ".join(columns[c] for c in used) + " |",
            "| " + " | ".join("---" for _ in used) + " |",
        ]
        for row in f["claims"]:
            cells = ["—" if row[c] is None else row[c].replace("|", "\\|").replace("\n", " ") for c in used]
            lines.append("| " + " | ".join(cells) + " |")
        parts.append("\n".join(lines))
    if result["missing"]:
        parts.append(
            "Not in this run (`speculab repro NAME --out DIR` runs one, `speculab report` shows it): "
            + ", ".join(f"`{n}`" for n in result["missing"])
            + "."
        )
    return "\n\n".join(parts) + "\n"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", required=True, help="the folder `speculab repro all --out` wrote")
    ap.add_argument("--out", help="write repro_table.json and repro_table.md into this folder, for the documentation")
    args = ap.parse_args(argv)
    results = Path(args.results)
    if not results.is_dir():
        ap.error(f"--results {results} is not a folder")
    env = _tables.environment()
    try:
        result = collect(results)
    except ValueError as exc:
        ap.error(f"--results: {exc}")
    if not result["figures"]:
        ap.error(f"--results {results} holds no finished reproduction (run `speculab repro all --out {results}`)")
    if args.out:
        _tables.write(args.out, "repro_table", result, markdown, env, _tables.argv(argv))
    else:
        print(markdown(result))


if __name__ == "__main__":
    main()
