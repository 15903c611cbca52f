"""Figures and tables a journal accepts (issue 39): accuracy against communication drawn by default beside accuracy
against iterations, TrueType fonts in every PDF, a method's variants told apart, runs that differ only in their seed
aggregated (mean ± std, k/n), comparisons across datasets, models or budgets marked, personal and global accuracy on
separate axes, each layer's interval over the run, log and integer axes, LaTeX captions and wide tables.

Runs are real (digits, a small MLP, 20 iterations); the numbers are checked against the runs' own CSV files."""

import csv
import json
import math
import re
import shutil
import statistics
from pathlib import Path

import pytest
from matplotlib.colors import to_hex

from fedcli.cli.main import main
from fedcli.reports import style
from fedcli.reports.figures import build
from fedcli.reports.products import FigureDef, Panel
from fedcli.reports.single import comparison_table, curves_figure, load_run
from fedcli.reports.tables import render
from simkit import cli
from simkit import md_table as md_rows

ARGS = [
    "--dataset",
    "digits",
    "--model",
    "mlp",
    "--mlp-hidden",
    "16",
    "--clients",
    "4",
    "--iterations",
    "20",
    "--eval-every",
    "10",
    "--threads",
    "1",
    "--quiet",
]
RUNS = {
    "avg/s0": ["--algo", "fedavg", "--tau", "2", "--seed", "0"],
    "avg/s1": ["--algo", "fedavg", "--tau", "2", "--seed", "1"],
    "lama/s0": ["--algo", "fedlama", "--tau", "2", "--phi", "2", "--seed", "0"],
    "lama/s1": ["--algo", "fedlama", "--tau", "2", "--phi", "2", "--seed", "1"],
    "avg4/s0": ["--algo", "fedavg", "--tau", "4", "--seed", "0"],
    "pers/s0": ["--algo", "fedavg-c", "--client-test-fraction", "0.25", "--active-ratio", "1"],
    "wide/s0": ["--algo", "fedavg", "--mlp-hidden", "200"],
}


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("paper")
    for name, extra in RUNS.items():
        assert main(["train", *ARGS, *extra, "--out", str(root / name)]) in (0, None)
    return root


def accs(run_dir: Path, col: str = "test_acc") -> list[float]:
    with open(run_dir / "metrics.csv", newline="") as f:
        return [float(r[col]) for r in csv.DictReader(f)]


def test_communication_figure_by_default_and_truetype_fonts(root, capsys, tmp_path):
    out = tmp_path / "fig"
    code, _, err = cli(["report", str(root / "lama/s0"), str(root / "avg/s0"), "--figures", str(out)], capsys)
    assert code == 0, err
    names = {p.name for p in out.iterdir()}
    assert {"curves.png", "curves.pdf", "curves-params.png", "curves-params.pdf", "intervals.png"} <= names
    assert "against local iterations" in (out / "curves.txt").read_text()
    assert "against communicated parameters" in (out / "curves-params.txt").read_text()
    pdfs = sorted(out.glob("*.pdf"))
    assert len(pdfs) >= 5
    for pdf in pdfs:  # matplotlib's default embeds Type 3 fonts, which IEEE PDF eXpress and ACM reject
        data = pdf.read_bytes()
        assert b"/Type3" not in data and b"/Type /Font" in data, pdf.name
        assert b"/FontFile2" in data, pdf.name  # the TrueType font program itself
    # --x bytes: the communication figure against bytes, the curves against iterations untouched beside it
    again = tmp_path / "bytes"  # one run (no per-layer interval figures to draw again): the curves are the point
    assert cli(["report", str(root / "avg/s0"), "--x", "bytes", "--figures", str(again)], capsys)[0] == 0
    assert {"curves.png", "curves-bytes.png"} <= {p.name for p in again.iterdir()}
    assert "curves-params.png" not in {p.name for p in again.iterdir()}
    # a periodic run (FedAvg) has no intervals or delta-lambda figure (test_report_runs' periodic case, in make test)
    assert sorted(p.stem for p in again.glob("*.png")) == ["curves", "curves-bytes", "layer-size", "layer-syncs"]


