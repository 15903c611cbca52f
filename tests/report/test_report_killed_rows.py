"""A run killed while writing a row (issue 56, item 7): its CSVs end in half a row. Rows are whole or not read, by the
one reader of a run's CSVs (``fedcli.results.rundir.read_rows``) that the reports, ``fedcli.load``, the trackers and a
sweep's progress share; the run is reported as far as it got, exit 0, no traceback.

One real run (digits, a small MLP, 20 iterations) that writes every appended CSV: metrics.csv, intervals.csv (a
layer-wise schedule), clients.csv (a personalized method) and system.csv (``--system``)."""

import csv
import json
import shutil

import pytest

import fedcli
from fedcli.cli.main import main
from fedcli.reports.rundata import read_csv
from simkit import cli, md_table

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
    "--tau",
    "2",
    "--threads",
    "1",
    "--quiet",
    "--algo",
    "fedavg-c",
    "--client-test-fraction",
    "0.25",
    "--active-ratio",
    "1",
    "--schedule",
    "lama",
    "--phi",
    "2",
    "--system",
]
APPENDED = ("metrics.csv", "intervals.csv", "clients.csv", "system.csv")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("killed") / "run"
    assert main(["train", *ARGS, "--out", str(out)]) in (0, None)
    return out


def read_rows(path):
    from fedcli.results.rundir import read_rows  # here, so that the report tests run on a fedcli without it

    return read_rows(path)


def _dict_rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def cut_last_row(path, keep: float = 0.5) -> None:
    """Cut the file inside its last row, ``keep`` of the row left (as a kill in the middle of its write leaves it)."""
    data = path.read_bytes()
    start = data.rstrip(b"\n").rfind(b"\n") + 1
    path.write_bytes(data[: start + max(1, int((len(data) - 1 - start) * keep))])


def killed(run, dest, files=APPENDED):
    """A copy of ``run`` as a SIGKILL in the middle of writing a row leaves it: the manifest still says running, no
    summary, the last row of each of ``files`` cut."""
    shutil.copytree(run, dest)
    m = json.loads((dest / "manifest.json").read_text())
    m["status"] = "running"
    m.pop("summary", None)
    (dest / "manifest.json").write_text(json.dumps(m))
    for name in files:
        cut_last_row(dest / name)
    return dest


@pytest.mark.parametrize("name", [*APPENDED, "layers.csv"])
@pytest.mark.parametrize("keep", [0.0, 0.5, 1.0])
def test_a_cut_last_row_is_not_read(run, tmp_path, name, keep):
    """At any point of the last row (one byte of it, half, all but its newline) the file reads as its whole rows."""
    whole = _dict_rows(run / name)
    assert len(whole) >= 2 and read_rows(run / name) == whole
    cut = tmp_path / name
    shutil.copy(run / name, cut)
    cut_last_row(cut, keep)
    assert read_rows(cut) == whole[:-1]
    assert [r["round"] if "round" in r else r["layer"] for r in read_csv(cut)] == [
        int(r["round"] if "round" in r else r["layer"]) for r in whole[:-1]
    ]


def test_a_header_cut_or_missing_file_has_no_rows(tmp_path):
    (tmp_path / "metrics.csv").write_text("round,iteration,train_lo")
    assert read_rows(tmp_path / "metrics.csv") == [] and read_rows(tmp_path / "none.csv") == []


def test_a_short_row_before_the_last_is_an_error_naming_its_line(run, tmp_path):
    lines = (run / "metrics.csv").read_text().splitlines(keepends=True)
    lines[2] = lines[2].split(",", 1)[1]
    (tmp_path / "metrics.csv").write_text("".join(lines))
    with pytest.raises(ValueError, match="metrics.csv line 3 has"):
        read_rows(tmp_path / "metrics.csv")


def test_a_killed_run_is_reported_as_far_as_it_got(run, tmp_path, capsys):
    """``fedcli report RUN``, ``fedcli report FOLDER``, ``fedcli.report`` and ``fedcli.load``: exit 0, no traceback, the
    numbers of the last whole row (before: TypeError in fedcli/reports/rundata.py; load gave the half row)."""
    whole = _dict_rows(run / "metrics.csv")[:-1]
    k = killed(run, tmp_path / "results" / "killed")
    shutil.copytree(run, tmp_path / "results" / "done")
    for args in (["report", str(k)], ["report", str(tmp_path / "results")]):
        code, out, err = cli(args, capsys)
        assert code == 0 and "Traceback" not in err, err
        row = next(r for r in md_table(out) if r["Run"] == "killed")
        assert row["Status"] == "running"
        assert row["Final acc."] == f"{100 * float(whole[-1]['test_acc']):.2f}%"
        assert row["Iterations (rounds)"].startswith(f"{whole[-1]['iteration']} (")
    table, _ = fedcli.report(str(k), figures=str(tmp_path / "figs"))
    assert len(table) == 1
    capsys.readouterr()
    got = fedcli.load(k)
    assert got.metrics["iteration"].tolist() == [int(r["iteration"]) for r in whole]
    assert got.metrics[["comm_params", "wall_s"]].notna().all().all()
    for name in ("clients", "intervals"):
        assert len(getattr(got, name)) == len(_dict_rows(run / f"{name}.csv")) - 1
