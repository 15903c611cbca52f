"""A sweep with a run that diverged (issue 56, item 4): the sweep said "run the same command again to retry them", and
doing so resumed the run from the checkpoint of the very round that diverged, so it ended 'completed' at chance and
the table went from ``10.00% (1 diverged)`` to ``10.00%``. No checkpoint holds a round that diverged now: running the
sweep again replays it into the same divergence (exit 4 again, still diverged), and the message says so."""

import json

import pytest

from fedcli.cli.main import main
from fedcli.reports.core import find_sweeps, make_table
from fedcli.sweep.run import SweepFailed, run_sweep
from runkit import error_lines

# the run (fedcli train --algo fedavg --lr 5 --iterations 200 --eval-every 50: diverges in round 10, the round
# of its first periodic checkpoint; here every 5 rounds, so a checkpoint before it is resumed) beside a sane one
RECIPE = """\
title = "diverged"
seeds = 1

[base]
dataset = "digits"
model = "mlp"
algo = "fedavg"
iterations = 200
eval_every = 50
threads = 1
checkpoint_every = 5

[[runs]]
name = "sane"
lr = 0.05

[[runs]]
name = "blown"
lr = 5.0

[[tables]]
name = "t"
layout = "rows"
runs = ["sane", "blown"]
"""


@pytest.mark.timeout(300)
def test_a_diverged_run_stays_diverged_and_the_advice_says_what_running_again_does(tmp_path, capsys):
    recipe, root = tmp_path / "d.toml", tmp_path / "sw"
    recipe.write_text(RECIPE)
    with pytest.raises(SweepFailed) as e:
        run_sweep(recipe, out=root, in_process=True)
    msg = str(e.value)
    assert e.value.exit_code == 4 and "1 of 2 runs" in msg and "training diverged in round 10" in msg, msg
    assert (
        "retry" not in msg and "the diverged run (a result: reports show it as diverged) would diverge again" in msg
    ), msg
    table = make_table(find_sweeps(root), "t", "md")
    assert "(1 diverged)" in table, table
    # what the advice says is what running the same command again does: exit 4 again, the run still diverged
    capsys.readouterr()
    with pytest.raises(SystemExit) as ex:
        main(["sweep", str(recipe), "--out", str(root), "--in-process", "--quiet"])
    lines = error_lines(capsys.readouterr().err)
    assert ex.value.code == 4 and len(lines) == 1 and "would diverge again" in lines[0], lines
    man = json.loads((root / "blown" / "seed0" / "manifest.json").read_text())
    assert (man["status"], man["reason"], len(man["resumes"])) == ("failed", "diverged", 1)
    assert man["resumes"][0]["round"] == 5  # resumed before the round that diverged, and that round replayed
    assert make_table(find_sweeps(root), "t", "md") == table
