"""The system model (``--system``, fedcli/fl/system.py, docs/system-model.md): simulated time worked out by hand for
FedAvg and FedLAMA rounds, deadlines (drop, keep-partial), bad input, and the same numbers for any process count
and across a SIGKILL + --resume."""

import csv
import json
import signal
import time

import numpy as np
import pytest

import runkit
from fedcli.cli.main import main
from fedcli.fl.rng import np_gen
from fedcli.fl.system import draw
from fedcli.results.rundir import METRICS_COLUMNS
from runkit import MPIEXEC, assert_same_system_files, assert_same_system_run, error_lines, mpi_1_and_2, rows, run_main
from systemkit import BASE, TRACE, system, table

# Two clients, digits (64 features, 10 classes), an MLP 64-8-10: 4 layers of 512, 8, 80 and 10 parameters (610).
# Forward FLOPs per sample F = 2 (64 x 8 + 8 x 10) = 1184; a step of 16 samples costs 3 F 16 = 56,832 FLOPs.
# client 0: 56,832 FLOP/s -> c0 = 1 s a step; uplink 610 B/s, downlink 1,220 B/s, latency 0.5 s
# client 1: 28,416 FLOP/s -> c1 = 2 s a step; uplink 1,220 B/s, downlink 2,440 B/s, latency 0.25 s
# A synchronization of the whole model moves 610 x 4 = 2,440 bytes each way per client:
#   x0 = 2 x 0.5 + 2440 / 610 + 2440 / 1220 = 1 + 4 + 2 = 7 s;   x1 = 2 x 0.25 + 2440 / 1220 + 2440 / 2440 = 3.5 s.
US = 1e-6  # "to the microsecond"


@pytest.fixture
def trace(tmp_path):
    path = tmp_path / "trace.csv"
    path.write_text(TRACE)
    return path


def column(path, name):
    return [float(r[name]) for r in table(path)]


def test_fedavg_rounds_by_hand(trace, tmp_path):
    # FedAvg, tau = 2: a round is 2 local steps, then one synchronization of the whole model.
    # client 0: 2 c0 + x0 = 2 + 7 = 9 s; client 1: 2 c1 + x1 = 4 + 3.5 = 7.5 s; the round waits for the slower:
    # 9 s, + the server's 0.125 s = 9.125 s a round; 4 iterations = 2 rounds: 9.125 and 18.25 s.
    out = tmp_path / "avg"
    assert main(BASE + ["--algo", "fedavg", "--tau", "2", "--iterations", "4", "--out", str(out), *system(trace)]) == 0
    assert column(out / "metrics.csv", "sim_time_s") == pytest.approx([9.125, 18.25], abs=US)
    assert column(out / "system.csv", "round_s") == pytest.approx([9.125, 9.125], abs=US)
    # each layer's time: per synchronization the slower link's transfer of it, 2 synchronizations:
    # layer 0 (2,048 B each way): client 0 2048/610 + 2048/1220 = 5.036066 s (client 1 half of it) -> 10.072131 s
    # layer 1 (32 B): 2 x (32/610 + 32/1220) = 0.157377 s; layer 2 (320 B): 1.573770 s; layer 3 (40 B): 0.196721 s
    assert column(out / "layers.csv", "sim_time_s") == pytest.approx(
        [
            2 * (2048 / 610 + 2048 / 1220),
            2 * (32 / 610 + 32 / 1220),
            2 * (320 / 610 + 320 / 1220),
            2 * (40 / 610 + 40 / 1220),
        ],
        abs=US,
    )
    assert column(out / "layers.csv", "sim_time_s") == pytest.approx([10.072131, 0.157377, 1.573770, 0.196721], abs=US)
    man = json.loads((out / "manifest.json").read_text())["system"]
    assert man["forward_flops_per_sample"] == 1184.0 and man["trace"]["path"] == str(trace)
    import hashlib

    assert man["trace"]["sha256"] == hashlib.sha256(TRACE.encode()).hexdigest()


