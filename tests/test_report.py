"""``speculab report``: the HTML page, and what a real headless Chromium shows of it.

The browser test renders the report in Debian's Chromium (``.ci/run`` installs it; elsewhere the test
skips without it) and reads the screenshot: every embedded figure must be found in it pixel for pixel,
and every table's header band must be there with its rows. Each check is shown to fail on a page that
lacks what it looks for.
"""

import html
import json
import os
import re
import shutil
import subprocess

import numpy as np
import pytest

from speculab import repro
from speculab.cli import main
from speculab.repro import runner
from speculab.repro.report import REPORT, build_report
from speculab.stats import LawRow
from speculab.validate import SpeedRow, Validation, file_digest

FAST = ["yin-fig3", "sprinter-fig6"]
HEADER = (0x1F, 0x3B, 0x73)  # th background in the report's CSS
BORDER = (0xC8, 0xCF, 0xDC)  # td border
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    folder = tmp_path_factory.mktemp("results")
    runner.run_all(folder, only=FAST, progress=False, echo=lambda line: None)
    return folder


def _claims(folder, name):
    return repro.get(name).claims(json.loads((folder / f"{name.replace('-', '_')}.json").read_text()))


def test_report_embeds_every_figure_and_claims_table(results, capsys):
    assert main(["report", "--out", str(results)]) == 0
    assert f"wrote {results / REPORT}" in capsys.readouterr().out
    page = (results / REPORT).read_text()
    assert "http://" not in page and "https://" not in page  # self-contained: nothing fetched
    assert page.count("data:image/png;base64,") == len(FAST)
    assert page.count('<table class="claims">') == len(FAST)
    for name in FAST:
        assert f'<section id="{name}">' in page and html.escape(repro.FIGURES[name][1]) in page
        for row in _claims(results, name):
            assert f"<td>{html.escape(row['quantity'])}</td>" in page


def test_each_claims_cell_is_the_reproductions_own_in_order(results):
    """Every claims table, cell by cell and row by row, is its reproduction's ``claims`` of its JSON (columns used
    by some row; "—" where a row has none): a cell printing another row's or another figure's value fails."""
    from speculab.repro._io import CLAIM_COLUMNS

    page = build_report(results).read_text()
    for name in FAST:
        section = page.split(f'<section id="{name}">')[1].split("</section>")[0]
        table = section.split('<table class="claims">')[1].split("</table>")[0]
        rows = re.findall(r"<tr>(.*?)</tr>", table)[1:]  # the first is the header
        claims = _claims(results, name)
        used = [c for c in CLAIM_COLUMNS if c == "quantity" or any(r[c] is not None for r in claims)]
        assert len(rows) == len(claims) > 0
        for row, claim in zip(rows, claims):
            cells = [html.unescape(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", row)]
            assert cells == ["—" if claim[c] is None else str(claim[c]) for c in used], name


def test_report_lists_skipped_and_failed_figures_with_the_reason(results, tmp_path):
    entries = runner.read_provenance(results)
    entries["figures"]["draft-design"] = {"status": "skipped", "reason": "needs jax (pip install -e '.[jax]')"}
    entries["figures"]["yin-fig2a"] = {"status": "failed", "error": "RuntimeError: boom", "seconds": 1.0}
    folder = tmp_path / "r"
    shutil.copytree(results, folder)
    (folder / runner.PROVENANCE).write_text(json.dumps(entries))
    (folder / "yin_fig2a.json").write_text((results / "yin_fig3.json").read_text())  # a stale file: not shown
    page = build_report(folder).read_text()
    assert "skipped: needs jax" in page and "failed: RuntimeError: boom" in page
    assert "skipped: left out by --only/--skip" in page  # figures the last `repro all` did not run are listed
    assert '<section id="yin-fig2a">' not in page


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("missing/", None, "is not a folder"),
        ("", None, "no reproductions in"),
        ("yin_fig3.json", "{not json", "is not a reproduction's JSON"),
        (runner.PROVENANCE, "[]", "is not a speculab provenance file"),
        (runner.PROVENANCE, '{"format": "speculab-provenance/1", "figures": {"yin-fig3": "ok"}}', "not a record"),
        ("yin_fig3.json", '{"x": 1}', "no reproductions in"),  # a result without a provenance record is not shown
        ("yin_fig3.json", "[1, 2]", "no reproductions in"),
    ],
)
def test_report_refuses_a_folder_without_reproductions(name, content, message, tmp_path, capsys):
    if content is not None:
        (tmp_path / name).write_text(content)
    folder = tmp_path / name if name.endswith("/") else tmp_path
    assert main(["report", "--out", str(folder)]) == 2
    assert message in capsys.readouterr().err


def test_report_refuses_a_page_path_that_is_a_folder(results, tmp_path, capsys):
    assert main(["report", "--out", str(results), "--html", str(tmp_path)]) == 2
    assert (
        capsys.readouterr().err == f"speculab: error: {tmp_path} is a folder: the report is written to a file "
        "(its folder is made if missing)\n"
    )


def test_report_makes_the_pages_missing_folder_as_every_output_does(results, tmp_path, capsys):
    """``--html`` into a folder that does not exist yet makes it, as ``repro --out``, ``instance --out`` and
    ``validate --out`` do: the page is written, and nothing else is."""
    page = tmp_path / "new" / "deeper" / "page.html"
    assert main(["report", "--out", str(results), "--html", str(page)]) == 0
    assert page.read_text().startswith("<!DOCTYPE html>") and sorted(page.parent.iterdir()) == [page]


