"""The system model's participants (fedcli/fl/system.py, docs/system-model.md): rounds that availability and a
deadline leave with fewer clients than processes train the same on any process count, for every method; a round
whose clients are all offline waits for one to come online (the clock never stalls); FedScale's sampling among the
clients online, with over-commitment; a run in which nobody can train is an error, never a completion; and never
more processes than clients per round."""

import json

import pytest

import runkit
from fedcli.cli.main import main
from fedcli.fl.cohort import sample_cohort
from fedcli.specs import METHODS
from runkit import MPIEXEC, assert_same_system_files, assert_same_system_run, error_lines, mpi_1_and_2, rows, run_main

PRESETS = sorted({m.name for m in METHODS.values()})

# 4 clients, every one sampled (the cross-silo methods need it), one of them 10,000 times slower: a slow client's step
# (3 x 1,184 FLOPs x 8 samples at 1e4 FLOP/s, 2.8 s) misses the 1 s deadline and is dropped; the fast ones are each
# available with probability 0.6. Rounds of 1, 2 and 3 participants (seed 4): under 2 processes a round of one leaves a
# process with no client, and a client trains on another process than in its last round.
EMPTY_SHARE = [
    "train",
    "--dataset",
    "digits",
    "--model",
    "mlp",
    "--mlp-hidden",
    "8",
    "--clients",
    "4",
    "--active-ratio",
    "1",
    "--rounds",
    "4",
    "--tau",
    "2",
    "--batch-size",
    "8",
    "--lr",
    "0.05",
    "--eval-every",
    "2",
    "--client-test-fraction",
    "0.25",
    "--device",
    "cpu",
    "--threads",
    "1",
    "--seed",
    "4",
    "--quiet",
    "--system",
    "--availability",
    "0.6",
    "--speed",
    "tiers:1e8@0.75,1e4@0.25",
    "--deadline",
    "1.0",
    "--on-deadline",
    "drop",
    "--diverge-factor",
    "0",
]  # FedAMS blows up at this lr: the parity is the point
assert_same = assert_same_system_run  # every metrics column but wall_s (personal_acc, sim_time_s), the system files


def workers_1_and_2(algo, tmp_path):
    runs = {w: tmp_path / f"{algo}-w{w}" for w in (1, 2)}
    for w, out in runs.items():
        assert main(EMPTY_SHARE + ["--algo", algo, "--workers", str(w), "--out", str(out)]) == 0, (algo, w)
    took_part = [int(r["participants"]) for r in rows(runs[1] / "system.csv")]
    assert 1 in took_part and 2 in took_part  # a process with no client, and clients moving between processes
    assert any(int(r["dropped"]) for r in rows(runs[1] / "system.csv"))  # the deadline dropped someone
    assert_same(runs[1], runs[2])


@pytest.mark.timeout(120)
@pytest.mark.parametrize("algo", ["fedlama", "ditto"])
def test_a_process_with_no_client_in_a_round_trains_the_same(algo, tmp_path):
    """Issue 56 item 8: FedLAMA's discrepancy reshaped a process's empty share ([0, -1]: 'cannot reshape tensor of
    0 elements'), exit 1 under --workers 2. Ditto: with every client sampled, a process kept the personal models of
    its own clients only, but the system model moves a client between processes (2 workers: other personal_acc)."""
    workers_1_and_2(algo, tmp_path)


@pytest.mark.long(
    reason="every method (29 presets, about 4 minutes on 2 cores); make test keeps FedLAMA and Ditto, "
    "whose two causes it covers"
)
@pytest.mark.timeout(120)
@pytest.mark.parametrize("algo", PRESETS)
def test_every_method_trains_the_same_with_empty_shares(algo, tmp_path):
    workers_1_and_2(algo, tmp_path)


@pytest.mark.long(
    reason="the empty share under mpiexec -n 2 (8 s of CPU); make test keeps its --workers twin, "
    "test_a_process_with_no_client_in_a_round_trains_the_same[fedlama], and test_mpi_families.py (MPI's "
    "collectives)"
)
@pytest.mark.mpi
@pytest.mark.timeout(300)
@pytest.mark.skipif(MPIEXEC is None, reason="mpiexec not installed (make install brings mpich)")
def test_mpi_with_a_rank_with_no_client(tmp_path):
    """Issue 56 item 8 under mpiexec -n 2: FedLAMA runs, with the system model's numbers to the bit."""
    runs = mpi_1_and_2(tmp_path, EMPTY_SHARE + ["--algo", "fedlama"])
    assert_same_system_files(runs[1], runs[2])
    a, b = rows(runs[1] / "metrics.csv"), rows(runs[2] / "metrics.csv")
    assert [r["comm_params"] for r in a] == [r["comm_params"] for r in b]
    for x, y in zip(a, b):
        assert float(x["test_loss"]) == pytest.approx(float(y["test_loss"]), rel=1e-5)