def test_fedlama_partial_synchronizations_cost_what_they_move(trace, tmp_path):
    # FedLAMA, tau' = 2, phi = 2: rounds of 4 steps, intervals adjusted at every round end (--lama-first-adjust 0).
    # Round 1: every layer's interval is 2: synchronizations of the whole model after steps 2 and 4, each segment
    #   max(2 c0 + x0, 2 c1 + x1) = max(9, 7.5) = 9 s: 18 s + 0.125 = 18.125 s.
    # Round 2: intervals (4, 2, 4, 2) (intervals.csv): after step 2 only layers 1 and 3 (8 + 10 = 18 parameters,
    #   72 B each way): client 0 2 c0 + 2 x 0.5 + 72/610 + 72/1220 = 3.177049 s, client 1 2 c1 + 0.5 + 72/1220 +
    #   72/2440 = 4.588525 s; after step 4 the whole model, 9 s: 4.588525 + 9 + 0.125 = 13.713525 s.
    # Round 3: intervals (4, 2, 2, 2): after step 2 layers 1, 2, 3 (392 B): client 0 3 + 392/610 + 392/1220 =
    #   3.963934 s, client 1 4.5 + 392/1220 + 392/2440 = 4.981967 s; then 9 s: 14.106967 s.
    out = tmp_path / "lama"
    assert (
        main(
            BASE
            + [
                "--algo",
                "fedlama",
                "--tau",
                "2",
                "--phi",
                "2",
                "--lama-first-adjust",
                "0",
                "--iterations",
                "12",
                "--out",
                str(out),
                *system(trace),
            ]
        )
        == 0
    )
    intervals = [[int(r["interval"]) for r in table(out / "intervals.csv") if r["round"] == str(k)] for k in (1, 2)]
    assert intervals == [[4, 2, 4, 2], [4, 2, 2, 2]]  # what rounds 2 and 3 ran with
    r2 = 4 + 0.5 + 72 / 1220 + 72 / 2440 + 9 + 0.125
    r3 = 4 + 0.5 + 392 / 1220 + 392 / 2440 + 9 + 0.125
    assert column(out / "system.csv", "round_s") == pytest.approx([18.125, r2, r3], abs=US)
    assert column(out / "system.csv", "round_s") == pytest.approx([18.125, 13.713525, 14.106967], abs=US)
    assert column(out / "metrics.csv", "sim_time_s") == pytest.approx([18.125, 31.838525, 45.945492], abs=US)
    # layer 0 synchronized 2 + 1 + 1 times, 5.036066 s each; layer 2 2 + 1 + 2 times, 320/610 + 320/1220 each
    lt = column(out / "layers.csv", "sim_time_s")
    assert lt[0] == pytest.approx(4 * (2048 / 610 + 2048 / 1220), abs=US)
    assert lt[2] == pytest.approx(5 * (320 / 610 + 320 / 1220), abs=US)


@pytest.mark.parametrize(
    "policy, round_s, steps_run",
    [
        # deadline 8.5 s: client 0 needs 2 c0 + x0 = 9 s, client 1 7.5 s.
        # keep-partial: client 0 runs floor((8.5 - 7) / 1) = 1 step; the round: max(1 + 7, 4 + 3.5) = 8 s + 0.125
        ("keep-partial", 8.125, "partial"),
        # drop: client 0 is left out; the server waits until the deadline: max(7.5, 8.5) = 8.5 s + 0.125
        ("drop", 8.625, "dropped"),
    ],
)
def test_deadline_by_hand_and_it_changes_training(policy, round_s, steps_run, trace, tmp_path):
    full, cut = tmp_path / "full", tmp_path / policy
    args = BASE + ["--algo", "fedavg", "--tau", "2", "--iterations", "4"]
    assert main(args + ["--out", str(full), *system(trace)]) == 0
    assert main(args + ["--out", str(cut), *system(trace, "--deadline", "8.5", "--on-deadline", policy)]) == 0
    sysrows = table(cut / "system.csv")
    assert [float(r["round_s"]) for r in sysrows] == pytest.approx([round_s] * 2, abs=US)
    assert [r[f"{steps_run}_clients"] for r in sysrows] == ["0", "0"]
    a, b = (
        rows(full / "metrics.csv", drop=("wall_s", "sim_time_s")),
        rows(cut / "metrics.csv", drop=("wall_s", "sim_time_s")),
    )
    assert [r["test_loss"] for r in a] != [r["test_loss"] for r in b]  # client 0's work is cut or left out
    bytes_full, bytes_cut = (column(p / "metrics.csv", "comm_bytes") for p in (full, cut))
    # a dropped client moves nothing: the ledger counts the one client that took part
    assert bytes_cut == ([x / 2 for x in bytes_full] if policy == "drop" else bytes_full)