def test_variants_of_one_method_in_colours_dashes_and_marker_fills(root):
    a, b = load_run(root / "avg/s0"), load_run(root / "avg4/s0")
    looks = {s["label"]: s for s in style.styles([b, a])}
    one, two = looks["FedAvg (τ=2)"], looks["FedAvg (τ=4)"]
    assert one["color"] == a.method["style"][0]  # the first variant: the method's own colour
    assert to_hex(two["color"]) != to_hex(one["color"])  # the second: a shade of it
    assert (one["linestyle"], one["fillstyle"], one["marker"]) == ("-", "full", two["marker"])
    assert (two["linestyle"], two["fillstyle"]) == ("--", "none")
    # the last variant turns from the method's colour in CIELAB: FedAvg's hue-less dark grey (L* 33) gets a hue
    # (chroma 40 or as much as the gamut allows) and the lightness L* 60
    l1, c1, _ = style.lch(one["color"])
    l2, c2, _ = style.lch(two["color"])
    assert c1 < 1 and c2 > 20 and l2 == pytest.approx(60, abs=0.5)
    assert style.shade("#0072B2", 0, 3) == "#0072B2"
    assert len({style.shade("#0072B2", k, 4) for k in range(4)}) == 4


def test_seeds_of_ad_hoc_runs_are_one_row_with_mean_and_std(root, capsys):
    dirs = [str(root / n) for n in ("avg/s0", "avg/s1", "lama/s0", "lama/s1")]
    code, out, err = cli(["report", *dirs], capsys)
    assert code == 0, err
    rows = {r["Run"]: r for r in md_rows(out)}
    assert set(rows) == {"avg (seeds 0, 1)", "lama (seeds 0, 1)"}
    for name in ("avg", "lama"):
        finals = [100 * accs(root / f"{name}/s{s}")[-1] for s in (0, 1)]
        bests = [100 * max(accs(root / f"{name}/s{s}")) for s in (0, 1)]
        row = rows[f"{name} (seeds 0, 1)"]
        assert row["Final acc."] == f"{statistics.mean(finals):.2f} ± {statistics.stdev(finals):.2f}%"
        assert row["Best acc. (iteration)"] == f"{statistics.mean(bests):.2f} ± {statistics.stdev(bests):.2f}%"
        assert row["Status"] == "2/2 completed"
    assert "one row: mean ± std over their seeds" in out and "### 4 runs (2 experiments, seeds aggregated)" in out
    # in the figures, one line per experiment, its mean over the seeds
    fig, _ = curves_figure(
        [load_run(root / "avg/s0")],
        ["FedAvg"],
        "iterations",
        {"avg": {0: load_run(root / "avg/s0"), 1: load_run(root / "avg/s1")}},
    )
    (line,) = [ln for ln in fig.axes[0].get_lines() if ln.get_label() == "FedAvg"]
    want = [100 * (x + y) / 2 for x, y in zip(accs(root / "avg/s0"), accs(root / "avg/s1"))]
    assert list(line.get_ydata()) == pytest.approx(want)


def test_runs_of_other_data_or_budgets_are_marked_not_compared(root, tmp_path, capsys):
    other = tmp_path / "other"
    shutil.copytree(root / "avg4/s0", other)
    m = json.loads((other / "manifest.json").read_text())
    m["config"]["dataset"] = "mnist"
    (other / "manifest.json").write_text(json.dumps(m))
    code, out, err = cli(["report", str(root / "avg/s0"), str(root / "lama/s0"), str(other)], capsys)
    assert code == 0, err
    rows = {r["Run"]: r for r in md_rows(out)}
    assert rows["other"]["Comm. vs avg/s0 (params)"] == "— (not comparable)"
    assert rows["avg/s0"]["Comm. vs avg/s0 (params)"] == "100.00%"
    assert "Not one comparison: the runs differ in dataset: digits (" in out and "mnist (other)" in out
    assert "Not measured against avg/s0: other (dataset mnist, not digits)" in out
    assert "warning: runs of different datasets, models or budgets" in err and "not one comparison" in err
    code, _, err = cli(["report", str(root / "avg/s0"), str(other), "--figures", str(tmp_path / "f")], capsys)
    assert code == 0 and err.count("not one comparison") == 1  # said once, by the figures