# ---------------------------------------------------------------------------- a clock that never stalls
# Four clients, digits, the 64-8-10 MLP, batches of 16 (3 x 1,184 x 16 = 56,832 FLOPs a step), no latency, 2,440 B/s
# each way: a synchronization of the whole model (2,440 bytes each way) costs every client x = 2 s. Client i's step:
# c = 1, 2, 4 and 0.5 s; its own time in a FedAvg round of tau = 2 steps, 2 c + 2 = 4, 6, 10 and 3 s.
TRACE4 = "client,speed,uplink,downlink,latency\n0,56832,2440,2440,0\n1,28416,2440,2440,0\n2,14208,2440,2440,0\n3,113664,2440,2440,0\n"  # noqa: E501
BASE4 = [
    "train",
    "--dataset",
    "digits",
    "--model",
    "mlp",
    "--mlp-hidden",
    "8",
    "--clients",
    "4",
    "--batch-size",
    "16",
    "--algo",
    "fedavg",
    "--tau",
    "2",
    "--eval-every",
    "2",
    "--device",
    "cpu",
    "--threads",
    "1",
    "--quiet",
    "--system",
    "--server-time",
    "0.125",
]
US = 1e-6


def system4(tmp_path, availability: str, *extra) -> list[str]:
    (tmp_path / "trace.csv").write_text(TRACE4)
    (tmp_path / "on.csv").write_text("client,start,end\n" + availability)
    return [
        *BASE4,
        "--system-trace",
        str(tmp_path / "trace.csv"),
        "--availability-trace",
        str(tmp_path / "on.csv"),
        *extra,
    ]


def test_a_round_whose_clients_are_all_offline_waits_for_them(tmp_path):
    """Issue 57 item 2 (and 56 item 14): every client online from 100 s, no deadline. Every round had 0 participants
    and lasted 0 s, so the clock never reached 100 s: 'completed', 0 bytes. The first round now waits until 100 s:
    it starts there (wait_s), trains, and the rounds after it follow on."""
    out = tmp_path / "run"
    assert (
        main(
            system4(
                tmp_path,
                "".join(f"{c},100,inf\n" for c in range(4)),
                "--active-ratio",
                "1",
                "--iterations",
                "4",
                "--out",
                str(out),
            )
        )
        == 0
    )
    sysrows = rows(out / "system.csv")
    assert [float(r["wait_s"]) for r in sysrows] == [100.0, 0.0]
    # everyone trains: the round waits for client 2, 10 s, + the server's 0.125 s; the first starts at 100 s
    assert [float(r["round_s"]) for r in sysrows] == pytest.approx([10.125, 10.125], abs=US)
    assert [float(r["sim_time_s"]) for r in sysrows] == pytest.approx([110.125, 120.25], abs=US)
    assert [r["participants"] for r in sysrows] == ["4", "4"]
    assert float(rows(out / "metrics.csv")[-1]["comm_bytes"]) > 0


def test_the_cohort_waits_for_its_own_clients(tmp_path):
    """--sampling cohort (the default): the round's cohort is sampled from every client; with none of it online the
    round waits for the first of it, even while other clients are online. Seed 4 samples clients 1 and 3 in round 1
    (client 0, the only one online before 50 s, is not in it): the round starts at 50 s, when both come online."""
    assert sample_cohort(4, 0, 4, 2) == [1, 3]
    out = tmp_path / "run"
    assert (
        main(
            system4(
                tmp_path,
                "0,0,inf\n1,50,inf\n2,50,inf\n3,50,inf\n",
                "--active-ratio",
                "0.5",
                "--seed",
                "4",
                "--iterations",
                "2",
                "--out",
                str(out),
            )
        )
        == 0
    )
    (row,) = rows(out / "system.csv")
    # clients 1 and 3: max(6, 3) + 0.125 = 6.125 s, from 50 s
    assert (float(row["wait_s"]), row["participants"]) == (50.0, "2")
    assert float(row["round_s"]) == pytest.approx(6.125, abs=US) and float(row["sim_time_s"]) == pytest.approx(
        56.125, abs=US
    )