def test_a_page_that_cannot_be_written_is_one_line_naming_it(results, tmp_path, capsys):
    """``--html`` under a file is the user's error (2), naming the file in the way; a folder the system will not
    write to is a failed run (1), with the system's reason, not a raw errno naming a temporary file."""
    (tmp_path / "file").write_text("")
    page = tmp_path / "file" / "deeper" / "page.html"
    assert main(["report", "--out", str(results), "--html", str(page)]) == 2
    assert capsys.readouterr().err == (
        f"speculab: error: {page} cannot be written: {tmp_path / 'file'} is a file, not a folder\n"
    )
    assert main(["report", "--out", str(results), "--html", "/proc/speculab-report.html"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("speculab: error: cannot write the report to /proc/speculab-report.html: ")
    assert err.count("\n") == 1 and ".tmp" not in err and "Errno" not in err


def test_report_errors_name_the_users_folder_not_a_parameter(tmp_path, capsys):
    """The message names the folder the user gave (``--out`` on the command line, ``out_dir`` in Python) by
    itself, so it reads right from either."""
    missing = tmp_path / "nowhere"
    assert main(["report", "--out", str(missing)]) == 2
    assert capsys.readouterr().err == (
        f"speculab: error: {missing} is not a folder (run `speculab repro all --out {missing}` first)\n"
    )


# -- what the browser shows ---------------------------------------------------------------------------------------
def _screenshot(html_path, png_path, tmp_path, width=1900, height=3600):
    """Chromium's headless screenshot of a page at 1 CSS pixel per pixel, as an (H, W, 3) uint8 array."""
    from matplotlib.image import imread

    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
        "--force-device-scale-factor=1",
        f"--window-size={width},{height}",
        f"--screenshot={png_path}",
    ]
    subprocess.run([CHROMIUM, *flags, html_path.as_uri()], check=True, timeout=120, capture_output=True)
    return _rgb(imread(png_path))


def _rgb(image):
    return np.rint(np.asarray(image)[..., :3] * 255).astype(np.int16)


def _find(image, shot, tol=3):
    """Where ``image`` appears in ``shot`` (top-left corner), every pixel within ``tol`` per channel; else None.

    Candidates come from a 32-pixel run of the image's most varied row, then each is compared whole."""
    h, w, _ = image.shape
    variety = [len(np.unique(row @ np.array([1, 256, 65536]))) for row in image]
    r = int(np.argmax(variety))
    c = int(np.argmax(np.any(image[r] != image[r, 0], axis=-1)))  # the row's first pixel unlike its margin
    c = min(c, w - 32)
    run = image[r, c : c + 32]
    H, W, _ = shot.shape
    ys, xs = np.nonzero(np.all(np.abs(shot[:, : W - 31] - run[0]) <= tol, axis=-1))  # run[0] is not margin colour
    for k in range(1, 32):
        keep = np.all(np.abs(shot[ys, xs + k] - run[k]) <= tol, axis=-1)
        ys, xs = ys[keep], xs[keep]
    for y, x in zip(ys, xs):
        top, left = y - r, x - c
        if top < 0 or left < 0 or top + h > H or left + w > W:
            continue
        if np.all(np.abs(shot[top : top + h, left : left + w] - image) <= tol):
            return int(top), int(left)
    return None


def _bands(shot, colour, min_width=150):
    """The horizontal bands (first row, height) where at least ``min_width`` pixels of a row are ``colour``."""
    rows = np.count_nonzero(np.all(shot == np.array(colour), axis=-1), axis=1) >= min_width
    edges = np.flatnonzero(np.diff(np.concatenate([[0], rows.astype(int), [0]])))
    return [(int(a), int(b - a)) for a, b in zip(edges[::2], edges[1::2])]


def _tables(shot):
    """Each table seen: its header band's top and the number of body rows under it (border lines − 1)."""
    headers = [top for top, height in _bands(shot, HEADER) if height >= 15]  # h2 rules are 2 px
    lines = [top for top, height in _bands(shot, BORDER) if height <= 2]
    seen = []
    for i, top in enumerate(headers):
        below = [y for y in lines if y > top and (i + 1 == len(headers) or y < headers[i + 1])]
        run = [below[0]] if below else []
        for y in below[1:]:  # consecutive lines of one table are at most a few text lines apart
            if y - run[-1] > 120:
                break
            run.append(y)
        seen.append((top, max(len(run) - 1, 0)))
    return seen


@pytest.mark.slow
@pytest.mark.skipif(
    CHROMIUM is None and os.environ.get("CI") != "true",
    reason="needs Debian's chromium (apt-get install chromium; .ci/run installs it)",
)
def test_chromium_shows_the_reports_figures_and_tables(results, tmp_path):
    from matplotlib.image import imread

    assert CHROMIUM is not None, "CI must install chromium (.ci/run)"
    report = build_report(results, tmp_path / "report.html")
    shot = _screenshot(report, tmp_path / "shot.png", tmp_path)
    figures = [_rgb(imread(results / f"{name.replace('-', '_')}.png")) for name in FAST]
    assert max(f.shape[1] for f in figures) <= 1900 - 48  # the window fits them: shown at their own size, unscaled
    places = [_find(image, shot) for image in figures]
    assert all(p is not None for p in places), f"figures not found in the screenshot: {places}"
    assert places == sorted(places)  # in the page's order, one under the other
    tables = _tables(shot)
    expected = [len(repro.FIGURES)] + [len(_claims(results, name)) for name in FAST]  # overview: every figure
    assert [rows for _, rows in tables] == expected, tables

    # Each check fails on a page without what it looks for: figures swapped out, claims tables removed.
    page = re.sub(
        r'<img alt="yin_fig3.png" src="data:image/png;base64,[^"]*"',
        '<img alt="yin_fig3.png" src="data:image/png;base64,AAAA"',
        report.read_text(),
    )
    broken = tmp_path / "broken.html"
    broken.write_text(re.sub(r'<table class="claims">.*?</table>', "", page, flags=re.S))
    shot = _screenshot(broken, tmp_path / "broken.png", tmp_path)
    assert _find(figures[0], shot) is None and _find(figures[1], shot) is not None
    assert [rows for _, rows in _tables(shot)] == expected[:1]


def test_report_refuses_a_figure_whose_files_changed_after_its_run(results, tmp_path, capsys):
    """A figure JSON edited after its run (a number times 1,000), or a figure whose PNG is gone, is not reported:
    the report names the file and writes nothing."""
    for change in ("edit", "delete"):
        folder = tmp_path / change
        shutil.copytree(results, folder)
        (folder / REPORT).unlink(missing_ok=True)
        path = folder / "yin_fig3.json"
        if change == "edit":
            data = json.loads(path.read_text())
            key = next(k for k, v in data.items() if isinstance(v, (int, float)) and not isinstance(v, bool) and v)
            data[key] *= 1000
            path.write_text(json.dumps(data))
        else:
            path = folder / "yin_fig3.png"
            path.unlink()
        assert main(["report", "--out", str(folder)]) == 2
        assert f"{path} is not the file `speculab repro yin-fig3` wrote" in capsys.readouterr().err
        assert not (folder / REPORT).exists()


def test_report_refuses_a_record_naming_a_file_outside_its_folder(results, tmp_path, capsys):
    """A provenance entry listing ``../secret.png`` or an absolute path is refused before any file is read."""
    secret = tmp_path / "secret.png"
    secret.write_bytes((results / "yin_fig3.png").read_bytes())
    for name in ("../secret.png", str(secret)):
        folder = tmp_path / "r"
        shutil.rmtree(folder, ignore_errors=True)
        shutil.copytree(results, folder)
        (folder / REPORT).unlink(missing_ok=True)
        data = runner.read_provenance(folder)
        data["figures"]["yin-fig3"]["files"].append(name)
        (folder / runner.PROVENANCE).write_text(json.dumps(data))
        assert main(["report", "--out", str(folder)]) == 2
        assert "not plain names in its folder" in capsys.readouterr().err
        assert not (folder / REPORT).exists()


def test_report_shows_no_figure_without_its_record(results, tmp_path, capsys):
    """A figure's files are shown only as its recorded run wrote them: with its provenance entry gone (or its
    digests removed), or its PNG swapped for a link to a file elsewhere, it is not shown or the page is refused."""
    folder = tmp_path / "r"
    shutil.copytree(results, folder)
    data = runner.read_provenance(folder)
    del data["figures"]["yin-fig3"]
    (folder / runner.PROVENANCE).write_text(json.dumps(data))
    page = build_report(folder).read_text()
    assert '<section id="yin-fig3">' not in page and "yin_fig3.json has no record in provenance.json" in page
    assert '<section id="sprinter-fig6">' in page
    data = runner.read_provenance(results)
    del data["figures"]["yin-fig3"]["sha256"]
    (folder / runner.PROVENANCE).write_text(json.dumps(data))
    assert main(["report", "--out", str(folder)]) == 2
    assert "has no valid sha256 for each of its files (remove or repair the file" in capsys.readouterr().err
    (folder / runner.PROVENANCE).write_text(json.dumps(runner.read_provenance(results)))
    elsewhere = tmp_path / "elsewhere.png"
    elsewhere.write_bytes((folder / "yin_fig3.png").read_bytes())
    (folder / "yin_fig3.png").unlink()
    (folder / "yin_fig3.png").symlink_to(elsewhere)  # the same bytes, through a link: still refused
    assert main(["report", "--out", str(folder)]) == 2
    assert "yin_fig3.png is not the file `speculab repro yin-fig3` wrote" in capsys.readouterr().err


def _copy(results, folder):
    shutil.copytree(results, folder)
    (folder / REPORT).unlink(missing_ok=True)
    return folder


def _write_provenance(folder, data):
    (folder / runner.PROVENANCE).write_text(json.dumps(data))


def _section_meta(page, name):
    return html.unescape(page.split(f'<section id="{name}">')[1].split('<p class="meta">')[1].split("</p>")[0])


def test_each_figures_provenance_line_is_its_record(results, tmp_path):
    """The line under each figure's heading states its own record: parameters in order, the wall time to 0.1 s,
    the version, the commit's first ten digits and whether the tree was modified — "defaults" and "—" where the
    record has none, no commit without one."""
    folder = _copy(results, tmp_path / "r")
    data = runner.read_provenance(folder)
    fig3, fig6 = data["figures"]["yin-fig3"], data["figures"]["sprinter-fig6"]
    fig3["parameters"] = {"T": 50, "row_law": "uniform"}
    fig3["seconds"] = 12.345
    fig3["started"] = "2026-11-29T00:00:00+00:00"
    fig3["environment"] = dict(
        fig3["environment"], speculab="9.8.7", git={"commit": "0123456789abcdef", "modified": True}
    )
    fig6["parameters"] = {}
    del fig6["seconds"]
    fig6["environment"] = {k: v for k, v in fig6["environment"].items() if k not in ("git", "speculab")}
    fig6["started"] = "S"
    _write_provenance(folder, data)
    page = build_report(folder).read_text()
    assert _section_meta(page, "yin-fig3") == (
        "parameters: T=50, row_law=uniform; wall time 12.3 s; speculab 9.8.7, commit 0123456789 (modified); "
        "2026-11-29T00:00:00+00:00"
    )
    assert _section_meta(page, "sprinter-fig6") == "parameters: defaults; wall time —; speculab ?; S"
    fig3["environment"]["git"] = {"commit": "fedcba98765432100", "modified": False}
    _write_provenance(folder, data)
    assert "speculab 9.8.7, commit fedcba9876; 2026" in _section_meta(build_report(folder).read_text(), "yin-fig3")


def test_the_environment_line_is_the_last_runs(results, tmp_path):
    """The page's environment line is ``repro all``'s record where there is one, else the last figure's:
    memory in GiB, the accelerator or "CPU only"; no line without any environment."""
    folder = _copy(results, tmp_path / "r")
    data = runner.read_provenance(folder)
    env = data["figures"]["yin-fig3"]["environment"]
    machine = {"platform": "Plan9", "cpus": 96, "memory_bytes": 3 * 2**30}
    data["figures"]["yin-fig3"]["environment"] = dict(env, python="3.0-first", machine=machine)
    data["figures"]["sprinter-fig6"]["environment"] = dict(env, python="3.05-middle", machine=machine)
    data["figures"]["draft-design"] = {"status": "skipped", "reason": "needs jax"}  # no environment: not read
    data["figures"]["yin-fig5"] = {
        "status": "failed",
        "error": "RuntimeError: boom",
        "environment": dict(env, python="3.1-last", machine=dict(machine, cpus=7)),
    }
    data.pop("all", None)
    _write_provenance(folder, data)
    page = html.unescape(build_report(folder).read_text())
    assert "Python 3.1-last;" in page and "Plan9, 7 CPUs, 3 GiB, CPU only</p>" in page
    assert "3.0-first" not in page and "3.05-middle" not in page
    data["all"] = {"environment": dict(env, python="3.2-all", machine=dict(machine, accelerator="H200"))}
    _write_provenance(folder, data)
    page = html.unescape(build_report(folder).read_text())
    assert "Python 3.2-all;" in page and "Plan9, 96 CPUs, 3 GiB, H200</p>" in page and "3.1-last" not in page
    for entry in data["figures"].values():
        entry.pop("environment", None)
    _write_provenance(folder, data)
    assert "Python" not in build_report(folder).read_text()


def test_the_overview_rows_and_total_are_the_records(results, tmp_path):
    """The overview gives each figure's wall time from its own record — a shown figure stays shown, with its own
    time, though the last ``repro all`` skipped it — and the last ``repro all``'s wall time in minutes."""
    folder = _copy(results, tmp_path / "r")
    data = runner.read_provenance(folder)
    data["figures"]["yin-fig3"]["seconds"] = 42.25
    data["figures"]["sprinter-fig6"]["seconds"] = 7.0
    data["all"] = {"wall_seconds": 600.0, "skipped": {"yin-fig3": "left out by --only/--skip"}}
    _write_provenance(folder, data)
    page = build_report(folder).read_text()
    row = re.search(r"<tr><td>yin-fig3</td>(.*?)</tr>", page).group(1)
    assert '<a href="#yin-fig3">shown</a>' in row and "<td>42.2 s</td>" in row
    assert re.search(r"<tr><td>sprinter-fig6</td><td>.*?</td><td>7.0 s</td>", page)
    assert "last <code>speculab repro all</code>: 10.0 min wall time" in page
    del data["all"]["wall_seconds"]
    _write_provenance(folder, data)
    assert "min wall time" not in build_report(folder).read_text()


def test_a_figure_json_that_is_not_its_result_is_refused_naming_it(results, tmp_path):
    """A figure's JSON recorded with its digest but not its reproduction's result (another figure's) is refused,
    naming the file and the command that writes it."""
    folder = _copy(results, tmp_path / "r")
    path = folder / "sprinter_fig6.json"
    path.write_text('{"x": 1}')
    data = runner.read_provenance(folder)
    data["figures"]["sprinter-fig6"]["sha256"]["sprinter_fig6.json"] = runner.sha256(path)
    _write_provenance(folder, data)
    with pytest.raises(ValueError) as info:
        build_report(folder)
    message = str(info.value)
    assert message.startswith(f"{path} is not a result of sprinter-fig6 (KeyError")
    assert message.endswith("rerun `speculab repro sprinter-fig6`")


def _validation_data():
    """What ``Validation.to_dict`` writes, with values whose every cell of the page is known."""
    law = {
        "method": "sd K=2",
        "runs": 1000,
        "lossless": True,
        "refused": False,
        "ok": True,
        "power": 0.99512,
        "first": [12.345, 7, 0.08976907478693973],  # each p is its G's χ² tail (scipy's chi2.sf)
        "joint": [101.25, 63, 0.0015986349185654115],
        "detectable": [0.0512, 0.1234],
    }
    control = dict(law, method="biased uno (control)", lossless=False, refused=True, ok=True, power=0.5)
    control |= {"first": [99.0, 7, 1.735388245515669e-18], "joint": [300.0, 63, 1.434950293727211e-32]}
    control["detectable"] = [0.2, 0.3]
    wrong = dict(law, method="block K=2", refused=True, ok=False, first=[float("inf"), 6, 0.0], power=1)
    return {
        "settings": {
            "pair": "tiny",
            "device": "cuda:0",
            "device_name": "H200",
            "dtype": "float32",
            "torch": "9.9",
            "runs": 1000,
        },
        "passed": False,
        "laws": [law, wrong, control],  # the control last, as validate writes it
        "compare": [
            {
                "method": "sd",
                "quantity": "rejections",
                "predicted": 9.8591,
                "measured": 9.887,
                "z": 0.1834,
                "holds": None,
                "gates": True,
            },
            {
                "method": "sd K=4",
                "quantity": "target calls",
                "predicted": 11.52,
                "measured": 12.1,
                "z": -2.3449,
                "holds": None,
                "gates": False,
            },
            {
                "method": "biased",
                "quantity": "Thm 5 gap",
                "predicted": 0.0,
                "measured": 1e-5,
                "z": float("nan"),
                "holds": True,
                "gates": True,
            },
            {
                "method": "fuzzy",
                "quantity": "bound",
                "predicted": 1.0,
                "measured": 2.0,
                "z": float("nan"),
                "holds": False,
                "gates": True,
            },
        ],
        "speed": [
            {"what": "SD(K=4), 256 rows", "tokens": 12345, "seconds": 2.5, "tokens_per_second": 4938.0, "note": ""},
            {"what": "Autoregressive()", "tokens": 99, "seconds": 0.125, "tokens_per_second": 792.0, "note": "x"},
        ],
        "latency": {"predicted": 1.23456, "measured": 1.1, "error": 0.1223},
    }


def _signed(data) -> str:
    """``data`` as ``validation.json`` holds it: with the digest of its content, as ``Validation.to_json`` signs (a
    value that is no object is written as is)."""
    data = json.loads(json.dumps(data))
    return json.dumps({**data, "digest": file_digest(data)} if isinstance(data, dict) else data)


def _cells(table):
    return [
        [html.unescape(c) for c in re.findall(r"<t[dh]>(.*?)</t[dh]>", row)]
        for row in re.findall(r"<tr>(.*?)</tr>", table)
    ]


def test_the_validation_section_is_its_json_cell_by_cell(tmp_path):
    """Each table of the validation section is ``validation.json``'s rows in order, each cell formatted from its own
    field: a cell printing another row's or another field's value, or a flipped sign, fails."""
    (tmp_path / "validation.json").write_text(_signed(_validation_data()))
    page = build_report(tmp_path).read_text()
    assert "<h1>speculab: validation</h1>" in page and 'class="overview"' not in page  # no figure: no overview
    section = page.split('<section id="validation">')[1].split("</section>")[0]
    meta = html.unescape(section.split('<p class="meta">')[1].split("</p>")[0])
    assert meta == "tiny pair on cuda:0 (H200, float32, torch 9.9): <b>FAILED</b>; 1000 runs per law test " + (
        "(<code>speculab validate</code>)"
    )
    laws, compare, speed = (_cells(t) for t in re.findall(r"<table>(.*?)</table>", section))
    assert laws[1:] == [
        ["sd K=2", "12.3 (7), 0.09", "101.2 (63), 0.0016", "no", "0.995", "0.051, 0.123", "✓"],
        ["block K=2", "inf (6), 0", "101.2 (63), 0.0016", "yes", "1.000", "0.051, 0.123", "✗"],
        ["biased uno (control)", "99.0 (7), 1.7e-18", "300.0 (63), 1.4e-32", "yes", "0.500", "0.200, 0.300", "✓"],
    ]
    assert compare[1:] == [
        ["sd", "rejections", "9.859", "9.887", "+0.18"],
        ["sd K=4", "target calls (model check)", "11.52", "12.1", "-2.34"],
        ["biased", "Thm 5 gap", "0", "1e-05", "holds"],
        ["fuzzy", "bound", "1", "2", "fails"],
    ]
    assert speed[1:] == [["SD(K=4), 256 rows", "4,938", "12,345", "2.50"], ["Autoregressive()", "792", "99", "0.12"]]
    assert "predicted 1.235, measured 1.100 (error +12.2%)" in section


def _corrupt(path, value, *more):
    """The validation data with the value at ``path`` (keys and indices) replaced, or removed for ``...``; ``more``:
    further ``(path, value)`` pairs."""
    data = _validation_data()
    for path, value in [(path, value), *more]:
        *where, last = path
        node = data
        for step in where:
            node = node[step]
        if value is ...:
            del node[last]
        else:
            node[last] = value
    return data


_LAWS = _validation_data()["laws"]  # sd K=2, block K=2 (refused), the control
_VALID_VARIANTS = {
    "no latency": (("latency",), None),
    "integer power": (("laws", 1, "power"), 1),
    "holds true": (("compare", 3, "holds"), True),
    "integer seconds": (("speed", 1), {"what": "x", "tokens": 99, "seconds": 3, "tokens_per_second": 33, "note": ""}),
    "no seconds on the clock": (
        ("speed", 1),
        {"what": "x", "tokens": 0, "seconds": 0.0, "tokens_per_second": float("nan"), "note": ""},
    ),
    # the boundaries of what a validation writes are written
    "one run per law test": (("settings", "runs"), 1, *((("laws", i, "runs"), 1) for i in range(3))),
    "power 0": (("laws", 0, "power"), 0.0),
    "G 0 on df 1, p 1": (("laws", 0, "first"), [0.0, 1, 1.0]),
    "p 0": (("laws", 1, "joint"), [float("inf"), 3, 0.0]),
    "TV 0": (("laws", 0, "detectable"), [0.0, 0.0]),
    # refused is whether a p is below α/2 = 5e-5 (G below: χ²₇'s inverse tail at that p)
    "p exactly α/2: not refused": (("laws", 0, "first"), [31.51244350289606, 7, 5e-05]),
    "p 1e-4: not refused": (("laws", 0, "first"), [29.877503909224902, 7, 1e-4]),
    "p 4e-5: refused": (
        ("laws", 0, "first"),
        [32.03579379121314, 7, 4e-5],
        (("laws", 0, "refused"), True),
        (("laws", 0, "ok"), False),
    ),
    "no tokens": (("speed", 1), {"what": "x", "tokens": 0, "seconds": 1.5, "tokens_per_second": 0.0, "note": ""}),
    # where the timings ran, as validate writes it (a file from before they were recorded has none of it)
    "timings on an idle machine": (
        ("settings", "threads"),
        2,
        (("settings", "cpus"), 16),
        (("settings", "load_at_start"), 0.0),
        (("settings", "load_at_end"), 0.25),
        (("settings", "load_warning"), None),
    ),
    "timings without a load": (
        ("settings", "threads"),
        1,
        (("settings", "cpus"), None),
        (("settings", "load_at_start"), None),
        (("settings", "load_at_end"), None),
        (("settings", "load_warning"), "the machine was busy"),
    ),
}


def _told(value) -> str:
    """How a refusal tells a field's value: ``...`` (the field removed) is missing, another as the file holds it."""
    return "missing" if value is ... else f"{json.dumps(value)}, a value no run writes"


_INVALID = [
    ((), [], "no settings or verdict"),
    (("settings",), [], "no settings or verdict"),
    (("passed",), 1, "no settings or verdict"),
    (("laws",), {}, "'laws' is not a list"),
    (("speed",), ..., "'speed' is not a list"),
    (("compare", 1), [], "compare[1] is not an object"),
    *(
        (("laws", 1, field), value, f"laws[1].{field} is {_told(value)}")
        for field, value in [
            ("method", 3),
            ("runs", True),
            ("runs", 1.0),
            ("lossless", 1),
            ("refused", None),
            ("ok", "yes"),
            ("power", True),
            ("power", "0.9"),
            ("first", [1.0, 2]),
            ("first", [1.0, 2, 3, 4]),
            ("first", (1.0, "2", 3.0)),
            ("joint", [1.0, False, 0.5]),
            ("joint", "abc"),
            ("detectable", [0.1]),
            ("detectable", [0.1, None]),
            ("detectable", ...),
        ]
    ),
    *(
        (("compare", 1, field), value, f"compare[1].{field} is {_told(value)}")
        for field, value in [
            ("method", None),
            ("quantity", 1),
            ("predicted", "1"),
            ("measured", None),
            ("z", False),
            ("holds", "x"),
            ("holds", 0),
            ("gates", None),
            ("gates", ...),
        ]
    ),
    *(
        (("speed", 1, field), value, f"speed[1].{field} is {_told(value)}")
        for field, value in [
            ("what", 1),
            ("tokens", 1.5),
            ("tokens", False),
            ("seconds", "s"),
            ("tokens_per_second", None),
            ("note", None),
        ]
    ),
    *(
        (("settings", name), value, f"settings.{name} is missing or not a")
        for name, value in [("pair", ...), ("device", 0), ("device_name", None), ("dtype", ...), ("torch", 2.1)]
    ),
    *((("settings", "runs"), value, "settings.runs is missing or not a whole number ≥ 1") for value in [0, 1.5, ...]),
    *(
        (("settings", name), value, f"settings.{name} is not what validate writes")
        for name, value in [
            ("threads", 0),
            ("threads", None),
            ("cpus", 0),
            ("load_at_start", -0.5),
            ("load_at_start", float("inf")),
            ("load_at_end", "1"),
            ("load_at_end", True),
            ("load_warning", 3),
        ]
    ),
    # the values no validation writes, once their types are right
    (("laws", 0, "runs"), 0, "laws[0].runs is not settings.runs"),
    (("laws", 2, "runs"), 999, "laws[2].runs is not settings.runs"),
    (("laws", 0, "first"), [-1.0, 7, 0.5], "laws[0].first is not a G-test's"),
    (("laws", 0, "first"), [1.0, 7.5, 0.5], "laws[0].first is not a G-test's"),
    (("laws", 0, "first"), [1.0, 0, 0.5], "laws[0].first is not a G-test's"),
    (("laws", 0, "joint"), [1.0, 7, 1.5], "laws[0].joint is not a G-test's"),
    (("laws", 0, "joint"), [1.0, 7, float("nan")], "laws[0].joint is not a G-test's"),
    (("laws", 0, "joint"), [101.25, 63, 0.0016], "laws[0].joint is not a G-test's"),  # p not G's tail
    (("laws", 0, "first"), [float("inf"), 7, 0.5], "laws[0].first is not a G-test's"),  # G = ∞ has p = 0
    (("laws", 0, "first"), [99.0, 7, 1.735388245515669e-18], "laws[0].refused is not whether a p is below α/2"),
    (("laws", 2, "refused"), False, "laws[2].refused is not whether a p is below α/2 = 5e-05"),
    (("laws", 1, "power"), 1.01, "laws[1].power is not a probability"),
    (("laws", 1, "power"), -0.01, "laws[1].power is not a probability"),
    (("laws", 1, "detectable"), [0.1, -0.2], "laws[1].detectable is not two total variations"),
    (("laws", 1, "detectable"), [float("inf"), 0.2], "laws[1].detectable is not two total variations"),
    (("laws", 0, "ok"), False, "laws[0].ok is not whether the test refused exactly the method that is not lossless"),
    (("laws", 1, "ok"), True, "laws[1].ok is not whether the test refused"),
    (("laws",), [], "laws does not end with the control"),
    (("laws",), [_LAWS[0], _LAWS[2], _LAWS[1]], "laws does not end with the control"),
    (("laws", 2, "lossless"), True, "laws[2].ok is not whether"),  # the control said lossless: its ok is wrong
    (("compare", 0, "z"), float("nan"), "compare[0].z and holds are not a compare row's"),
    (("compare", 0, "z"), float("inf"), "compare[0].z and holds are not a compare row's"),  # never written
    (("compare", 0, "holds"), True, "compare[0].z and holds are not a compare row's"),
    (("compare", 2, "holds"), None, "compare[2].z and holds are not a compare row's"),
    (("speed", 0, "tokens"), -1, "speed[0].tokens or seconds is negative or not finite"),
    (("speed", 0, "seconds"), -2.5, "speed[0].tokens or seconds is negative or not finite"),
    (("speed", 0, "seconds"), float("inf"), "speed[0].tokens or seconds is negative or not finite"),
    (("speed", 0, "tokens_per_second"), 4939.0, "speed[0].tokens_per_second is not tokens / seconds"),
    (("speed", 1, "tokens_per_second"), 792.4, "speed[1].tokens_per_second is not tokens / seconds"),
    (("speed", 1, "tokens_per_second"), float("nan"), "speed[1].tokens_per_second is not tokens / seconds"),
    (
        ("speed", 1),
        {"what": "x", "tokens": 0, "seconds": 0.0, "tokens_per_second": 0.0, "note": ""},  # no clock: no rate
        "speed[1].tokens_per_second is not tokens / seconds",
    ),
    (("passed",), True, "passed is true, which its law tests and gating compare rows do not give"),
    (("latency",), {"predicted": 1.0, "measured": 1.0}, "latency is not the predicted"),
    (("latency",), [1.0, 1.0, 0.1], "latency is not the predicted"),
    (("latency", "error"), True, "latency is not the predicted"),
]


def _passing_validation():
    """The validation data with every law test deciding as it should and every gating row holding."""
    data = _validation_data()
    data["laws"][1] |= {"refused": False, "ok": True, "first": data["laws"][0]["first"]}
    data["compare"][3]["holds"] = True
    data["passed"] = True
    return data


def test_the_verdict_shown_is_the_one_its_rows_give(tmp_path):
    """``passed`` must be what ``speculab.validate.verdict`` gives its rows: a passing file reads "passed", and each
    single thing that fails it (a law test decided wrong, a gating row beyond 5 s.e., a gating bound that fails) makes
    a file still saying ``passed: true`` refused; a model check (not gating) beyond 5 s.e. does not."""
    path = tmp_path / "validation.json"
    data = _passing_validation()
    path.write_text(_signed(data))
    assert "<b>passed</b>" in build_report(tmp_path).read_text()
    data["compare"][1]["z"] = -7.0  # the model check
    path.write_text(_signed(data))
    assert "<b>passed</b>" in build_report(tmp_path).read_text()
    for where, change in [
        ("laws", {"refused": True, "ok": False, "first": [float("inf"), 6, 0.0]}),
        ("compare", {"z": 5.0}),
        ("compare", {"z": -5.0}),
        ("compare", {"holds": False}),
    ]:
        bad = _passing_validation()
        bad[where][0 if where == "laws" else (0 if "z" in change else 2)] |= change
        path.write_text(_signed(bad))
        with pytest.raises(ValueError, match="passed is true, which its law tests and gating compare rows do not"):
            build_report(tmp_path)
        bad["passed"] = False
        path.write_text(_signed(bad))
        assert "<b>FAILED</b>" in build_report(tmp_path).read_text()
    data = _passing_validation() | {"passed": False}
    path.write_text(_signed(data))
    with pytest.raises(ValueError, match="passed is false, which"):
        build_report(tmp_path)


@pytest.mark.parametrize("changes", _VALID_VARIANTS.values(), ids=list(_VALID_VARIANTS))
def test_validation_json_of_each_valid_form_is_reported(changes, tmp_path):
    (tmp_path / "validation.json").write_text(_signed(_corrupt(*changes)))
    assert "validation: the real-model backend on a device" in build_report(tmp_path).read_text()


@pytest.mark.parametrize(
    "path, value, problem", _INVALID, ids=[f"{'.'.join(map(str, p))}={v!r}" for p, v, _ in _INVALID]
)
def test_validation_json_with_a_field_of_another_type_is_refused_naming_it(path, value, problem, tmp_path):
    """Each field of ``validation.json`` is checked for what ``Validation.to_dict`` writes (a bool is not a number,
    a count is an int, the G-test triples have three numbers): a wrong one is refused, naming the file and field."""
    data = _corrupt(path, value) if path else value
    (tmp_path / "validation.json").write_text(_signed(data))
    with pytest.raises(ValueError) as info:
        build_report(tmp_path)
    message = str(info.value)
    assert message.startswith(f"{tmp_path / 'validation.json'} is not what `speculab validate --out` writes (")
    assert problem in message and message.endswith("); run it again")


def test_a_validation_as_validate_writes_it_is_reported(tmp_path):
    """``Validation.to_json`` signs the file ``report`` shows (numpy numbers and tuples included)."""
    data = _validation_data()
    report = Validation(
        data["settings"],
        laws=[LawRow(**{k: v for k, v in r.items() if k != "ok"}) for r in data["laws"]],
        compare=data["compare"],
        speed=[SpeedRow(r["what"], r["tokens"], np.float64(r["seconds"]), r["note"]) for r in data["speed"]],
        latency={k: np.float64(v) for k, v in data["latency"].items()},
    )
    (tmp_path / "validation.json").write_text(report.to_json())
    assert "H200" in build_report(tmp_path).read_text()


def _edited_g(data):
    """The first law's G statistic doubled, its p-value recomputed to match: consistent, but not what was measured."""
    from scipy.stats import chi2

    G, df, _ = data["laws"][0]["first"]
    data["laws"][0]["first"] = [2 * G, df, float(chi2.sf(2 * G, df))]


def _edited_device(data):
    data["settings"]["device_name"] = "NVIDIA B200"


def _no_digest(data):
    del data["digest"]


@pytest.mark.parametrize("edit", [_edited_g, _edited_device, _no_digest], ids=lambda f: f.__name__)
def test_a_validation_edited_after_it_was_written_is_refused(edit, tmp_path):
    """An edit that keeps every value one a validation could give (a device's name, a G statistic with its own
    p-value) is caught by the file's digest unless the editor signs it again (what no unkeyed digest can catch)."""
    path = tmp_path / "validation.json"
    data = json.loads(_signed(_validation_data()))
    edit(data)
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="its digest does not match its content: edited since `speculab validate`"):
        build_report(tmp_path)
    if edit is not _no_digest:  # signed again: consistent, so shown
        path.write_text(_signed({k: v for k, v in data.items() if k != "digest"}))
        build_report(tmp_path)


