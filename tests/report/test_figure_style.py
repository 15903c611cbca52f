"""One style in every figure, communication against one baseline (issue 30).

Colours, markers and labels are read back from the matplotlib artists (not the PNG bytes); communication ratios
are checked against ledger sums worked out by hand for fedcli's default MLP on digits."""

import csv
from pathlib import Path

import pytest
from matplotlib.colors import to_hex

from fedcli.cli.main import main
from fedcli.reports import style
from fedcli.reports.figures import build
from fedcli.reports.products import FigureDef, Panel
from fedcli.reports.single import comparison_table, curves_figure, load_run

# the default MLP on digits: 64-200-200-10
NUMEL = 64 * 200 + 200 + 200 * 200 + 200 + 200 * 10 + 10
assert NUMEL == 55_210
ITERATIONS, TAU, COHORT = 50, 5, 8  # 16 clients x active ratio 0.5


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    for algo in ("fedavg", "fedlama", "fedlamb", "fedala"):
        assert (
            main(
                [
                    "train",
                    "--algo",
                    algo,
                    "--iterations",
                    str(ITERATIONS),
                    "--eval-every",
                    "10",
                    "--quiet",
                    "--out",
                    str(root / algo),
                ]
            )
            == 0
        )
    return {algo: load_run(root / algo) for algo in ("fedavg", "fedlama", "fedlamb", "fedala")}


def line_styles(fig) -> dict:
    return {ln.get_label(): (to_hex(ln.get_color()), ln.get_marker()) for ax in fig.axes for ln in ax.get_lines()}


def bar_styles(fig) -> dict:
    out = {}
    for ax in fig.axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            out[label] = to_hex(handle.patches[0].get_facecolor())
    return out


def test_colour_marker_and_label_do_not_depend_on_the_order(runs):
    a, b, c = runs["fedlama"], runs["fedavg"], runs["fedlamb"]
    one = line_styles(curves_figure([a, b, c], [r.legend() for r in (a, b, c)])[0])
    two = line_styles(curves_figure([c, b, a], [r.legend() for r in (c, b, a)])[0])
    assert one == two
    assert one["FedLAMA (τ′=5, φ=2)"] == ("#0072b2", "s")  # the fixed FedLAMA blue and square
    assert one["FedAvg (τ=5)"] == ("#4d4d4d", "o")
    assert one["Fed-LAMB (τ=5)"] == ("#d55e00", "D")
    # a sweep figure's bars (another kind, another panel order) use the same colour and label per method
    keyed = {r.path.name: {0: r} for r in (a, b, c)}
    for order in (["fedlama", "fedavg", "fedlamb"], ["fedlamb", "fedlama", "fedavg"]):
        fig, _ = build(FigureDef("s", "layer-size", panels=[Panel(runs=order)]), keyed)
        bars = bar_styles(fig)
        assert bars == {label: colour for label, (colour, _) in one.items()}, order
    # two runs of one method in one panel: the method's colour, line styles in the order of their labels
    s1 = style.styles([a, a], ["FedLAMA (τ′=5, φ=10)", "FedLAMA (τ′=5, φ=2)"])
    s2 = style.styles([a, a], ["FedLAMA (τ′=5, φ=2)", "FedLAMA (τ′=5, φ=10)"])
    assert {s["label"]: (s["color"], s["linestyle"]) for s in s1} == {
        s["label"]: (s["color"], s["linestyle"]) for s in s2
    }
    assert {s["label"]: s["linestyle"] for s in s1} == {"FedLAMA (τ′=5, φ=2)": "-", "FedLAMA (τ′=5, φ=10)": "--"}


