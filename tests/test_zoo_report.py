"""The headline table (benchmarks/headline.py) and the HTML report (benchmarks/html_report.py), both written by
benchmarks/leaderboard.py, on a synthetic runs.csv and published.csv whose numbers are checked by hand:

- seq2seq/baseline/bart on geo_sql_template: protocol ``grid`` seeds 1-3 at denotation 0.5/0.6/0.7 (mean 60.0,
  sample std 10.0), validation 0.40; protocol ``short`` seed 1 at 0.9 with validation 0.20. The cell shows ``grid``
  (better validation) although ``short`` tested higher. The published table has 33.7 exact match for it only.
- seq2seq/rir/bart on geo_sql_template, seed 1 at 0.25 from a dirty tree, with a stage-1 metric of 0.99.
- seq2seq/rir-train20000-eval2000 on cfq_mcd1: a subsample column, no published number though cfq_mcd1 has one.
- a smoke run (its row's smoke column True) at 1.0: left out.
- seq2seq/baseline on geo_sql_template with the superseded t5-mini-scratch backbone: left out (bart measured it);
  seq2seq/rir/t5-mini-scratch on scan_length at 0.05 stays (nothing replaced it there).
- a run of the GGD authors' protocol, which reads the gold query's variables: left out.
"""
import csv
import html.parser
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
_spec = importlib.util.spec_from_file_location("leaderboard", ROOT / "benchmarks" / "leaderboard.py")
leaderboard = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(leaderboard)
import headline  # noqa: E402

HEADER = ["time", "git_commit", "model", "variant", "backbone", "data", "seed", "test_exact_match", "test_denotation",
          "test_stage1_exact_match", "best_val", "protocol", "run_dir", "smoke"]
PUBLISHED = [["model", "variant", "backbone", "pretrained", "params", "data", "metric", "value", "source"],
             ["seq2seq", "baseline", "t5-small", "no", "60M", "geo_sql_template", "exact_match", "33.7", "paper t4"],
             ["seq2seq", "rir", "t5-small", "no", "60M", "cfq_mcd1", "exact_match", "22.6", "paper t4"]]


def run(variant, data, seed, em, den, val, protocol, commit="abc", stage1="", time="2026-01-01T00:00:00", smoke="",
        backbone="bart-mini-scratch"):
    return [time, commit, "seq2seq", variant, backbone, data, seed, em, den, stage1, val, protocol,
            f"runs/seq2seq-{variant}/{data}/seed{seed}", smoke]


@pytest.fixture
def built(tmp_path):
    rows = [run("baseline", "geo_sql_template", s, "0.1", d, "0.40", "grid") for s, d in ((1, "0.5"), (2, "0.6"),
                                                                                       (3, "0.7"))]
    rows += [run("baseline", "geo_sql_template", 1, "0.8", "0.9", "0.20", "short", time="2026-02-01T00:00:00"),
             run("rir", "geo_sql_template", 1, "0.2", "0.25", "0.3", "grid", commit="def-dirty", stage1="0.99"),
             run("rir-train20000-eval2000", "cfq_mcd1", 1, "0.125", "", "0.1", "grid"),
             run("baseline", "scan_length", 1, "1.0", "", "1.0", "grid", smoke="True"),
             run("baseline", "geo_sql_template", 1, "0.9", "0.95", "0.9", "old", backbone="t5-mini-scratch"),
             run("rir", "scan_length", 1, "0.05", "", "0.1", "old", backbone="t5-mini-scratch"),
             run("rir-heldout100", "geo_sql_template", 1, "0.3", "0.3", "0.3", "grid"),  # a settings' choice
             run("gold_variables", "cfq_mcd1", 1, "0.96", "", "0.97", "ggd_authors_emr_cpu")]  # reads gold variables
    for name, table in (("runs.csv", [HEADER, *rows]), ("published.csv", PUBLISHED)):
        with open(tmp_path / name, "w", newline="") as f:
            csv.writer(f).writerows(table)
    out = tmp_path / "results"
    leaderboard.build_leaderboard(tmp_path / "runs.csv", tmp_path / "published.csv", out)
    return out


def cell(table, method, split):
    sel = table[(table["method"] == method) & (table["split"] == split)]
    assert len(sel) == 1, sel
    return sel.iloc[0]