def test_fednova_normalizes_the_partial_steps(trace, tmp_path):
    # keep-partial gives client 0 one step, client 1 two: FedNova's tau_eff / a_i scales the uploads, FedAvg does not
    runs = {}
    for algo in ("fedavg", "fednova"):
        runs[algo] = tmp_path / algo
        assert (
            main(
                BASE
                + [
                    "--algo",
                    algo,
                    "--tau",
                    "2",
                    "--iterations",
                    "4",
                    "--out",
                    str(runs[algo]),
                    *system(trace, "--deadline", "8.5", "--on-deadline", "keep-partial"),
                ]
            )
            == 0
        )
    loss = {a: [r["test_loss"] for r in rows(p / "metrics.csv")] for a, p in runs.items()}
    assert loss["fedavg"] != loss["fednova"]
    # without partial work FedNova is FedAvg, bit for bit
    for algo in ("fedavg", "fednova"):
        assert (
            main(
                BASE
                + [
                    "--algo",
                    algo,
                    "--tau",
                    "2",
                    "--iterations",
                    "4",
                    "--out",
                    str(tmp_path / f"{algo}-full"),
                    *system(trace),
                ]
            )
            == 0
        )
    assert rows(tmp_path / "fedavg-full" / "metrics.csv") == rows(tmp_path / "fednova-full" / "metrics.csv")


def test_off_by_default_and_on_without_deadline_trains_the_same(trace, tmp_path):
    off, on = tmp_path / "off", tmp_path / "on"
    args = BASE + ["--algo", "fedlama", "--tau", "2", "--iterations", "8"]
    assert main(args + ["--out", str(off)]) == 0
    assert main(args + ["--out", str(on), *system(trace)]) == 0
    assert next(csv.reader(open(off / "metrics.csv"))) == METRICS_COLUMNS  # the files it always wrote
    assert "sim_time_s" not in next(csv.reader(open(off / "layers.csv")))
    assert not (off / "system.csv").exists() and "system" not in json.loads((off / "manifest.json").read_text())
    assert rows(off / "metrics.csv") == rows(on / "metrics.csv", drop=("wall_s", "sim_time_s"))
    assert (off / "model.pt").read_bytes() == (on / "model.pt").read_bytes()


def test_availability_keyed_by_seed_round_and_client(trace, tmp_path):
    # with availability 0.5, a round's clients are those whose draw u(seed, round)[client] < 0.5
    out = tmp_path / "avail"
    assert (
        main(
            BASE
            + [
                "--algo",
                "fedavg",
                "--tau",
                "2",
                "--iterations",
                "16",
                "--seed",
                "1",
                "--out",
                str(out),
                *system(trace, "--availability", "0.5"),
            ]
        )
        == 0
    )
    got = [int(r["participants"]) for r in table(out / "system.csv")]
    want = [int((np_gen(1, "available", r).random(2) < 0.5).sum()) for r in range(8)]
    assert got == want and 0 in want and 2 in want  # rounds with nobody (the time passes, nothing trains) and everyone
    idle = [float(r["round_s"]) for r in table(out / "system.csv") if r["participants"] == "0"]
    assert idle == [0.125] * len(idle)  # no deadline to wait for: the server's time only


def test_availability_trace_by_hand(trace, tmp_path):
    # FedAvg rounds of 9.125 s (test_fedavg_rounds_by_hand) while both clients take part. Client 0 is on during
    # [0, 10) s of simulated time, client 1 always: rounds 1 and 2 start at 0 and 9.125 s (both on); round 3 starts at
    # 18.25 s, client 0 is off: client 1 alone, 2 c1 + x1 + 0.125 = 7.625 s; round 4 likewise: 33.5 s in all.
    avail = tmp_path / "on.csv"
    avail.write_text("client,start,end\n0,0,10\n1,0,inf\n")
    out = tmp_path / "run"
    assert (
        main(
            BASE
            + [
                "--algo",
                "fedavg",
                "--tau",
                "2",
                "--iterations",
                "8",
                "--out",
                str(out),
                *system(trace, "--availability-trace", str(avail)),
            ]
        )
        == 0
    )
    assert column(out / "system.csv", "round_s") == pytest.approx([9.125, 9.125, 7.625, 7.625], abs=US)
    assert [r["unavailable"] for r in table(out / "system.csv")] == ["0", "0", "1", "1"]
    man = json.loads((out / "manifest.json").read_text())["system"]["availability_trace"]
    import hashlib

    assert man["sha256"] == hashlib.sha256(avail.read_bytes()).hexdigest()


