"""Experiment trackers (``--tracker tensorboard|wandb|mlflow``): the run's evaluations, per-layer synchronization
counts and intervals, config, manifest and figures, sent to the tools researchers watch runs in.

The CSVs of the run directory stay the source of truth; a tracker is a round hook beside their writer
(``fedcli.trackers.hook.TrackerHook``) that hands what each round produced to a process of their own
(``fedcli.trackers.worker``), so a slow or failing tracker never stops or slows the training (it warns once and is off
for the rest of the run), and ``fedcli train`` does not wait for their end work (``fedcli.trackers.state``).
One small module per tracker, each a :class:`~fedcli.trackers.base.Tracker` registered by name; the tracking
libraries are imported only when a run asks for one (``fedcli --version`` and ``fedcli report`` never load them).
"""

from fedcli.trackers.base import TRACKERS, Tracker, check_trackers, register_tracker, tracker_names
from fedcli.trackers.mlflow_run import MLflowRun
from fedcli.trackers.tensorboard_run import TensorBoardRun
from fedcli.trackers.wandb_run import WandbRun

for _builtin in (MLflowRun, TensorBoardRun, WandbRun):  # the built-in trackers (no tracking library imported)
    register_tracker(_builtin)

__all__ = ["TRACKERS", "Tracker", "check_trackers", "register_tracker", "tracker_names"]
