"""Checkpoints are verified before use (issue 29, family 2): a digest of every tensor and of the run state is written
with each checkpoint and checked on ``--resume``. A flipped bit in the newest checkpoint is named and the newest
intact one is used (and the resumed run is still bitwise the uninterrupted one); none intact is exit 3 naming the
file; a checkpoint of another seed is refused naming ``--seed``."""

import csv
import json
import os
import shutil
import signal
import struct
import zipfile
from pathlib import Path

import pytest
import torch

from fedcli.cli.main import main
from fedcli.results import checkpoint

# 6 rounds of 2 iterations, a metrics row every round, a checkpoint every round (keep 3)
ARGS = [
    "train",
    "--dataset",
    "digits",
    "--model",
    "mlp",
    "--mlp-hidden",
    "32",
    "--clients",
    "6",
    "--active-ratio",
    "0.5",
    "--algo",
    "fedlama",
    "--tau",
    "1",
    "--phi",
    "2",
    "--iterations",
    "12",
    "--batch-size",
    "16",
    "--lr",
    "0.05",
    "--eval-every",
    "2",
    "--checkpoint-every",
    "1",
    "--keep-checkpoints",
    "3",
    "--device",
    "cpu",
    "--threads",
    "1",
    "--quiet",
]


def run_main(args, capsys):
    try:
        code = main(args)
    except SystemExit as e:
        code = e.code
    return code, capsys.readouterr().err


def rows(path: Path) -> list[dict]:
    with open(path) as f:
        return [{k: v for k, v in r.items() if k != "wall_s"} for r in csv.DictReader(f)]


def stop_in_round(out: Path, round_idx: int, extra=()) -> int:
    """Train ARGS into ``out``, SIGTERM in round ``round_idx`` (0-based): checkpoints of the rounds before it."""
    from fedcli.fl import engine

    sync = engine.Simulation.synchronize

    def signal_me(self, cohort, layers, step, *a, **k):
        if cohort.round_idx == round_idx and step == 1:
            os.kill(os.getpid(), signal.SIGTERM)
        return sync(self, cohort, layers, step, *a, **k)

    engine.Simulation.synchronize = signal_me
    try:
        try:
            return main(ARGS + list(extra) + ["--out", str(out)])
        except SystemExit as e:
            return e.code
    finally:
        engine.Simulation.synchronize = sync


def flip_bit_in_largest_tensor(path: Path, bit: int = 0, offset: int = 17) -> None:
    """Flip one bit inside the data of the largest tensor of a ``torch.save`` zip (the file size is unchanged)."""
    with zipfile.ZipFile(path) as z:
        info = max((i for i in z.infolist() if "/data/" in i.filename), key=lambda i: i.file_size)
    raw = bytearray(path.read_bytes())
    name_len, extra_len = struct.unpack("<HH", raw[info.header_offset + 26 : info.header_offset + 30])
    start = info.header_offset + 30 + name_len + extra_len
    assert info.compress_type == zipfile.ZIP_STORED and info.file_size > offset
    raw[start + offset] ^= 1 << bit
    size = path.stat().st_size
    path.write_bytes(bytes(raw))
    assert path.stat().st_size == size


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    out = tmp_path_factory.mktemp("ref") / "run"
    assert main(ARGS + ["--out", str(out)]) == 0
    return out


@pytest.mark.timeout(300)
def test_a_flipped_bit_in_the_newest_checkpoint_falls_back_to_the_previous_intact_one(reference, tmp_path, capsys):
    out = tmp_path / "run"
    assert stop_in_round(out, 4) == 143  # checkpoints after rounds 2, 3, 4 (keep 3) + the one written on the signal: 5
    capsys.readouterr()
    found = [r for r, _ in checkpoint.list_checkpoints(out)]
    assert found == [3, 4, 5], found
    newest = checkpoint.list_checkpoints(out)[-1][1]
    # control: the intact file loads and verifies
    assert checkpoint.load(newest)["round"] == 5
    flip_bit_in_largest_tensor(newest)
    with pytest.raises(Exception) as e:
        checkpoint.load(newest)
    assert "does not match the digest" in str(e.value) and newest.name in str(e.value)
    code, err = run_main(["train", "--resume", str(out), "--quiet"], capsys)
    assert code == 0, err
    assert "skipping a damaged checkpoint" in err and "round-000005.pt" in err and "does not match the digest" in err
    man = json.loads((out / "manifest.json").read_text())
    assert man["status"] == "completed" and man["resumes"][-1]["checkpoint"] == "round-000004.pt"
    # bitwise resumption still holds, from the older intact checkpoint
    assert rows(out / "metrics.csv") == rows(reference / "metrics.csv") and len(rows(out / "metrics.csv")) == 6
    assert (out / "model.pt").read_bytes() == (reference / "model.pt").read_bytes()


@pytest.mark.timeout(300)
def test_no_intact_checkpoint_is_exit_3_naming_the_file(tmp_path, capsys):
    out = tmp_path / "run"
    assert stop_in_round(out, 2) == 143
    capsys.readouterr()
    before = (out / "metrics.csv").read_bytes()
    for bit, (_, path) in enumerate(checkpoint.list_checkpoints(out)):
        flip_bit_in_largest_tensor(path, bit=bit % 8)
    code, err = run_main(["train", "--resume", str(out), "--quiet"], capsys)
    lines = [l for l in err.splitlines() if l.startswith("fedcli: error:")]
    assert code == 3 and len(lines) == 1 and "Traceback" not in err, err
    assert "round-000003.pt" in lines[0] and "no intact checkpoint" in lines[0] and "digest" in lines[0]
    assert (out / "metrics.csv").read_bytes() == before  # nothing was cut back or continued
    assert json.loads((out / "manifest.json").read_text())["status"] == "interrupted"


@pytest.mark.timeout(300)
def test_an_edited_run_state_is_refused(tmp_path, capsys):
    out = tmp_path / "run"
    assert stop_in_round(out, 2) == 143
    capsys.readouterr()
    for _, path in checkpoint.list_checkpoints(out):  # the loop state edited, the digests left as they were
        ck = torch.load(path, weights_only=True)
        ck["ranks"][0]["state"]["iteration"] += 1
        torch.save(ck, path)
    code, err = run_main(["train", "--resume", str(out), "--quiet"], capsys)
    assert code == 3 and "run state" in err and "digest" in err, err


@pytest.mark.timeout(300)
def test_a_checkpoint_of_another_seed_names_the_seed(tmp_path, capsys):
    mine, other = tmp_path / "mine", tmp_path / "other"
    assert stop_in_round(mine, 3) == 143
    assert stop_in_round(other, 3, ["--seed", "1"]) == 143
    capsys.readouterr()
    shutil.rmtree(mine / "checkpoints")
    shutil.copytree(other / "checkpoints", mine / "checkpoints")
    code, err = run_main(["train", "--resume", str(mine), "--quiet"], capsys)
    lines = [l for l in err.splitlines() if l.startswith("fedcli: error:")]
    assert code == 3 and len(lines) == 1, err
    assert "--seed" in lines[0] and "another run" in lines[0], lines[0]
