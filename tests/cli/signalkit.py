"""A ``fedcli train`` child paused at a chosen point (setup, armed, round) until the test lets it go, for the tests that
send it real signals or take its disk away: a process of its own forked from the test's (``runkit.start_forked``: torch
and fedcli already imported, fedcli's signal handlers installed first thing as its command does; the start itself is
test_signals.py's SIGINT-after-launch test, with new interpreters). Test modules import these from here."""

import os
import time
from pathlib import Path

from runkit import TINY_RUN, start_forked, train_args

ROOT = Path(__file__).resolve().parents[2]
ENV = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")

# runkit.TINY_RUN with a checkpoint every 3 rounds
TINY = train_args(TINY_RUN, checkpoint_every=3)

# fedcli as its own command (its early signal handlers first), pausing at a chosen point until GO exists:
# WHERE = setup (the run folder and its lock exist, no manifest), armed (manifest written, rounds not started),
# round (at the start of round 3), closing (in the manifest's last write), closing-stop (the same after SIGTERM in
# round 3)
CHILD = """
import sys, time
from pathlib import Path
from fedcli.runtime import early
early.install(force=True)
WHERE, GO = sys.argv[1], Path(sys.argv[2])
READY = GO.with_name(GO.name + ".ready")

def pause():
    READY.touch()
    while not GO.exists():
        time.sleep(0.05)

from fedcli.fl import engine
from fedcli.results import sentinel
if WHERE == "setup":
    orig_setup = engine.Simulation.setup
    def setup(self, *a, **k):
        pause()
        return orig_setup(self, *a, **k)
    engine.Simulation.setup = setup
elif WHERE == "armed":
    orig_start = sentinel.start
    def start(*a, **k):
        out = orig_start(*a, **k)
        pause()
        return out
    sentinel.start = start
elif WHERE.startswith("closing"):  # inside the manifest's last write (closing-stop: after a SIGTERM at round 3)
    import os, signal
    from fedcli.results import rundir
    orig_finish = rundir.RunDir.finish
    def finish(self, status, **k):
        pause()
        return orig_finish(self, status, **k)
    rundir.RunDir.finish = finish
    if WHERE == "closing-stop":
        orig_round = engine.Simulation.run_round
        def run_round(self, state):
            if state.round_idx == 2:
                os.kill(os.getpid(), signal.SIGTERM)
            return orig_round(self, state)
        engine.Simulation.run_round = run_round
else:
    orig_round = engine.Simulation.run_round
    def run_round(self, state):
        if state.round_idx == 2 and not GO.exists():
            pause()
        return orig_round(self, state)
    engine.Simulation.run_round = run_round
from fedcli.cli.main import main
sys.exit(main(sys.argv[3:]))
"""


def paused_child(tmp_path: Path, where: str, out: Path, args=TINY):
    go = tmp_path / f"go-{where}"
    p = start_forked(CHILD, [where, go, *args, "--out", out], env=ENV, cwd=tmp_path)
    ready = go.with_name(go.name + ".ready")
    end = time.monotonic() + 240
    while not ready.exists():
        assert p.poll() is None, p.communicate()
        assert time.monotonic() < end, "the child never reached its pause"
        time.sleep(0.05)
    return p, go