@pytest.mark.parametrize("device, name", [("cpu", "H200"), ("cuda:0", "cpu"), ("mps", "Apple M2")])
def test_a_device_name_that_is_not_the_devices_is_refused(device, name, tmp_path):
    """validate names a CUDA device by ``torch.cuda.get_device_name`` and any other as ``cpu``: a signed file whose
    name does not fit its device is refused."""
    data = _validation_data()
    data["settings"] |= {"device": device, "device_name": name}
    (tmp_path / "validation.json").write_text(_signed(data))
    with pytest.raises(ValueError, match="settings.device_name is not the device's"):
        build_report(tmp_path)


#: A field of provenance.json as it would read if edited or written by another tool, and what the report says.
_PROVENANCE_FIELDS = [
    (("figures", "yin-fig3", "seconds"), "1.5", "figures['yin-fig3'].seconds is '1.5', not a number of seconds"),
    (("figures", "yin-fig3", "seconds"), -1, "figures['yin-fig3'].seconds is -1, not a number of seconds >= 0"),
    (("figures", "yin-fig3", "seconds"), True, "figures['yin-fig3'].seconds is True, not a number"),
    (("all", "wall_seconds"), "600", "all.wall_seconds is '600', not a number of seconds >= 0"),
    (("all", "environment", "machine", "memory_bytes"), "3", "machine.memory_bytes is '3', not a whole number"),
    (("all", "environment", "machine", "cpus"), "2", "all.environment.machine.cpus is '2', not a whole number"),
    (("all", "environment", "machine", "cpus"), 2.5, "all.environment.machine.cpus is 2.5, not a whole number"),
    (("all", "environment", "machine", "torch_threads"), "1", "machine.torch_threads is '1', not a whole number"),
    (("figures", "yin-fig3", "environment", "git", "commit"), 12, "environment.git is {'commit': 12"),
    (("figures", "yin-fig3", "environment", "git", "modified"), "no", "'modified': 'no'}, not null or"),
    (("figures", "yin-fig3", "environment", "python"), 3.11, "environment.python is 3.11, not a string"),
    (("figures", "yin-fig3", "environment", "libraries"), [], "environment.libraries is [], not versions"),
    (("figures", "yin-fig3", "environment", "machine"), 3, "environment.machine is 3, not a record"),
    (("figures", "yin-fig3", "environment"), "x", "figures['yin-fig3'].environment is 'x', not a record"),
    (("figures", "yin-fig3", "parameters"), "x", "figures['yin-fig3'].parameters is 'x', not a record"),
    (("figures", "yin-fig3", "started"), 5, "figures['yin-fig3'].started is 5, not a string"),
    (("figures", "yin-fig3", "status"), "done", "figures['yin-fig3'].status is 'done', not 'ok', 'skipped' or"),
    (("all", "skipped"), ["yin-fig2a"], "all.skipped is ['yin-fig2a'], not a record of figure names and reasons"),
    (("all", "ran"), "yin-fig3", "all.ran is 'yin-fig3', not a list of figure names"),
]