def test_sampling_among_the_online_clients_keeps_the_first_to_finish(tmp_path):
    """--sampling available --overcommit 2 (FedScale's practice), K = 2 of 4 clients a round: ceil(2 x 2) = 4 are
    asked among the clients online at the round's start, the first 2 to finish are kept, the server waits for them
    only. Client 3 is offline until 100 s: rounds 1 and 2 ask clients 0, 1, 2 (all that is online) and keep 0 and 1
    (4 and 6 s; client 2, 10 s, is surplus): max(4, 6) + 0.125 = 6.125 s."""
    out = tmp_path / "run"
    assert (
        main(
            system4(
                tmp_path,
                "0,0,inf\n1,0,inf\n2,0,inf\n3,100,inf\n",
                "--active-ratio",
                "0.5",
                "--iterations",
                "4",
                "--sampling",
                "available",
                "--overcommit",
                "2",
                "--out",
                str(out),
            )
        )
        == 0
    )
    sysrows = rows(out / "system.csv")
    assert [(r["sampled"], r["participants"], r["unavailable"], r["dropped"]) for r in sysrows] == [
        ("3", "2", "0", "0")
    ] * 2
    assert [float(r["round_s"]) for r in sysrows] == pytest.approx([6.125, 6.125], abs=US)
    man = json.loads((out / "manifest.json").read_text())["system"]
    assert (man["sampling"], man["overcommit"]) == ("available", 2.0)


def test_sampling_available_waits_for_the_first_client_online(tmp_path):
    """With every client offline until 100 s, --sampling available waits for the first to come online (client 2 at
    100 s; client 0 at 200 s) and asks those online then: client 2 alone, 10 + 0.125 s."""
    out = tmp_path / "run"
    assert (
        main(
            system4(
                tmp_path,
                "0,200,inf\n1,300,inf\n2,100,inf\n3,400,inf\n",
                "--active-ratio",
                "0.5",
                "--iterations",
                "2",
                "--sampling",
                "available",
                "--out",
                str(out),
            )
        )
        == 0
    )
    (row,) = rows(out / "system.csv")
    assert (float(row["wait_s"]), row["sampled"], row["participants"]) == (100.0, "1", "1")
    assert float(row["sim_time_s"]) == pytest.approx(110.125, abs=US)


@pytest.mark.parametrize(
    "availability, needle",
    [
        ("0,100,100\n1,5,5\n", "no client of the run's 4 is ever online"),  # empty intervals only
        ("7,0,inf\n", "no client of the run's 4 is ever online"),  # a client the run does not have
    ],
)
def test_nobody_ever_online_exits_2_before_training(availability, needle, tmp_path, capsys):
    out = tmp_path / "run"
    code, _, err = run_main(
        system4(tmp_path, availability, "--active-ratio", "1", "--iterations", "4", "--out", str(out)), capsys
    )
    lines = error_lines(err)
    assert code == 2 and len(lines) == 1 and needle in lines[0], err
    assert not out.exists()


def test_nobody_online_any_more_stops_the_run_with_its_rounds_kept(tmp_path, capsys):
    """Every client online during [0, 15) s only: rounds of 10.125 s; round 2 starts at 10.125 s (online), round 3 at
    20.25 s, after which nobody is ever online again: the run stops there (exit 2, one line), 'failed' with that
    reason, and the two rounds done are in system.csv and metrics.csv."""
    out = tmp_path / "run"
    code, _, err = run_main(
        system4(
            tmp_path,
            "".join(f"{c},0,15\n" for c in range(4)),
            "--active-ratio",
            "1",
            "--iterations",
            "8",
            "--eval-every",
            "2",
            "--out",
            str(out),
        ),
        capsys,
    )
    lines = error_lines(err)
    assert (
        code == 2 and len(lines) == 1 and "no client is online at or after simulated time 20.25 s (round 3)" in lines[0]
    ), err
    man = json.loads((out / "manifest.json").read_text())
    assert man["status"] == "failed" and "no client is online" in man["error"]
    assert len(rows(out / "system.csv")) == 2 and len(rows(out / "metrics.csv")) == 2


def test_a_run_in_which_nobody_trained_is_an_error(tmp_path, capsys):
    """Only client 2 is ever online, and with a deadline of 8 s (client 3 meets it: the run is accepted) it is dropped
    in every round: nothing is trained, which was a 'completed' run before; now exit 2, one line, 'failed'."""
    out = tmp_path / "run"
    code, _, err = run_main(
        system4(
            tmp_path, "2,0,inf\n", "--active-ratio", "1", "--iterations", "4", "--deadline", "8", "--out", str(out)
        ),
        capsys,
    )
    lines = error_lines(err)
    assert code == 2 and len(lines) == 1 and "nobody took part in any of the run's 2 round(s)" in lines[0], err
    assert json.loads((out / "manifest.json").read_text())["status"] == "failed"


@pytest.mark.parametrize(
    "flags, needle",
    [
        (["--sampling", "online"], "--sampling"),
        (["--overcommit", "1.5"], "--overcommit 1.5 needs --sampling available"),
        (["--sampling", "available", "--overcommit", "0.5"], "--overcommit"),
    ],
)
def test_bad_sampling_options_one_line_exit_2(flags, needle, tmp_path, capsys):
    out = tmp_path / "run"
    code, _, err = run_main(system4(tmp_path, "0,0,inf\n", "--iterations", "4", *flags, "--out", str(out)), capsys)
    lines = error_lines(err)
    assert code == 2 and len(lines) == 1 and needle in lines[0], err
    assert not out.exists()