def test_distributions():
    g = lambda: np_gen(3, "system", "speed")  # noqa: E731
    tiers = draw("tiers:1e9@0.2,1e7@0.8", 10, g())
    assert sorted(tiers.tolist()) == [1e7] * 8 + [1e9] * 2  # shares, not chances
    ln = draw("lognormal:1e6,0.5", 20001, g(), "uplink")
    assert np.median(ln) == pytest.approx(1e6, rel=0.03) and np.std(np.log(ln)) == pytest.approx(0.5, rel=0.03)
    u = draw("uniform:2,4", 1000, g(), "latency")
    assert u.min() >= 2 and u.max() <= 4
    assert draw("lognormal:1e6,0.5", 5, g(), "uplink").tolist() == ln[:5].tolist()  # client i's draw is its own


@pytest.mark.parametrize(
    "flags, trace_text, needle",
    [
        (["--uplink", "constant:0"], None, "--uplink 'constant:0': its values must be positive"),
        (["--downlink", "uniform:-1,5"], None, "--downlink 'uniform:-1,5': its values must be positive"),
        (["--speed", "pareto:1,2"], None, "unknown distribution 'pareto'"),
        (["--latency", "tiers:0.1@0.5,0.2@0.4"], None, "sum to 1"),
        ([], "client,speed,uplink,downlink,latency\n0,56832,610,1220,0.5\n", "1 row(s) for a run of 2 clients"),
        ([], TRACE.replace("1220,2440", "nan,2440"), "line 3: uplink nan is not a positive finite number"),
        ([], TRACE.replace("610,1220", "0,1220"), "line 2: uplink 0 is not a positive finite number"),
        ([], "client,speed\n0,1\n1,1\n", "no column uplink, downlink, latency"),
        (
            ["--availability-trace", "AV"],
            "client,start,end\n0,5,2\n",
            "line 2: the interval [5, 2) is not 0 <= start <= end",
        ),
        (["--availability-trace", "AV"], "client,start\n0,5\n", "--availability-trace AV: no column end"),
        (["--deadline", "6.9"], TRACE, "--deadline 6.9: no client can meet it; the fastest, client 1, needs 7.5 s"),
        (
            ["--deadline", "4.4", "--on-deadline", "keep-partial"],
            TRACE,
            "the fastest, client 1, needs 5.5 s for one local step",
        ),
    ],
)
def test_bad_input_one_line_exit_2_nothing_written(flags, trace_text, needle, tmp_path, capsys):
    extra = ["--system", *flags]
    if "AV" in flags:  # the text is an availability trace
        (tmp_path / "av.csv").write_text(trace_text)
        extra = [str(tmp_path / "av.csv") if a == "AV" else a for a in extra]
        needle = needle.replace("AV", str(tmp_path / "av.csv"))
    elif trace_text is not None:
        (tmp_path / "t.csv").write_text(trace_text)
        extra += ["--system-trace", str(tmp_path / "t.csv")]
    out = tmp_path / "run"
    code, _, err = run_main(
        BASE + ["--algo", "fedavg", "--tau", "2", "--iterations", "4", "--out", str(out), *extra], capsys
    )
    lines = error_lines(err)
    assert code == 2 and len(lines) == 1 and needle in lines[0], err
    assert not out.exists()


def test_a_system_option_without_system_is_refused(tmp_path, capsys):
    out = tmp_path / "run"
    code, _, err = run_main(BASE + ["--algo", "fedavg", "--deadline", "5", "--out", str(out)], capsys)
    lines = error_lines(err)
    assert (
        code == 2
        and len(lines) == 1
        and "--deadline is an option of the system model, which is off: add --system" in lines[0]
    )
    assert not out.exists()


