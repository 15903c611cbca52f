"""The figures say what they draw and draw it readably (issue 48, points 8-13): sweep captions name the axes, the
seeds and the band; per-layer sizes go on a log axis when they span decades; a method's variants differ in colour
(not four greys) and never in a thin dotted line; delta-lambda sets its subscripts in mathtext; the intervals figure
ticks its adjustments; runs of two datasets or models are told apart in the legend, never share a layer axis, and
are named properly in the warning.

Everything is read back from the figures themselves (matplotlib artists, axis scales, ticks, legend texts, colours)
or from the caption files; the runs are real: a sweep of a small recipe on digits (5 runs x 2 seeds, in-process) and
`fedcli train` runs on digits and on two files of each split of the FEMNIST LEAF sample beside the repository."""

import csv
import itertools
import math
import re
import shutil
from pathlib import Path

import pytest
from matplotlib.colors import to_hex, to_rgb

from fedcli.cli.main import main
from fedcli.reports import style
from fedcli.reports.core import find_sweeps
from fedcli.reports.figures import build, draw
from fedcli.reports.products import FigureDef, Panel
from fedcli.reports.single import load_run
from simkit import FEMNIST_SAMPLE, cli

RECIPE = """
title = "figure read-back"
paper = "none"
seeds = 2

[base]
dataset = "digits"
model = "mlp"
clients = 4
iterations = 20
eval_every = 10
threads = 1

[scale.smoke]

[[runs]]
name = "FedAvg x1"
algo = "fedavg"
tau = 2

[[runs]]
name = "FedAvg x2"
algo = "fedavg"
tau = 4

[[runs]]
name = "FedAvg x4"
algo = "fedavg"
tau = 8

[[runs]]
name = "FedAvg x8"
algo = "fedavg"
tau = 16

[[runs]]
name = "FedLAMA phi=2"
algo = "fedlama"
tau = 2
phi = 2

[[figures]]
name = "curves"
kind = "curves"
title = "Learning curves"
panels = [
  { title = "FedAvg", runs = ["FedAvg x1", "FedAvg x2", "FedAvg x4", "FedAvg x8"] },
  { title = "FedLAMA vs FedAvg", runs = ["FedAvg x1", "FedLAMA phi=2"] },
]

[[figures]]
name = "sizes"
kind = "layer-size"
y = "params"
title = "Total data size per layer (Eq. 8)"
runs = ["FedAvg x1", "FedLAMA phi=2"]

[[figures]]
name = "syncs"
kind = "layer-syncs"
title = "Communications per layer"
runs = ["FedAvg x1", "FedLAMA phi=2"]
"""


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    root = tmp_path_factory.mktemp("sweep")
    (root / "recipe.toml").write_text(RECIPE)
    assert main(["sweep", str(root / "recipe.toml"), "--in-process", "--quiet", "--out", str(root / "sw")]) in (0, None)
    assert main(["report", str(root / "sw"), "--figures", str(root / "figs")]) in (0, None)
    return root


@pytest.fixture(autouse=True)
def close_figures():
    """The figures built here are read, not saved: closed after each test (pyplot keeps them open)."""
    yield
    style.plt().close("all")


def sweep_figure(root: Path, name: str):
    """The matplotlib figure and caption of a sweep's figure, built as `fedcli report --figures` builds it."""
    from fedcli.reports.core import scaled_title

    (sw,) = find_sweeps(root / "sw")
    figure_def = next(f for f in sw.figures() if f.name == name)
    runs = sw.need(figure_def)
    return build(scaled_title(figure_def, sw, runs), runs)


