"""results/index.html: the zoo's results as one self-contained page (no server, no CDN; the figures are embedded),
written by benchmarks/leaderboard.py beside ZOO.md.

The page holds the headline table (one table per dataset family; a click on a column header sorts the methods by
it, a second click reverses), the two figures, and per cell the runs behind it (seed, value, protocol, commit, run
directory, linked relative to the page so that it opens in a checkout that has the run).
"""
from __future__ import annotations

import base64
import html
from pathlib import Path

import pandas as pd

from headline import DIRTY, cell_text, family_splits, paper_text

# Sorting: each sortable cell carries its number in data-value (empty cells sort last either way).
SCRIPT = """
document.querySelectorAll("table.sortable th").forEach(function (th) {
  th.addEventListener("click", function () {
    var table = th.closest("table"), body = table.tBodies[0], column = th.cellIndex;
    var descending = th.dataset.order !== "descending";
    table.querySelectorAll("th").forEach(function (other) { delete other.dataset.order; });
    th.dataset.order = descending ? "descending" : "ascending";
    var key = function (row) {
      var cell = row.cells[column], value = cell.dataset.value;
      return value === undefined ? cell.textContent.trim() : (value === "" ? null : parseFloat(value));
    };
    Array.from(body.rows).sort(function (a, b) {
      var x = key(a), y = key(b);
      if (x === null || y === null) { return (x === null) - (y === null); }
      var order = typeof x === "number" ? x - y : String(x).localeCompare(String(y));
      return descending ? -order : order;
    }).forEach(function (row) { body.appendChild(row); });
  });
});
// a link to a cell's runs opens the (closed) lists it sits in
function openTarget() {
  for (var el = document.getElementById(location.hash.slice(1)); el; el = el.parentElement) {
    if (el.tagName === "DETAILS") { el.open = true; }
  }
}
window.addEventListener("hashchange", openTarget);
openTarget();
document.body.dataset.sortable = "ready";
"""

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1650px; padding: 0 1em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 14px; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; vertical-align: top; }
th { background: #f2f2f2; cursor: pointer; } th:first-child, td:first-child { text-align: left; }
th[data-order=descending]::after { content: " \\25BC"; } th[data-order=ascending]::after { content: " \\25B2"; }
td .paper { color: #666; font-style: italic; font-size: 12px; } a { color: #1a5fb4; text-decoration: none; }
img { max-width: 100%; } details { margin: 0.2em 0 0.2em 1em; } details table { font-size: 12px; }
"""


def _png(path: Path) -> str:
    return f'<img alt="{html.escape(path.stem)}" src="data:image/png;base64,{base64.b64encode(path.read_bytes()).decode()}">'


def _run_link(run_dir: str, page_dir: Path, root: Path) -> str:
    """A run directory as a link relative to the page (rows hold it relative to the repository, or absolute)."""
    if not run_dir:
        return ""
    target = Path(run_dir) if Path(run_dir).is_absolute() else root / run_dir
    try:
        href = Path(*[".."] * len(page_dir.resolve().relative_to(root.resolve()).parts), target.relative_to(root))
    except ValueError:  # the page or the run outside the repository
        href = target.as_uri() if target.is_absolute() else target
    return f'<a href="{html.escape(str(href))}/">{html.escape(run_dir)}</a>'


def to_html(table: pd.DataFrame, seeds: pd.DataFrame, figures: list[Path], page_dir: Path, root: Path) -> str:
    """The page; ``seeds`` is headline.seed_values' table (one row per run), ``figures`` PNG files to embed."""
    esc = html.escape
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             "<title>structured-decoders zoo: results</title>", f"<style>{STYLE}</style></head><body>",
             "<h1>structured-decoders zoo: results</h1>",
             "<p>Test metric in percent, mean ± sample std over seeds (seeds in brackets): denotation accuracy where "
             "the dataset's programs execute, else exact match. Where a method ran under several protocols, the "
             "one with the best mean validation metric is shown. <i>paper</i>: the published number for the same "
             f"method and split (EM: the paper reports exact match only). {DIRTY}: includes a run from a working tree with uncommitted changes. Click a "
             "column header to sort; click a cell for its runs (listed under each table). Rebuilt by "
             "<code>python benchmarks/leaderboard.py</code> from <code>results/runs.csv</code>.</p>"]
    cell_id = 0
    for fam, splits in family_splits(table).items():
        part = table[table["split"].isin(splits)]
        parts += [f"<h2>{esc(fam)}</h2>", '<table class="sortable"><thead><tr><th>Method</th>'
                  + "".join(f"<th>{esc(s)}</th>" for s in splits) + "</tr></thead><tbody>"]
        details = []
        for label, rows in sorted(part.groupby("method_label"), key=lambda kv: kv[0]):
            cells = {}
            for _, r in rows.iterrows():
                cell_id += 1
                paper = f'<br><span class="paper">{paper_text(r)}</span>' if paper_text(r) else ""
                cells[r["split"]] = (f'<td data-value="{r["mean"]}"><a href="#cell{cell_id}">{esc(cell_text(r))}'
                                     f"</a>{paper}</td>")
                runs = seeds[(seeds["method_label"] == label) & (seeds["split"] == r["split"])
                             & (seeds["protocol"] == r["protocol"])].sort_values("seed")
                details.append(
                    f'<details id="cell{cell_id}"><summary>{esc(label)} on {esc(r["split"])}: {esc(cell_text(r))}, '
                    f'{esc(r["metric"])}, protocol {esc(r["protocol"] or "(none)")}</summary><table><tr><th>Seed'
                    "</th><th>Test %</th><th>Commit</th><th>Time</th><th>Run directory</th></tr>"
                    + "".join(f"<tr><td>{esc(str(s['seed']))}</td><td>{s['value']:.1f}</td>"
                              f"<td>{esc(str(s['git_commit']))}</td><td>{esc(str(s['time']))}</td>"
                              f"<td>{_run_link(str(s['run_dir']), page_dir, root)}</td></tr>"
                              for _, s in runs.iterrows()) + "</table></details>")
            parts.append(f"<tr><td>{esc(label)}</td>"
                         + "".join(cells.get(s, '<td data-value=""></td>') for s in splits) + "</tr>")
        parts += ["</tbody></table>", f"<details><summary>The runs behind each cell ({len(details)})</summary>",
                  *details, "</details>"]
    parts += ["<h2>Figures</h2>", *(_png(f) for f in figures), f"<script>{SCRIPT}</script>", "</body></html>"]
    return "\n".join(parts)