# a run whose rounds have partial and unavailable clients (rounds of 0 to 3), on 6 clients of which 3 a round
PARITY = [
    "train",
    "--dataset",
    "digits",
    "--model",
    "mlp",
    "--mlp-hidden",
    "8",
    "--clients",
    "6",
    "--active-ratio",
    "0.5",
    "--algo",
    "fedprox",
    "--tau",
    "2",
    "--iterations",
    "16",
    "--batch-size",
    "16",
    "--lr",
    "0.05",
    "--eval-every",
    "2",
    "--device",
    "cpu",
    "--threads",
    "1",
    "--quiet",
    "--system",
    "--speed",
    "tiers:1e8@0.5,1e5@0.5",
    "--latency",
    "lognormal:0.05,0.5",
    "--deadline",
    "1.0",
    "--on-deadline",
    "keep-partial",
    "--availability",
    "0.7",
]


def test_workers_1_and_2_give_the_same_times_drops_and_metrics(tmp_path):
    runs = {}
    for w in (1, 2):
        runs[w] = tmp_path / f"w{w}"
        assert main(PARITY + ["--workers", str(w), "--out", str(runs[w])]) == 0
    sysrows = table(runs[1] / "system.csv")
    assert any(r["partial"] != "0" for r in sysrows) and any(r["unavailable"] != "0" for r in sysrows)
    # rounds with nobody and with one client: under 2 workers a process then trains no client of the round
    assert {"0", "1"} <= {r["participants"] for r in sysrows}
    assert_same_system_run(runs[1], runs[2])


@pytest.mark.long(
    reason="the same run under mpiexec -n 2 (7 s of CPU); make test keeps its --workers twin, "
    "test_workers_1_and_2_give_the_same_times_drops_and_metrics, and test_mpi_families.py (MPI's collectives)"
)
@pytest.mark.mpi
@pytest.mark.timeout(300)
@pytest.mark.skipif(MPIEXEC is None, reason="mpiexec not installed (make install brings mpich)")
def test_mpi_1_and_2_processes_give_the_same_times_and_drops(tmp_path):
    runs = mpi_1_and_2(tmp_path, PARITY)
    # the system model's numbers are the same to the bit; the metrics to the rounding of the ranks' partial sums
    assert_same_system_files(runs[1], runs[2])
    a, b = table(runs[1] / "metrics.csv"), table(runs[2] / "metrics.csv")
    for x, y in zip(a, b):
        assert float(x["test_loss"]) == pytest.approx(float(y["test_loss"]), rel=1e-5)


@pytest.mark.timeout(300)
def test_sigkill_then_resume_is_bitwise_with_the_system_model(tmp_path, monkeypatch):
    ref, out = tmp_path / "ref", tmp_path / "run"
    args = PARITY + ["--checkpoint-every", "2", "--workers", "1"]
    assert main(args + ["--out", str(ref)]) == 0
    p = runkit.run_killed(signal.SIGKILL, 5, args + ["--out", str(out)])
    assert p.returncode == -signal.SIGKILL, p.stderr
    for _ in range(300):  # the watchdog marks the run failed
        if json.loads((out / "manifest.json").read_text())["status"] != "running":
            break
        time.sleep(0.1)
    assert len(table(out / "system.csv")) == 5  # rounds 1-5 written, the checkpoint after round 4
    import fedcli.results.resume as resume

    reopened, real = [], resume.reopen_run_dir

    def watch(*a, **k):  # layers.csv as the resume leaves it, before any round runs
        rd = real(*a, **k)
        reopened.append(table(out / "layers.csv"))
        return rd

    monkeypatch.setattr(resume, "reopen_run_dir", watch)
    assert main(["train", "--resume", str(out), "--quiet"]) == 0
    assert_same_system_run(ref, out)
    # the layers' simulated seconds as of the checkpoint (round 4), not blank: some but not all of the final ones
    (rows,) = reopened
    at_ckpt, final = ([float(r["sim_time_s"]) for r in t] for t in (rows, table(ref / "layers.csv")))
    assert all(0 < a <= b for a, b in zip(at_ckpt, final)) and at_ckpt != final
    assert (ref / "model.pt").read_bytes() == (out / "model.pt").read_bytes()


