"""Re-timing a run under another network without training again (issue 57; docs/system-model.md, "Re-timing a run"):
a run's timing.csv and its manifest's ``timing`` entry, replayed by ``fedcli report RUN --uplink ...``, give the
simulated times of training it with those options, to the bit; a run whose training depended on the system model, or
that has no records, is refused in one line (exit 2)."""

from __future__ import annotations

import csv
import io
import json
import shutil

import pytest

import runkit
from fedcli.cli.main import main
from runkit import error_lines
from simkit import cli

BASE = [
    "train",
    "--dataset",
    "digits",
    "--model",
    "mlp",
    "--mlp-hidden",
    "8",
    "--clients",
    "4",
    "--iterations",
    "16",
    "--tau",
    "2",
    "--eval-every",
    "4",
    "--batch-size",
    "16",
    "--device",
    "cpu",
    "--threads",
    "1",
    "--quiet",
]
METHODS = ("fedavg", "fedlama", "mime")  # mime: declared work (passes, a round trip) and copies beyond the syncs
SLOW, FAST = "constant:3e4", "constant:3e6"


def sim_times(run_dir) -> list[float]:
    with open(run_dir / "metrics.csv", newline="") as f:
        return [float(r["sim_time_s"]) for r in csv.DictReader(f)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("retime")
    for algo in METHODS:
        for name, extra in (
            ("slow", ["--system", "--uplink", SLOW]),
            ("fast", ["--system", "--uplink", FAST]),
            ("plain", []),
        ):
            assert main(BASE + ["--algo", algo, *extra, "--out", str(root / f"{algo}-{name}")]) in (0, None)
    return root


def retimed(run_dir, **given) -> list[float]:
    from fedcli.reports import retime
    from fedcli.reports.single import load_run

    run = load_run(run_dir)
    retime.apply([run], retime.check(given))
    return [float(m["sim_time_s"]) for m in run.metrics]


@pytest.mark.parametrize("algo", METHODS)
def test_a_run_retimed_at_another_uplink_is_the_run_trained_there(runs, algo):
    fast = sim_times(runs / f"{algo}-fast")
    assert fast != sim_times(runs / f"{algo}-slow")
    for source in ("slow", "plain"):  # trained with --system at 3e4, and trained without --system
        got = retimed(runs / f"{algo}-{source}", uplink=FAST)
        assert got == pytest.approx(fast, rel=1e-9, abs=0) and len(got) == len(fast) == 4, source
    assert retimed(runs / f"{algo}-fast", uplink=SLOW) == pytest.approx(
        sim_times(runs / f"{algo}-slow"), rel=1e-9, abs=0
    )


def test_the_report_prints_and_draws_the_retimed_times(runs, capsys):
    code, out, err = cli(
        ["report", str(runs / "fedavg-slow"), str(runs / "fedlama-plain"), "--uplink", FAST, "--format", "csv"], capsys
    )
    assert code == 0, err
    recs = {r["name"].rsplit("/", 1)[-1]: r for r in csv.DictReader(io.StringIO(out)) if r.get("name")}
    assert float(recs["fedavg-slow"]["sim_time_s"]) == sim_times(runs / "fedavg-fast")[-1]
    assert float(recs["fedlama-plain"]["sim_time_s"]) == sim_times(runs / "fedlama-fast")[-1]
    # the Markdown table (two runs: a report of several runs draws no figures unasked; one run's would draw six)
    code, out, err = cli(["report", str(runs / "fedlama-plain"), str(runs / "mime-plain"), "--uplink", FAST], capsys)
    assert code == 0 and "Sim. time" in out and "re-timed" in out, err
    figs = runs / "figs"
    code, out, err = cli(
        [
            "report",
            str(runs / "fedavg-plain"),
            str(runs / "mime-plain"),  # no per-layer intervals to draw: the curves are the point
            "--x",
            "time",
            "--uplink",
            FAST,
            "--figures",
            str(figs),
        ],
        capsys,
    )
    assert code == 0 and (figs / "curves-time.png").is_file(), err
    # the figure's caption says so too: a figure read apart from the table shows times the runs were not trained with
    assert f"re-timed under --uplink {FAST}" in (figs / "curves-time.txt").read_text()
    assert "re-timed" not in (figs / "curves.txt").read_text()


def test_a_run_whose_training_depended_on_the_model_is_refused(runs, tmp_path, capsys):
    for extra, word in ((["--deadline", "100"], "--deadline"), (["--availability", "0.9"], "--availability")):
        out = tmp_path / word.strip("-")
        assert main(BASE + ["--system", *extra, "--out", str(out)]) in (0, None)
        assert not (out / "timing.csv").exists() and "timing" not in json.loads((out / "manifest.json").read_text())
        code, text, err = cli(["report", str(out), "--x", "time", "--uplink", FAST], capsys)
        lines = error_lines(err)
        assert code == 2 and text == "" and len(lines) == 1 and "cannot be re-timed" in lines[0] and word in lines[0], (
            err
        )


def test_a_run_of_an_older_fedcli_is_refused_naming_what_is_missing(runs, tmp_path, capsys):
    old = tmp_path / "old"
    shutil.copytree(runs / "fedavg-plain", old)
    (old / "timing.csv").unlink()
    manifest = json.loads((old / "manifest.json").read_text())
    del manifest["timing"]
    (old / "manifest.json").write_text(json.dumps(manifest))
    code, out, err = cli(["report", str(old), "--uplink", FAST], capsys)
    lines = error_lines(err)
    assert code == 2 and out == "" and len(lines) == 1 and "no 'timing' entry" in lines[0], err


def test_bad_retiming_options_are_refused_in_one_line(runs, capsys):
    for args in (["--uplink", "constant:-1"], ["--speed", "nosuch:1"], ["--server-time", "-1"]):
        code, out, err = cli(["report", str(runs / "fedavg-plain"), *args], capsys)
        lines = error_lines(err)
        assert code == 2 and out == "" and len(lines) == 1 and "no such option" not in lines[0].lower(), (args, err)
    assert not (runs / "fedavg-plain" / "figures").exists()


@pytest.mark.timeout(300)
def test_timing_csv_is_rewound_on_resume_and_the_same_for_any_worker_count(tmp_path):
    args = BASE + ["--algo", "fedlama", "--checkpoint-every", "2", "--iterations", "24"]
    ref, out, two = tmp_path / "ref", tmp_path / "run", tmp_path / "two"
    runkit.killed_and_resumed(args, ref, out, round_idx=4)
    assert (ref / "timing.csv").read_bytes() == (out / "timing.csv").read_bytes()
    assert main(args + ["--workers", "2", "--out", str(two)]) == 0
    assert (ref / "timing.csv").read_bytes() == (two / "timing.csv").read_bytes()


def test_a_timing_csv_cut_short_by_a_crash_is_dropped_on_resume_and_then_refused(runs, tmp_path, capsys):
    """timing.csv is synced at evaluations only: one shorter than the checkpoint recorded (a crash of the machine)
    does not stop the resume (the other files still must match), and re-timing the run then names the rounds missing."""
    from fedcli.results.rundir import rewind_csvs

    run = tmp_path / "run"
    shutil.copytree(runs / "fedavg-plain", run)
    full = (run / "timing.csv").read_bytes()
    recorded = {"timing.csv": {"bytes": len(full), "rows": full.count(b"\n") - 1}}
    (run / "timing.csv").write_bytes(full[: len(full) // 2])
    rewind_csvs(run, recorded)
    assert not (run / "timing.csv").exists()
    lines = full.decode().splitlines()
    (run / "timing.csv").write_text("\n".join([lines[0], *lines[3:]]) + "\n")  # a resume after round 2 wrote the rest
    code, out, err = cli(["report", str(run), "--uplink", FAST], capsys)
    said = error_lines(err)
    assert code == 3 and out == "" and len(said) == 1 and "no record of round 1" in said[0], err


def test_a_trace_and_the_server_time_retime_as_they_train(runs, tmp_path):
    trace = tmp_path / "trace.csv"
    trace.write_text(
        "client,speed,uplink,downlink,latency\n0,1e8,3e4,1e6,0.01\n1,5e7,1e5,2e6,0.02\n2,2e8,5e4,1e6,0.03\n"
        "3,1e8,2e5,3e6,0.0\n"
    )
    out = tmp_path / "traced"
    assert main(
        BASE + ["--algo", "mime", "--system", "--system-trace", str(trace), "--server-time", "0.25", "--out", str(out)]
    ) in (0, None)
    got = retimed(runs / "mime-plain", system_trace=str(trace), server_time=0.25)
    assert got == pytest.approx(sim_times(out), rel=1e-9, abs=0)
    # a draw given re-times with draws: the run's own trace is left out (here: the defaults, at another latency)
    assert retimed(out, latency="constant:0.05") == pytest.approx(
        retimed(runs / "mime-plain", server_time=0.25), rel=1e-9, abs=0
    )