ARGS = ["--clients", "4", "--eval-every", "10", "--threads", "1", "--quiet"]


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    """A FedLAMA run on digits (MLP 64-200-200-10) and one on FEMNIST (MLP 784-128-64-62; 10 of the sample's writers),
    both in a folder `seed0`."""
    if not (FEMNIST_SAMPLE / "train").is_dir():
        pytest.skip(f"shared FEMNIST LEAF sample not found at {FEMNIST_SAMPLE}")
    root = tmp_path_factory.mktemp("mixed")
    # two of the sample's 20 files of each split (10 writers, about 1,600 samples): the figures' point holds for any
    # FEMNIST run, and reading all 20 (JSON) was most of this fixture's time
    data = root / "femnist-data"
    for split in ("train", "test"):
        (data / split).mkdir(parents=True)
        for f in sorted((FEMNIST_SAMPLE / split).iterdir())[:2]:
            shutil.copyfile(f, data / split / f.name)
    lama = ["--algo", "fedlama", "--phi", "2", *ARGS]
    assert main(
        [
            "train",
            "--dataset",
            "digits",
            "--tau",
            "5",
            "--iterations",
            "100",
            *lama,
            "--out",
            str(root / "digits" / "seed0"),
        ]
    ) in (0, None)
    assert main(
        [
            "train",
            "--dataset",
            "femnist",
            "--data-dir",
            str(data),
            "--partition",
            "natural",
            "--mlp-hidden",
            "128,64",
            "--tau",
            "2",
            "--iterations",
            "40",
            *lama,
            "--out",
            str(root / "femnist" / "seed0"),
        ]
    ) in (0, None)
    return root


# ------------------------------------------------------------------------------------------------ 8: captions


def test_sweep_captions_say_what_is_drawn(sweep):
    curves = (sweep / "figs" / "curves.txt").read_text()
    assert "Y axis: test accuracy (%), global model; x axis: local iterations" in curves
    assert "each line is the mean over 2 seeds (0, 1), with a band of ± one standard deviation (sample std)" in curves
    assert "panels from left: FedAvg; FedLAMA vs FedAvg" in curves
    for name in ("sizes", "syncs"):  # fig4/fig5: whether the bars average seeds
        text = (sweep / "figs" / f"{name}.txt").read_text()
        assert "x axis: the layers (parameter tensors, in forward order), one bar per run" in text, text
        assert "each bar is the mean over 2 seeds (0, 1)" in text, text
    assert "Y axis: synchronizations over the run;" in (sweep / "figs" / "syncs.txt").read_text()


def test_one_seed_is_said_and_gets_no_band(sweep):
    (sw,) = find_sweeps(sweep / "sw")
    figure_def = next(f for f in sw.figures() if f.name == "curves")
    one = {name: {0: per_seed[0]} for name, per_seed in sw.need(figure_def).items()}
    fig, caption = build(figure_def, one)
    assert "each line is one seed (0), no band" in caption
    assert not any(ax.collections for ax in fig.axes)  # no fill_between


def test_recipe_figure_titles_name_no_figure_number():
    """A figure's title goes into its caption; "corresponding to Figure 4" names the paper's number, which is another
    number once the figures sit in a section (the `paper` key carries the paper's figure number)."""
    import tomllib

    said = []
    for path in sorted(Path(__file__).parents[2].glob("recipes/**/*.toml")):
        for fig in tomllib.loads(path.read_text()).get("figures", []):
            said += [
                f"{path.name}: {fig['name']}: {fig[k]}"
                for k in ("title", "notes")
                if re.search(r"\bFig(ure|\.)s? ?\d", fig.get(k, ""))
            ]
    assert not said, said


# ------------------------------------------------------------------------------------------------ 9: log axis


def test_layer_size_of_a_sweep_goes_log_when_sizes_span_decades(sweep):
    fig, caption = sweep_figure(sweep, "sizes")
    (ax,) = fig.axes
    heights = [p.get_height() for p in ax.patches if p.get_height() > 0]
    assert max(heights) / min(heights) >= 100  # out.bias (10 x syncs) against hidden.1.weight (40,000 x syncs)
    assert ax.get_yscale() == "log"
    assert "log scale" in caption
    # counts of synchronizations stay linear, and a recipe's log = false keeps sizes linear
    assert sweep_figure(sweep, "syncs")[0].axes[0].get_yscale() == "linear"
    (sw,) = find_sweeps(sweep / "sw")
    figure_def = next(f for f in sw.figures() if f.name == "sizes")
    figure_def.log = False
    assert build(figure_def, sw.need(figure_def))[0].axes[0].get_yscale() == "linear"