def test_headline_cells_chosen_on_validation_with_seed_spread_and_paper(built):
    table = pd.read_csv(built / "zoo.csv", keep_default_na=False, na_values=[""])
    base = cell(table, "baseline", "geo_sql_template")
    assert (base["protocol"], base["metric"], base["mean"], base["std"], base["seeds"]) == (
        "grid", "denotation", 60.0, 10.0, 3)
    assert base["other_protocols"] == "short" and not base["dirty"]
    assert (base["published"], base["published_metric"], base["published_source"]) == (
        33.7, "exact_match", "paper t4 (t5-small, from scratch)")
    rir = cell(table, "rir", "geo_sql_template")
    assert (rir["mean"], rir["seeds"], rir["dirty"], rir["method_label"]) == (
        25.0, 1, True, "seq2seq · rir (zoo IRs) · bart-mini-scratch")
    assert pd.isna(rir["std"]) and pd.isna(rir["published"])
    sub = cell(table, "rir", "cfq_mcd1 · train20000-eval2000")
    assert (sub["metric"], sub["mean"], sub["subsample"]) == ("exact_match", 12.5, "train20000-eval2000")
    assert pd.isna(sub["published"])  # a subsample is not the benchmark's split
    old = cell(table, "rir", "scan_length")
    assert (old["backbone"], old["mean"]) == ("t5-mini-scratch", 5.0)
    assert len(table) == 4  # the smoke, held-out and gold-informed runs, the replaced backbone's cell and stage 1
    # stay out
    assert set(table["metric"]) == {"denotation", "exact_match"}


def test_headline_markdown(built):
    md = (built / "ZOO.md").read_text()
    assert "## Text-to-SQL" in md and "## CFQ" in md and "## SCAN\n" in md and "t5-mini-scratch | 5.0 (1) |" in md
    assert "| Method | geo_sql_template |" in md
    assert "| seq2seq · baseline · bart-mini-scratch | 60.0 ± 10.0 (3)<br>*paper 33.7 EM* |" in md
    assert "| seq2seq · rir (zoo IRs) · bart-mini-scratch | 25.0 (1)† |" in md
    assert "| Method | cfq_mcd1<br>train20000-eval2000 |" in md


def test_figures_are_readable_pngs(built):
    from PIL import Image

    for name in ("zoo.png", "zoo_heatmap.png"):
        with Image.open(built / name) as image:
            assert image.format == "PNG" and image.width <= 1600, (name, image.size)


class _Tables(html.parser.HTMLParser):
    """The text of every table cell, the images' sources, and any address that would need a network."""

    def __init__(self):
        super().__init__()
        self.cells, self.images, self.remote, self.inside = [], [], [], False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.remote += [v for k, v in attrs.items() if k in ("src", "href") and v and v.startswith(("http", "//"))]
        if tag == "img":
            self.images.append(attrs["src"])
        if tag in ("td", "th"):
            self.cells.append("")
            self.inside = True

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self.cells[-1], self.inside = self.cells[-1].strip(), False

    def handle_data(self, data):
        if self.inside:
            self.cells[-1] += data


def test_html_report_is_self_contained_and_holds_the_table(built):
    page = _Tables()
    page.feed((built / "index.html").read_text())
    assert "seq2seq · baseline · bart-mini-scratch" in page.cells and "60.0 ± 10.0 (3)paper 33.7 EM" in page.cells
    assert len(page.images) == 2 and all(src.startswith("data:image/png;base64,") for src in page.images)
    assert page.remote == []
    text = (built / "index.html").read_text()
    assert 'id="cell1"' in text and "runs/seq2seq-baseline/geo_sql_template/seed3" in text


def test_readme_block_is_replaced_and_a_readme_without_it_is_an_error(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{headline.README_START}\nold\n{headline.README_END}\nrest\n")
    headline.update_readme(readme, "# The zoo's headline table\n\nnote\n\n## SCAN\n\n| a |\n")
    assert readme.read_text() == f"intro\n{headline.README_START}\n### SCAN\n\n| a |\n{headline.README_END}\nrest\n"
    readme.write_text("no markers\n")
    with pytest.raises(ValueError, match="README.md: no <!-- zoo.md: start -->"):
        headline.update_readme(readme, "# t\n\nx\n")


BROWSER = next((b for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)


@pytest.mark.skipif(BROWSER is None, reason="no headless browser (chromium) installed: apt-get install chromium")
def test_the_table_sorts_in_a_real_browser(built, tmp_path):
    """Chromium loads the page and runs its script; a click on geo_sql_template's header puts the higher mean first,
    a second click the lower."""
    table = ("Array.from(document.querySelectorAll('table.sortable'))"
             ".find(function (t) { return t.tHead.textContent.includes('geo_sql_template'); })")

    def dom_after(clicks):
        page = tmp_path / "clicked.html"
        click = f"{table}.querySelectorAll('th')[1].click();" * clicks
        page.write_text((built / "index.html").read_text().replace("</body>", f"<script>{click}</script></body>"))
        dom = subprocess.run([BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", page.as_uri()],
                             capture_output=True, text=True, timeout=120).stdout
        assert 'data-sortable="ready"' in dom
        return next(part for part in dom.split('class="sortable"')[1:] if "geo_sql_template</th>" in part)

    once = dom_after(1)
    assert 'data-order="descending"' in once
    assert once.index("seq2seq · baseline") < once.index("seq2seq · rir")
    twice = dom_after(2)
    assert 'data-order="ascending"' in twice
    assert twice.index("seq2seq · rir") < twice.index("seq2seq · baseline")