def test_accuracy_against_communicated_parameters(runs, tmp_path):
    a, b = runs["fedlama"], runs["fedavg"]
    fig, _ = curves_figure([a, b], [a.legend(), b.legend()], "params")
    acc = fig.axes[0]
    assert acc.get_xlabel() == "Communicated parameters, Eq. 8 (M params)"
    assert acc.get_ylabel() == "Test accuracy (%), global model"
    with open(b.path / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    line = next(ln for ln in acc.get_lines() if ln.get_label() == "FedAvg (τ=5)")
    # FedAvg: every tensor every tau iterations: at iteration i, NUMEL * i // TAU parameters
    assert list(line.get_xdata()) == pytest.approx([NUMEL * (int(r["iteration"]) // TAU) / 1e6 for r in rows])
    assert list(line.get_ydata()) == pytest.approx([100 * float(r["test_acc"]) for r in rows])
    out = tmp_path / "fig"
    assert main(["report", str(a.path), str(b.path), "--x", "params", "--figures", str(out)]) == 0
    assert {p.name for p in out.iterdir()} >= {
        "curves.png",
        "curves.pdf",
        "curves.txt",
        "layer-size.png",
        "delta-lambda.png",
    }


def cells(table) -> dict:
    sec = table.sections[0]
    keys = [c.key for c in sec.columns]
    return {row[0].text: {k: cell for k, cell in zip(keys, row)} for row in sec.rows}


def test_communication_against_one_fedavg_in_params_and_bytes(runs):
    t = cells(comparison_table([runs["fedlamb"], runs["fedala"], runs["fedavg"], runs["fedlama"]]))
    fedavg_params = NUMEL * (ITERATIONS // TAU)  # 552,100
    fedavg_bytes = fedavg_params * COHORT * (32 + 32) / 8  # every cohort client: 32 bits up and 32 down
    assert runs["fedavg"].comm_bytes == fedavg_bytes == 35_334_400
    # Fed-LAMB: the same model syncs, plus v up and v_hat down for every cohort client each round (vhat-every 1)
    assert t["fedlamb"]["comm"].values["value"] == pytest.approx(100.0)
    assert t["fedlamb"]["comm_pct_bytes"].values["value"] == pytest.approx(100.0 * 2 * fedavg_bytes / fedavg_bytes)
    # FedALA: all 16 clients each round, one synchronization per round (one local epoch)
    rounds = int(runs["fedala"].metrics[-1]["round"])
    assert t["fedala"]["comm_pct_bytes"].values["value"] == pytest.approx(
        100.0 * rounds * 16 * NUMEL * 8 / fedavg_bytes
    )
    assert t["fedala"]["comm"].values["value"] == pytest.approx(100.0 * rounds * NUMEL / fedavg_params)
    assert t["fedavg"]["comm_pct_bytes"].values["value"] == pytest.approx(100.0)
    # FedLAMA: its own ledger's bytes are its params x cohort x 8, so the same ratio either way
    assert t["fedlama"]["comm_pct_bytes"].values["value"] == pytest.approx(t["fedlama"]["comm"].values["value"])
    # no FedAvg among the runs: each against FedAvg with its own cohort, tau and budget, computed
    alone = cells(comparison_table([runs["fedlamb"]]))
    assert alone["fedlamb"]["comm_pct_bytes"].values["value"] == pytest.approx(200.0)
    # --baseline names another run
    other = cells(comparison_table([runs["fedlamb"], runs["fedavg"]], baseline="fedlamb"))
    assert other["fedavg"]["comm_pct_bytes"].values["value"] == pytest.approx(50.0)


@pytest.mark.long(
    reason="every figure of two runs drawn (3 s) for the one-line warning; make test holds it in "
    "tests/report/test_paper_figures.py::test_runs_of_other_data_or_budgets_are_marked_not_compared (said once, by "
    "the figures) and tests/report/test_figures_read_back.py::test_mixed_datasets_in_legend_panels_and_warning"
)
def test_mixed_data_warns_in_one_line(runs, tmp_path, capsys):
    import json

    other = tmp_path / "other"
    other.mkdir()
    src = runs["fedavg"].path
    for f in src.iterdir():
        if f.is_file() and not f.name.startswith("."):
            (other / f.name).write_bytes(f.read_bytes())
    m = json.loads((other / "manifest.json").read_text())
    m["config"]["dataset"] = "mnist"
    (other / "manifest.json").write_text(json.dumps(m))
    from fedcli.reports.single import write_figures

    said = []
    write_figures([runs["fedavg"], load_run(other)], tmp_path / "fig", warn=said.append)
    assert len(said) == 1 and "digits/mlp, mnist/mlp" in said[0]


def test_figures_refuses_a_file_name(runs, capsys):
    with pytest.raises(SystemExit) as e:
        main(["report", str(runs["fedavg"].path), "--figures", "x.png"])
    assert e.value.code == 2 and "--figures takes a folder" in capsys.readouterr().err
    assert not Path("x.png").exists()


def test_every_preset_has_a_look_of_its_own():
    """Each registered method's (colour, marker) is a valid matplotlib pair and no two methods share one (a new
    method must pick an unused pair: FedYogi and FedAdagrad did)."""
    from matplotlib.markers import MarkerStyle

    from fedcli.specs import METHODS

    looks = {m.name: m.style for m in METHODS.values()}
    assert all(looks.values()), [n for n, s in looks.items() if not s]
    assert len(set(looks.values())) == len(looks), looks
    for color, marker in looks.values():
        to_hex(color)
        MarkerStyle(marker)
