"""``--tracker tensorboard``: event files in ``RUN_DIR/tensorboard/`` (``tensorboard --logdir RUN_DIR``, or the sweep
folder to see all its runs side by side), written with TensorBoard's own event writer (no torch or TensorFlow import).

Scalars by tag at step = local iteration; the config as TensorBoard hyper-parameters (the HParams dashboard: an
experiment, a session start with every config value, a session end with the run's status) and as a text table; at
the end the manifest as text and the report's figures as images. A resumed run adds an event file to the same folder
(the steps it already holds are not written again, ``fedcli.trackers.worker``).
"""

from __future__ import annotations

import json
import struct
import time

from fedcli.specs.trackers import TENSORBOARD
from fedcli.trackers.base import RunInfo, Tracker

FOLDER = "tensorboard"
SESSION_END = {"completed": 3, "failed": 2, "interrupted": 4}  # hparams api Status: SUCCESS, FAILURE, RUNNING


class TensorBoardRun(Tracker):
    declaration = TENSORBOARD

    def start(self, run: RunInfo) -> dict:
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        logdir = run.run_dir / FOLDER
        if logdir.is_symlink():
            raise OSError(f"{logdir} is a symbolic link; fedcli does not write through one")
        if not run.saved and logdir.is_dir():  # a new run in this folder (--overwrite): drop the last run's events
            for old in logdir.glob("events.out.tfevents.*"):
                old.unlink()
        self.logdir = logdir
        self.writer = EventFileWriter(str(logdir), flush_secs=30)
        if not run.saved:
            hp = {k: v for k, v in run.params.items() if isinstance(v, (bool, int, float, str))}
            self.emit(0, self.hparams_experiment(hp), self.hparams_start(hp))
            table = "\n".join(f"| {k} | {v} |" for k, v in {**run.tags, **run.params}.items())
            self.emit(0, self.text("config", f"| key | value |\n|---|---|\n{table}"))
            self.writer.flush()
        return {"logdir": FOLDER}

    def log(self, step: int, values: dict[str, float]) -> None:
        from tensorboard.compat.proto import summary_pb2

        self.emit(
            step,
            summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=k, simple_value=v) for k, v in values.items()]),
        )
        self.writer.flush()

    def stored_step(self) -> int | None:
        """The last step of a summary in the folder's event files (-1: none); a record cut off by a kill ends its
        file."""
        from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

        last = -1
        for path in sorted(self.logdir.glob("events.out.tfevents.*")):
            try:
                for event in EventFileLoader(str(path)).Load():
                    if event.summary.value:  # the scalars; the config, text and figures are at step 0
                        last = max(last, event.step)
            except Exception:
                continue
        return last

    def finish(self, status: str, files) -> None:
        for f in files:
            if f.name == "manifest.json":
                self.emit(0, self.text("manifest", "```\n" + json.dumps(json.loads(f.read_text()), indent=1) + "\n```"))
            elif f.suffix == ".png":
                self.emit(0, self.image(f"figures/{f.stem}", f.read_bytes()))
        self.emit(0, self.text("status", status), self.hparams_end(status))
        self.writer.close()

    # ---------------------------------------------------------------- summaries (TensorBoard's protocol buffers)
    def emit(self, step: int, *summaries) -> None:
        from tensorboard.compat.proto import event_pb2

        for s in summaries:
            self.writer.add_event(event_pb2.Event(wall_time=time.time(), step=step, summary=s))

    @staticmethod
    def plugin_summary(tag: str, plugin: str, content: bytes = b"", **value):
        from tensorboard.compat.proto import summary_pb2

        meta = summary_pb2.SummaryMetadata(
            plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name=plugin, content=content)
        )
        return summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, metadata=meta, **value)])

    def text(self, tag: str, text: str):
        from tensorboard.compat.proto import tensor_pb2, tensor_shape_pb2, types_pb2

        tensor = tensor_pb2.TensorProto(
            dtype=types_pb2.DT_STRING,
            string_val=[text.encode()],
            tensor_shape=tensor_shape_pb2.TensorShapeProto(dim=[]),
        )
        return self.plugin_summary(tag, "text", tensor=tensor)

    def image(self, tag: str, png: bytes):
        from tensorboard.compat.proto import summary_pb2

        width, height = struct.unpack(">II", png[16:24])  # the PNG IHDR chunk
        return summary_pb2.Summary(
            value=[
                summary_pb2.Summary.Value(
                    tag=tag,
                    image=summary_pb2.Summary.Image(height=height, width=width, colorspace=4, encoded_image_string=png),
                )
            ]
        )

    def hparams(self, tag: str, **data):
        from tensorboard.plugins.hparams import plugin_data_pb2

        return self.plugin_summary(
            f"_hparams_/{tag}", "hparams", plugin_data_pb2.HParamsPluginData(version=0, **data).SerializeToString()
        )

    def hparams_experiment(self, hp: dict):
        from tensorboard.plugins.hparams import api_pb2

        kinds = {bool: api_pb2.DATA_TYPE_BOOL, str: api_pb2.DATA_TYPE_STRING}
        infos = [api_pb2.HParamInfo(name=k, type=kinds.get(type(v), api_pb2.DATA_TYPE_FLOAT64)) for k, v in hp.items()]
        metrics = [
            api_pb2.MetricInfo(name=api_pb2.MetricName(tag=t)) for t in ("test_acc", "test_loss", "comm_pct_of_fedavg")
        ]
        return self.hparams("experiment", experiment=api_pb2.Experiment(hparam_infos=infos, metric_infos=metrics))

    def hparams_start(self, hp: dict):
        from google.protobuf import struct_pb2
        from tensorboard.plugins.hparams import plugin_data_pb2

        start = plugin_data_pb2.SessionStartInfo(start_time_secs=time.time())
        for k, v in hp.items():
            start.hparams[k].CopyFrom(
                struct_pb2.Value(bool_value=v)
                if isinstance(v, bool)
                else struct_pb2.Value(string_value=v)
                if isinstance(v, str)
                else struct_pb2.Value(number_value=float(v))
            )
        return self.hparams("session_start_info", session_start_info=start)

    def hparams_end(self, status: str):
        from tensorboard.plugins.hparams import plugin_data_pb2

        return self.hparams(
            "session_end_info",
            session_end_info=plugin_data_pb2.SessionEndInfo(
                status=SESSION_END.get(status, 2), end_time_secs=time.time()
            ),
        )