@pytest.mark.parametrize(
    "path, value, problem", _PROVENANCE_FIELDS, ids=[f"{'.'.join(p)}={v!r}" for p, v, _ in _PROVENANCE_FIELDS]
)
def test_provenance_json_with_a_field_of_another_type_is_one_line_naming_it(
    results, tmp_path, capsys, path, value, problem
):
    """Every field of ``provenance.json`` the report shows or a resumed run compares is checked for what the runner
    writes — a number written as a string, a status no run gives, an environment that is not a record — and a
    wrong one is one line naming the file and the field, exit 2 (it was a format error, a TypeError or an
    AttributeError, or the string was shown as if measured)."""
    folder = _copy(results, tmp_path / "r")
    data = runner.read_provenance(folder)
    record = data
    for key in path[:-1]:
        if record[key] is None:  # outside a git checkout the runner records no git: give the test one to spoil
            record[key] = {"commit": "0" * 40, "modified": False}
        record = record[key]
    record[path[-1]] = value
    _write_provenance(folder, data)
    assert main(["report", "--out", str(folder)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"speculab: error: {folder / runner.PROVENANCE}: ") and err.count("\n") == 1, err
    assert problem in err and "(remove or repair the file" in err
    assert not (folder / REPORT).exists()


def test_a_single_figure_has_its_overview_row(results, tmp_path):
    """The overview table is left out only when it has no row: one figure shown gets its row."""
    folder = _copy(results, tmp_path / "r")
    data = runner.read_provenance(folder)
    del data["figures"]["sprinter-fig6"]
    data.pop("all", None)
    _write_provenance(folder, data)
    (folder / "sprinter_fig6.json").unlink()
    page = build_report(folder).read_text()
    overview = page.split('<table class="overview">')[1].split("</table>")[0]
    assert re.findall(r"<tr><td>([\w-]+)</td>", overview) == ["yin-fig3"]


def test_every_png_a_figure_wrote_is_embedded(results, tmp_path):
    """A figure whose run wrote several PNGs (recorded with their digests) shows each of them, in order."""
    folder = _copy(results, tmp_path / "r")
    extra = folder / "yin_fig3_panel.png"
    extra.write_bytes((folder / "sprinter_fig6.png").read_bytes())
    data = runner.read_provenance(folder)
    entry = data["figures"]["yin-fig3"]
    entry["files"].append(extra.name)
    entry["sha256"][extra.name] = runner.sha256(extra)
    _write_provenance(folder, data)
    section = build_report(folder).read_text().split('<section id="yin-fig3">')[1].split("</section>")[0]
    assert re.findall(r'<img alt="([^"]+)"', section) == ["yin_fig3.png", "yin_fig3_panel.png"]


def _plan_data():
    """A plan.json's content shaped as ``speculab plan`` writes it, every field of the type it writes (three
    candidates, two confirmations, no engine rows; the values made up, but making sense together: ranked fastest
    first, autoregressive decoding one token a round and a call, each confirmation predicting its ranked row, its
    error predicted / measured − 1 and its speed-ups over autoregressive decoding's rates, the verdict theirs)."""
    sd = {"method": "SD(K=2)", "K": 2, "nodes": 2, "tokens_per_round": 1.8, "tokens_per_call": 1.8, "bias": 0.0}
    sd |= {"tokens_per_second": 900.0, "tokens_per_round_se": 0.05, "tokens_per_second_se": None, "allowed": True}
    ar = sd | {"method": "Autoregressive()", "K": 0, "nodes": 0, "tokens_per_round": 1.0, "tokens_per_call": 1.0}
    ar |= {"tokens_per_second": 500.0, "tokens_per_round_se": 0.0}
    slower = sd | {"method": "SD(K=1)", "K": 1, "nodes": 1, "tokens_per_second": 450.0}
    sd_run = {"method": "SD(K=2)", "predicted": 900.0, "measured": 800.0, "error": 0.125}
    sd_run |= {"predicted_speedup": 1.8, "measured_speedup": 2.0, "predicted_per_call": 1.8}
    sd_run |= {"measured_per_call": 1.7, "predicted_se": None, "measured_se": 0.1, "per_call_z": -1.0}
    ar_run = sd_run | {"method": "Autoregressive()", "predicted": 500.0, "measured": 400.0, "error": 0.25}
    ar_run |= {"predicted_speedup": 1.0, "measured_speedup": 1.0, "predicted_per_call": 1.0}
    ar_run |= {"measured_per_call": 1.0, "per_call_z": None}
    settings = {"pair": "tiny", "max_new_tokens": 8, "contexts": 4, "bias_budget": 0.0}
    verdict = "the predicted best, SD(K=2), was the measured best"
    return {
        "settings": settings,
        "verdict": verdict,
        "ranked": [sd, ar, slower],
        "confirmed": [sd_run, ar_run],
        "engine": [],
    }


def _edited(data: dict, key: str, i: int, **fields) -> dict:
    """``data`` with row ``i`` of its ``key`` list given ``fields`` (a copy)."""
    rows = [dict(row) for row in data[key]]
    rows[i] |= fields
    return data | {key: rows}


def test_plan_json_is_checked_field_by_field():
    """What ``plan_problem`` refuses, one field at a time and fields against each other, beside what it takes (the
    bounds of what a plan writes, and what its values make together: found by reviews, each edit here was shown as
    measured once signed again)."""
    from speculab.repro.report import plan_problem

    data = _plan_data()
    sd, ar, slower = data["ranked"]
    assert plan_problem(data) is None
    assert plan_problem(_edited(data, "confirmed", 0, per_call_z=None)) is None
    exact = data["confirmed"][0]["predicted_per_call"]  # measured as predicted: a z of 0 has the sign of a gap of 0
    assert plan_problem(_edited(data, "confirmed", 0, measured_per_call=exact, per_call_z=0.0)) is None
    assert (
        plan_problem(_edited(data, "confirmed", 0, measured_per_call=exact + 0.1, per_call_z=0.5)) is None
    )  # a z below 1
    assert plan_problem(_edited(data, "ranked", 2, tokens_per_second=1e-9)) is None
    # a full round's tokens are not bounded by the run (a plan of 2-token runs ranks SD(K=4) at 3.5 a round), nor
    # are the sums' round-off past a bound (review: a genuine plan of short runs was refused)
    short = data | {"settings": data["settings"] | {"max_new_tokens": 2}}
    assert plan_problem(_edited(short, "ranked", 0, tokens_per_round=3.0 * (1 + 1e-13))) is None
    lossy = _edited(data, "ranked", 2, bias=0.01, allowed=False)
    assert plan_problem(lossy) is None
    alone = _edited(data, "confirmed", 0, measured=350.0, error=900 / 350 - 1, measured_speedup=350 / 400)
    below = "the predicted best, SD(K=2), measured 12.5% below the measured best, Autoregressive() (beyond two "
    assert plan_problem(alone | {"verdict": below + "standard errors of the timing noise)"}) is None
    for bad, problem in [
        ([], "no settings"),
        ({"settings": 1}, "no settings"),
        (data | {"ranked": []}, "no ranked candidates"),
        (data | {"ranked": "SD"}, "no ranked candidates"),
        (_edited(data, "ranked", 0, tokens_per_second=0.0), "ranked[0].tokens_per_second is 0.0, a value no run"),
        (_edited(data, "ranked", 0, bias=1.5), "ranked[0].bias is 1.5, a value no run writes"),
        (data | {"ranked": [{k: v for k, v in sd.items() if k != "K"}, ar, slower]}, "ranked[0].K is missing"),
        (_edited(data, "confirmed", 0, per_call_z=float("inf")), "confirmed[0].per_call_z is Infinity, a value no"),
        (_edited(data, "confirmed", 0, per_call_z="1"), 'confirmed[0].per_call_z is "1", a value no run writes'),
        # fields against each other
        (data | {"ranked": [ar, sd, slower]}, "ranked[1] is faster than ranked[0]: candidates are ranked fastest"),
        (data | {"ranked": [sd, ar, slower, slower]}, 'ranked[3].method "SD(K=1)" is listed twice'),
        (data | {"confirmed": data["confirmed"] * 2}, 'confirmed[2].method "SD(K=2)" is listed twice'),
        (_edited(lossy, "ranked", 2, allowed=True), "ranked[2].allowed is true for a bias of 0.01 and a budget of 0"),
        (_edited(data, "ranked", 0, allowed=False), "ranked[0].allowed is false for a bias of 0 and a budget of 0"),
        (_edited(data, "ranked", 1, tokens_per_call=3.0), "ranked[1].tokens_per_call is 3.0, more than nodes + 1 = 1"),
        (
            _edited(data, "ranked", 0, tokens_per_round=3.5),
            "ranked[0].tokens_per_round is 3.5, more than nodes + 1 = 3",
        ),
        (_edited(data, "ranked", 2, nodes=-1), "ranked[2].nodes is -1, a value no run writes"),
        (
            data | {"settings": data["settings"] | {"max_new_tokens": 1}},
            "ranked[0].tokens_per_call is 1.8, more than max_",
        ),
        (
            _edited(data, "confirmed", 0, measured_per_call=3.5),
            "confirmed[0].measured_per_call is 3.5, more than nodes + 1 = 3 (its ranked row's)",
        ),
        (
            _edited(data, "confirmed", 1, measured_per_call=1.5),
            "confirmed[1].measured_per_call is 1.5, more than nodes + 1 = 1",
        ),
        (  # a call makes no more tokens than the run asks for, whatever a full round makes
            _edited(short, "confirmed", 0, measured_per_call=2.5),
            "confirmed[0].measured_per_call is 2.5, more than max_new_tokens = 2 (its ranked row's)",
        ),
        (  # where the two bounds are equal, the round's is named
            _edited(
                data | {"settings": data["settings"] | {"max_new_tokens": 3}}, "confirmed", 0, measured_per_call=3.5
            ),
            "confirmed[0].measured_per_call is 3.5, more than nodes + 1 = 3 (its ranked row's)",
        ),
        (data | {"confirmed": data["confirmed"][:1]}, "confirmed: no autoregressive decoding, the speed-ups' ref"),
        (_edited(data, "confirmed", 0, method="SD(K=9)"), 'confirmed[0].method "SD(K=9)" is not a ranked candidate'),
        (_edited(data, "confirmed", 0, predicted=50.0, error=50 / 800 - 1), "confirmed[0]'s predictions are not its"),
        (_edited(data, "confirmed", 0, predicted_per_call=2.0), "confirmed[0]'s predictions are not its ranked row's"),
        (_edited(data, "confirmed", 0, error=-0.111), "confirmed[0].error is -0.111, not predicted / measured - 1"),
        (_edited(data, "confirmed", 0, predicted_speedup=3.0), "confirmed[0].predicted_speedup is 3.0, not predicted"),
        (
            _edited(data, "confirmed", 0, measured=700.0, error=900 / 700 - 1),
            "confirmed[0].measured_speedup is 2.0, not measured over autoregressive decoding's (1.75)",
        ),
        (_edited(data, "confirmed", 0, per_call_z=4.0), "confirmed[0].per_call_z is 4.0 where measured - predicted"),
        (_edited(data, "confirmed", 1, per_call_z=7.5), "confirmed[1].per_call_z is 7.5 where measured - predicted"),
        (data | {"verdict": "nothing to compare"}, 'verdict "nothing to compare" is not its confirmations\' ("the'),
        (alone, 'verdict "the predicted best, SD(K=2), was the measured best" is not its confirmations\''),
    ]:
        assert plan_problem(bad).startswith(problem), (plan_problem(bad), problem)


def test_the_plan_section_ranks_the_ten_best_allowed_and_gives_each_confirmation_its_error(tmp_path):
    """Ranks from 1, the ten best allowed candidates only (one not allowed is left out); a confirmation's measured
    rate with its standard error where it has one."""
    from speculab.repro.report import _plan_section

    data = _plan_data()
    row = data["ranked"][0]
    data["ranked"] = [row | {"method": f"SD(K={k})", "K": k} for k in range(1, 13)]
    data["ranked"][0]["allowed"] = False
    data["confirmed"].append(data["confirmed"][0] | {"method": "SD(K=3)", "measured_se": None})
    page = _plan_section(tmp_path, data)
    ranks = re.findall(r"<tr><td>(\d+)</td><td>(SD\(K=\d+\))</td>", page)
    assert ranks == [(str(i), f"SD(K={i + 1})") for i in range(1, 11)]
    assert "<td>SD(K=2)</td><td>900.0</td><td>800.0 ± 0.1</td>" in page
    assert "<td>SD(K=3)</td><td>900.0</td><td>800.0</td>" in page
