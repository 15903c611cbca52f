"""``--tracker wandb``: one Weights & Biases run, its local files in ``RUN_DIR/wandb/``.

Offline (``wandb sync RUN_DIR/wandb/offline-run-*`` uploads it later) unless an API key is set (``WANDB_API_KEY``
or ``wandb login``'s netrc entry); ``WANDB_MODE`` decides when set. Project: a sweep's folder name (one project per
sweep), else ``WANDB_PROJECT`` or ``fedcli``; group: the sweep's run (its seeds side by side); name: ``<run
slug>/seed<k>`` or the run folder's name; tags ``key:value`` (method, dataset, model, seed, scale). Config: the
resolved config and the method's parts. No console capture or system metrics (they would cost the training time).
At the end the manifest, CSVs and the report's figures are copied into the run's files, through descriptors of its
folders reached from the run folder without following a link (``fedcli.safefs.open_dir``). A resume continues the
same run id (in ``trackers.json``).
"""

from __future__ import annotations

import netrc
import os
import shutil
from pathlib import Path
from urllib.parse import urlparse

from fedcli.specs.trackers import WANDB
from fedcli.trackers.base import FIGURE_SUFFIXES, RunInfo, Tracker


def has_api_key() -> bool:
    """An API key in the environment or in the netrc entry ``wandb login`` writes for the W&B host."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname
    try:
        return netrc.netrc(os.environ.get("NETRC")).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


class WandbRun(Tracker):
    declaration = WANDB

    def start(self, run: RunInfo) -> dict:
        import wandb

        self.run_dir = Path(run.run_dir)
        mode = os.environ.get("WANDB_MODE") or ("online" if has_api_key() else "offline")
        settings = wandb.Settings(
            console="off",
            quiet=True,
            silent=True,
            x_disable_stats=True,
            x_disable_meta=True,
            save_code=False,
            disable_git=True,
            x_save_requirements=False,
        )
        project = run.experiment or os.environ.get("WANDB_PROJECT") or "fedcli"
        saved = run.saved.get("id")
        self.run = wandb.init(
            project=project,
            name=run.name,
            group=run.tags.get("run") or None,
            tags=[f"{k}:{v}"[:64] for k, v in run.tags.items()],
            config=run.params,
            dir=str(run.run_dir),
            id=saved,
            resume="allow" if saved else None,
            mode=mode,
            settings=settings,
            reinit="create_new",
        )
        return {"id": self.run.id, "project": project, "mode": mode}

    def log(self, step: int, values: dict[str, float]) -> None:
        self.run.log(values, step=step)

    def finish(self, status: str, files) -> None:
        """The run's ``files`` copied into W&B's files folder of the run (figures into its ``figures/``), each written
        through its folder's descriptor, opened one folder at a time from the run folder without following a link (a
        link there, whenever planted, is refused), then the run closed."""
        from fedcli.safefs import open_dir, writing_into

        files_dir = Path(self.run.dir)
        with writing_into(getattr(self, "run_dir", files_dir)):
            for f in files:
                with (
                    open_dir(files_dir / ("figures" if f.suffix in FIGURE_SUFFIXES else "")) as d,
                    open(f, "rb") as src,
                    d.open_file(f.name, "wb") as dst,
                ):
                    shutil.copyfileobj(src, dst)
        self.run.summary["status"] = status
        self.run.finish(exit_code=0 if status == "completed" else 1)
