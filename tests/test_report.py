"""``speculab report``: the HTML page, and what a real headless Chromium shows of it.

The browser test renders the report in Debian's Chromium (``.ci/run`` installs it; elsewhere the test
skips without it) and reads the screenshot: every embedded figure must be found in it pixel for pixel,
and every table's header band must be there with its rows. Each check is shown to fail on a page that
lacks what it looks for.
"""

import html
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
    import json

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
    import json

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
    assert "must be a file in an existing folder" in capsys.readouterr().err


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
    import json

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
    import json

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
    import json

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