# ------------------------------------------------------------------------------------------------ 10: variants


def lab(colour) -> tuple[float, float, float]:
    lightness, chroma, hue = style.lch(colour)
    return lightness, chroma * math.cos(math.radians(hue)), chroma * math.sin(math.radians(hue))


def contrast_on_white(colour) -> float:
    """WCAG 2 contrast ratio of ``colour`` against white (1 to 21)."""
    lin = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in to_rgb(colour)]
    return 1.05 / (0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2] + 0.05)


def test_variants_differ_in_colour_and_no_dotted_line(sweep):
    fig, _ = sweep_figure(sweep, "curves")
    lines = {ln.get_label(): ln for ln in fig.axes[0].get_lines()}
    assert set(lines) == {"FedAvg (τ=2)", "FedAvg (τ=4)", "FedAvg (τ=8)", "FedAvg (τ=16)"}
    colours = [to_hex(ln.get_color()) for ln in lines.values()]
    # not four greys: every variant but the method's own grey has a hue (CIELAB chroma), all far apart
    assert sum(style.lch(c)[1] > 20 for c in colours) == 3, colours
    assert min(math.dist(lab(a), lab(b)) for a, b in itertools.combinations(colours, 2)) >= 15, colours
    assert min(map(contrast_on_white, colours)) >= 3.0, colours  # never a light grey on the white page
    assert all(ln.get_linestyle() != ":" for ax in fig.axes for ln in ax.get_lines())
    # the method's own colour stays its first variant's, in both panels
    assert to_hex(lines["FedAvg (τ=2)"].get_color()) == "#4d4d4d"


def test_every_methods_variants_are_readable_and_apart():
    from fedcli.specs import METHODS

    for m in METHODS.values():
        for n in (2, 3, 4):
            shades = [style.shade(m.style[0], k, n) for k in range(n)]
            assert min(contrast_on_white(c) for c in shades[1:]) >= 3.0, (m.name, n, shades)
            assert min(math.dist(lab(a), lab(b)) for a, b in itertools.combinations(shades, 2)) >= 15, (
                m.name,
                n,
                shades,
            )
    assert ":" not in style.LINESTYLES


# ------------------------------------------------------------------------------------------------ 11: mathtext


def outside_math(text: str) -> str:
    return re.sub(r"\$[^$]*\$", "", text)


def test_delta_lambda_subscripts_in_mathtext(mixed):
    run = load_run(mixed / "digits" / "seed0")
    fig, _ = build(FigureDef("d", "delta-lambda", panels=[Panel(runs=["x"])]), {"x": {0: run}})
    ax = fig.axes[0]
    legend = ax.get_legend()
    texts = [t.get_text() for t in legend.get_texts()] + [legend.get_title().get_text(), ax.get_xlabel()]
    assert r"$\delta_l$: discrepancy ratio (Eq. 3)" in texts and r"$1 - \lambda_l$: size ratio (Eq. 4)" in texts
    assert ax.get_xlabel() == r"$l$: layers in ascending order of $d_l$"
    for t in texts:  # no subscript left as plain text ("δ_l", "d_l")
        assert "_" not in outside_math(t) and "δ" not in t and "λ" not in t, t
    fig.canvas.draw()  # mathtext parses


# ------------------------------------------------------------------------------------------------ 12: ticks


def adjustments(run_dir: Path) -> list[int]:
    with open(run_dir / "intervals.csv", newline="") as f:
        return sorted({int(r["iteration"]) for r in csv.DictReader(f)})


