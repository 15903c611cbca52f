"""``--tracker tensorboard``: event files in ``RUN_DIR/tensorboard/`` (``tensorboard --logdir RUN_DIR``, or the sweep
folder to see all its runs side by side).

Scalars by tag at step = local iteration; the config as TensorBoard hyper-parameters (the HParams dashboard) and as a
text table; at the end the manifest as text and the report's figures as images. A resumed run appends new event
files to the same folder (steps it already holds are not written again, ``fedcli.trackers.hook``).
"""

from __future__ import annotations

import json

from fedcli.trackers.base import RunInfo, Tracker, register_tracker

FOLDER = "tensorboard"


@register_tracker
class TensorBoardRun(Tracker):
    name = "tensorboard"
    package = "tensorboard"

    def start(self, run: RunInfo) -> dict:
        from torch.utils.tensorboard import SummaryWriter
        from torch.utils.tensorboard.summary import hparams

        logdir = run.run_dir / FOLDER
        if logdir.is_symlink():
            raise OSError(f"{logdir} is a symbolic link; fedcli does not write through one")
        if not run.saved and logdir.is_dir():  # a new run in this folder (--overwrite): drop the last run's events
            for old in logdir.glob("events.out.tfevents.*"):
                old.unlink()
        self.writer = SummaryWriter(log_dir=str(logdir), flush_secs=30)
        if not run.saved:
            scalars = {k: v for k, v in run.params.items() if isinstance(v, (bool, int, float, str))}
            for summary in hparams(scalars, {"test_acc": float("nan")}):
                self.writer.file_writer.add_summary(summary)
            table = "\n".join(f"| {k} | {v} |" for k, v in {**run.tags, **run.params}.items())
            self.writer.add_text("config", f"| key | value |\n|---|---|\n{table}", 0)
            self.writer.flush()
        return {"logdir": FOLDER}

    def log(self, step: int, values: dict[str, float]) -> None:
        for k, v in values.items():
            self.writer.add_scalar(k, v, step)
        self.writer.flush()

    def finish(self, status: str, files) -> None:
        import matplotlib.image

        for f in files:
            if f.name == "manifest.json":
                self.writer.add_text("manifest", "```\n" + json.dumps(json.loads(f.read_text()), indent=1) + "\n```", 0)
            elif f.suffix == ".png":
                self.writer.add_image(f"figures/{f.stem}", matplotlib.image.imread(str(f))[..., :3], 0, dataformats="HWC")
        self.writer.add_text("status", status, 0)
        self.writer.close()