def test_a_system_table_applies_to_every_run_of_a_recipe(tmp_path):
    # the engine reads [system] for every method: a sweep's top-level table is not "a table no run reads"
    from fedcli.recipes import read_sweep, run_config, train_values

    recipe = tmp_path / "r.toml"
    recipe.write_text(
        '[base]\ndataset = "digits"\niterations = 4\n\n[system]\nsystem = true\nuplink = "constant:1e5"\n\n'
        '[[runs]]\nname = "avg"\nalgo = "fedavg"\n\n[[runs]]\nname = "nova"\nalgo = "fednova"\n'
        "system = { deadline = 9.0 }\n"
    )
    cfgs = [run_config(r, 0, tmp_path / r.name) for r in read_sweep(recipe).runs]
    assert [(c.system, c.uplink, c.deadline) for c in cfgs] == [
        (True, "constant:1e5", 0.0),
        (True, "constant:1e5", 9.0),
    ]
    flat = tmp_path / "flat.toml"
    flat.write_text(
        'algo = "fedprox"\n\n[system]\nsystem = true\nlatency = "constant:0"\nsystem_trace = "traces/t.csv"\n'
    )
    got = train_values(flat)
    assert got["latency"] == "constant:0"
    assert got["system_trace"] == str(tmp_path / "traces" / "t.csv")  # a trace path resolves against the recipe's root


def test_a_methods_extra_transfers_count_the_rounds_participants(tmp_path):
    """SCAFFOLD's control variates (c down, c_i+ - c_i up: two model-sized copies per client and round, besides the
    model's own up and down) are counted for the clients that took part, as the model's synchronizations are: with
    half of the sampled clients unavailable, its bytes are FedAvg's twice over, by the same participants (system.csv).
    Before, the copies were counted for every sampled client (43,726,320 bytes here, not 30,917,600)."""
    args = [
        "train",
        "--iterations",
        "40",
        "--eval-every",
        "40",
        "--tau",
        "5",
        "--system",
        "--availability",
        "0.5",
        "--quiet",
    ]
    for algo in ("fedavg", "scaffold"):
        assert main([*args, "--algo", algo, "--out", str(tmp_path / algo)]) == 0
    took_part = sum(int(r["participants"]) for r in rows(tmp_path / "scaffold" / "system.csv"))
    sampled = sum(int(r["sampled"]) for r in rows(tmp_path / "scaffold" / "system.csv"))
    model_bytes = 4 * sum(int(r["numel"]) for r in rows(tmp_path / "scaffold" / "layers.csv"))
    avg, scaffold = (float(rows(tmp_path / a / "metrics.csv")[-1]["comm_bytes"]) for a in ("fedavg", "scaffold"))
    assert 0 < took_part < sampled  # some sampled clients sat the rounds out
    assert avg == 2 * model_bytes * took_part  # the model down and up, per participant (one sync a round)
    assert scaffold == avg + 2 * model_bytes * took_part


def test_feddyn_server_reads_each_rounds_share_of_the_clients(tmp_path, monkeypatch):
    """FedDyn's server state h moves by alpha |P_t| / m (Acar et al. 2021, Algorithm 1): with the system model,
    P_t is the round's participants, which change from round to round (availability 0.5). The server reads
    ``view.share`` as each round begins; it read a share fixed at set-up before (every sampled client, always)."""
    from fedcli.fl.algorithms.feddyn import FedDynServer

    seen = []
    real = FedDynServer.begin_round

    def watch(self, view, cohort):
        real(self, view, cohort)
        seen.append((cohort.round_idx, self.share))

    monkeypatch.setattr(FedDynServer, "begin_round", watch)
    out = tmp_path / "feddyn"
    assert (
        main(
            [
                "train",
                "--algo",
                "feddyn",
                "--iterations",
                "40",
                "--eval-every",
                "40",
                "--tau",
                "5",
                "--clients",
                "10",
                "--system",
                "--availability",
                "0.5",
                "--quiet",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    want = {
        int(r["round"]) - 1: int(r["participants"]) / 10 for r in rows(out / "system.csv")
    }  # its rounds count from 1
    got = dict(seen)
    assert got == {r: s for r, s in want.items() if s > 0}  # a round without participants opens no cohort
    assert len(set(got.values())) > 1  # the share moved with the round's participants