@pytest.mark.parametrize("which", ["digits", "femnist"])
def test_intervals_ticks_are_adjustments(mixed, which):
    run = load_run(mixed / which / "seed0")
    its = adjustments(run.path)
    fig, _ = build(FigureDef("i", "intervals", panels=[Panel(runs=["x"])]), {"x": {0: run}})
    ticks = [int(t) for t in fig.axes[0].get_xticks()]
    assert all(float(t).is_integer() for t in fig.axes[0].get_xticks())
    assert set(ticks) <= set(its), (ticks, its)  # at adjustments: never between two, never past the run's end
    assert ticks[0] == its[0] and len(ticks) <= 10
    if len(its) <= 10:
        assert ticks == its
    assert run.config["iterations"] >= max(ticks)


# ------------------------------------------------------------------------------------------------ 13: mixed data


def test_mixed_datasets_in_legend_panels_and_warning(mixed, tmp_path, capsys):
    digits, femnist = mixed / "digits" / "seed0", mixed / "femnist" / "seed0"
    code, _, err = cli(["report", str(digits), str(femnist), "--figures", str(tmp_path / "f")], capsys)
    assert code == 0, err
    assert err.count("not one comparison") == 1, err  # said once, by the figures (not again by the table)
    # the warning names the runs by their report names, not "femnist (seed0, seed0)"
    assert "dataset: digits (digits/seed0), femnist (femnist/seed0)" in err, err
    assert "seed0, seed0" not in err and "(seed0)" not in err
    runs = [load_run(digits), load_run(femnist)]
    keyed = {"digits/seed0": {0: runs[0]}, "femnist/seed0": {0: runs[1]}}
    panel = Panel(runs=list(keyed))
    fig, caption = build(FigureDef("c", "curves", panels=[panel]), keyed)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert labels == ["FedLAMA (τ′=5, φ=2), digits/mlp", "FedLAMA (τ′=2, φ=2), femnist/mlp"]
    # per-layer figures: one panel per model, each with its own layers, titled by its data
    for kind in ("layer-syncs", "layer-size"):
        fig, caption = build(FigureDef("l", kind, panels=[panel]), keyed)
        assert len(fig.axes) == 2, kind
        for ax, run in zip(fig.axes, runs):
            names = [t.get_text() for t in ax.get_xticklabels()]
            assert names == [r["name"] for r in run.layers]
            (label,) = ax.get_legend_handles_labels()[1]
            assert label == run.legend()
            total = sum(int(r["numel"]) for r in run.layers)
            assert ax.get_title() == f"{style.data_label(run)}, {total:,} params"
            bars = [p.get_height() for p in ax.patches]
            key = "syncs" if kind == "layer-syncs" else "comm_bytes"
            assert bars == pytest.approx([float(r[key]) / (1 if kind == "layer-syncs" else 1e6) for r in run.layers])
        assert "one panel per model" in caption
    # a sweep's figure names its runs by their recipe names
    said = []
    draw(
        FigureDef("c", "curves", panels=[Panel(runs=["FedLAMA digits", "FedLAMA femnist"])]),
        {"FedLAMA digits": {0: runs[0]}, "FedLAMA femnist": {0: runs[1]}},
        tmp_path / "h",
        warn=said.append,
    )
    assert len(said) == 1 and "dataset: digits (FedLAMA digits), femnist (FedLAMA femnist)" in said[0], said
    # the run-directory report (`fedcli report RUN RUN --figures`, above: write_figures) drew the same: its layer-syncs
    # has two panels
    assert (tmp_path / "f" / "layer-syncs.png").is_file()
    assert "one panel per model" in (tmp_path / "f" / "layer-syncs.txt").read_text()


def test_one_dataset_keeps_plain_legends(sweep):
    fig, _ = sweep_figure(sweep, "curves")
    labels = [t.get_text() for t in fig.axes[1].get_legend().get_texts()]
    assert labels == ["FedAvg (τ=2)", "FedLAMA (τ′=2, φ=2)"]
    assert len(sweep_figure(sweep, "syncs")[0].axes) == 1