def test_rounds_of_different_lengths_are_named(root, tmp_path):
    said = []
    from fedcli.reports.single import write_figures

    write_figures([load_run(root / "avg/s0"), load_run(root / "avg4/s0")], tmp_path / "f", x="rounds", warn=said.append)
    assert any(
        "rounds are not of one length here: 2 local iterations a round for FedAvg (τ=2); 4 local iterations a "
        "round for FedAvg (τ=4)" in s
        for s in said
    ), said
    assert "Note: rounds are not of one length" in (tmp_path / "f" / "curves.txt").read_text()


def test_personal_and_global_accuracy_on_separate_axes(root):
    plain, pers = load_run(root / "avg/s0"), load_run(root / "pers/s0")
    fig, caption = curves_figure([plain, pers], ["A", "B"], "iterations")
    by_axis = {ax.get_ylabel(): {ln.get_label() for ln in ax.get_lines()} for ax in fig.axes}
    assert by_axis["Test accuracy (%), global model"] == {"A", "B"}
    assert by_axis[style.Y_LABELS["personal_acc"]] == {"B"}
    (line,) = [ln for ax in fig.axes if ax.get_ylabel() == style.Y_LABELS["personal_acc"] for ln in ax.get_lines()]
    assert list(line.get_ydata()) == pytest.approx([100 * v for v in accs(root / "pers/s0", "personal_acc")])
    assert "personal accuracy (personalized runs only)" in caption


def test_intervals_figure_shows_each_layers_interval(root):
    run = load_run(root / "lama/s0")
    fig, caption = build(FigureDef("i", "intervals", panels=[Panel(runs=["x"])]), {"x": {0: run}})
    mesh = fig.axes[0].collections[0]
    grid = mesh.get_array().reshape(len({r["layer"] for r in run.intervals}), -1)
    with open(run.path / "intervals.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    its = sorted({int(r["iteration"]) for r in rows})
    for r in rows:
        assert grid[int(r["layer"]), its.index(int(r["iteration"]))] == float(r["interval"])
    assert f"{len(its)} adjustment(s)" in caption
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()][0] == rows[0]["name"]


def test_layer_size_on_a_log_axis_and_whole_synchronizations(root):
    """The run-directory report's layer-size figure (write_figures draws this kind of figure of the run, then saves it
    and its caption as they are): read back before it is saved."""

    def layer_size(run):
        return build(FigureDef("layer-size", "layer-size", panels=[Panel(runs=["x"])]), {"x": {0: run}})

    # 64-200-200-10: out.bias (10) against hidden.1.weight (40,000) spans more than three decades
    fig, caption = layer_size(load_run(root / "wide/s0"))
    assert "log scale" in caption and fig.axes[0].get_yscale() == "log"
    # 64-16-16-10: the largest tensor (1,024) is less than 100 times the smallest (10): a linear axis
    run = load_run(root / "lama/s0")
    fig, caption = layer_size(run)
    assert "log scale" not in caption and fig.axes[0].get_yscale() == "linear"
    fig, _ = build(FigureDef("s", "layer-syncs", panels=[Panel(runs=["x"])]), {"x": {0: run}})
    ticks = fig.axes[0].get_yticks()
    assert all(float(t).is_integer() for t in ticks)


def test_latex_caption_is_sentences_and_wide_tables_span_both_columns(root):
    t = comparison_table(
        [load_run(root / "avg/s0"), load_run(root / "lama/s0")], title="smoke scale of: X; ran digits/mlp"
    )
    tex = render(t, "latex")
    assert "\\begin{table*}[t]" in tex and "\\end{table*}" in tex  # 12 columns
    assert "\\usepackage{booktabs}" in tex
    cap = re.search(r"\\caption\{(.*)\}", tex).group(1)
    assert cap.startswith("Smoke scale of: X; ran digits/mlp. Final / best")  # a caption starts upper-case
    assert "1 MB = 10$^{6}$ bytes" in cap and "textasciicircum" not in cap  # the power as math, never a caret


def test_latex_escapes_the_symbols_recipes_write():
    from fedcli.reports.tables import latex_escape

    # a standard pdflatex stops at "Unicode character Σ (U+03A3)" (FedALA's table titles: Σ, its parameter count)
    assert latex_escape("Σ_l ≥ 5 · τ′ − δ") == "$\\Sigma$\\_l $\\geq$ 5 $\\cdot$ $\\tau$$'$ $-$ $\\delta$"