# rounds that wait (clients going off and on), over-commitment, a deadline and unequal steps (keep-partial)
WAITS = "".join(
    f"{c},{a},{b}\n"
    for c, a, b in (
        (0, 0, 12),
        (0, 40, "inf"),
        (1, 5, 30),
        (1, 60, "inf"),
        (2, 0, 20),
        (2, 45, "inf"),
        (3, 20, 25),
        (3, 70, "inf"),
    )
)


def waiting_run(tmp_path, *extra):
    return system4(
        tmp_path,
        WAITS,
        "--active-ratio",
        "0.5",
        "--iterations",
        "16",
        "--sampling",
        "available",
        "--overcommit",
        "1.5",
        "--deadline",
        "9",
        "--on-deadline",
        "keep-partial",
        "--lr",
        "0.05",
        *extra,
    )


def test_waits_and_overcommitment_are_the_same_on_1_and_2_workers(tmp_path):
    runs = {w: tmp_path / f"w{w}" for w in (1, 2)}
    for w, out in runs.items():
        assert main(waiting_run(tmp_path, "--workers", str(w), "--out", str(out))) == 0
    sysrows = rows(runs[1] / "system.csv")
    assert any(float(r["wait_s"]) > 0 for r in sysrows) and any(r["partial"] != "0" for r in sysrows)
    assert any(int(r["sampled"]) > int(r["participants"]) + int(r["dropped"]) for r in sysrows)  # a surplus client
    assert_same(runs[1], runs[2])


@pytest.mark.timeout(300)
def test_waits_survive_a_sigkill_and_resume_bitwise(tmp_path):
    ref, out = tmp_path / "ref", tmp_path / "run"
    args = waiting_run(tmp_path, "--checkpoint-every", "2", "--workers", "1")
    runkit.killed_and_resumed(args, ref, out)
    assert_same(ref, out)
    assert (ref / "model.pt").read_bytes() == (out / "model.pt").read_bytes()


@pytest.mark.long(
    reason="the same run under mpiexec -n 2 (7 s of CPU); make test keeps its --workers twin, "
    "test_waits_and_overcommitment_are_the_same_on_1_and_2_workers, and test_mpi_families.py (MPI's "
    "collectives)"
)
@pytest.mark.mpi
@pytest.mark.timeout(300)
@pytest.mark.skipif(MPIEXEC is None, reason="mpiexec not installed (make install brings mpich)")
def test_waits_and_overcommitment_under_mpi_1_and_2_processes(tmp_path):
    runs = mpi_1_and_2(tmp_path, waiting_run(tmp_path))
    assert_same_system_files(runs[1], runs[2])
    a, b = rows(runs[1] / "metrics.csv"), rows(runs[2] / "metrics.csv")
    for x, y in zip(a, b):
        assert float(x["test_loss"]) == pytest.approx(float(y["test_loss"]), rel=1e-5)


def test_clients_per_round_by_hand():
    """fedcli/fl/budget.py:clients_per_round, K = round(active_ratio x clients), at least 1: 0.25 of 128 is 32
    (FedLAMA's CIFAR-10 setting); 0.5 of 5 is 2.5, rounded half to even: 2; 0.7 of 5 is 3.5: 4; 0.01 of 10 is 0.1: 1."""
    from fedcli.fl.budget import clients_per_round

    assert [clients_per_round(r, n) for r, n in ((0.25, 128), (0.5, 5), (0.7, 5), (0.01, 10), (1.0, 3))] == [
        32,
        2,
        4,
        1,
        3,
    ]


def test_processes_up_to_the_clients_per_round_pass_one_more_is_refused():
    """fedcli/fl/budget.py:check_processes: 4 clients at --active-ratio 0.5 give 2 per round; 1 or 2 processes (MPI
    ranks or --workers) pass, 3 are refused naming the launcher (tests/engine/test_mpi.py runs the refusal under
    mpiexec)."""
    from fedcli.errors import ConfigError
    from fedcli.fl.budget import check_processes

    for size in (1, 2):
        for launcher in ("mpi", "fedcli"):
            check_processes(0.5, 4, size, launcher)
    with pytest.raises(ConfigError) as e:
        check_processes(0.5, 4, 3, "mpi")
    assert str(e.value).startswith("--active-ratio 0.5 of 4 clients gives 2 client(s) per round, fewer than the 3 MPI")
    assert "use at most 2 processes" in str(e.value) and e.value.key == "active_ratio"
    with pytest.raises(ConfigError, match=r"fewer than the 3 worker processes \(--workers\)"):
        check_processes(0.5, 4, 3, "fedcli")
