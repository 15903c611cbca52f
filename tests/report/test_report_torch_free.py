"""What the report reads of a part (its label, whether its intervals differ by layer, the weights it learns) is
declared on its spec (``fedcli.specs.PartSpec``: ``label``, ``layerwise``, ``learned_weights``), so the report reads
it without importing torch (issue 60, item 4: ``part_label("schedule", "lama")`` imported every torch part class)."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROGRAM = """
import json, sys
from pathlib import Path
from fedcli.reports.rundata import RunData, part_label

run_dir = Path(sys.argv[1])
run = RunData(run_dir)
print(json.dumps({
    "labels": [part_label("schedule", "lama"), part_label("schedule", "lama-accelerate"), part_label("init", "ala"),
               part_label("schedule", "periodic"), part_label("init", "nosuch"), part_label("codec", None)],
    "layerwise": run.layerwise, "learned_init": run.learned_init, "ala_params": run.ala_params,
    "label": run.method_label(), "torch": "torch" in sys.modules}))
"""


def test_the_report_reads_what_a_part_declares_without_torch(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    # a manifest that records neither layerwise nor learned_weights (a run from before they were): the specs say
    manifest = {
        "status": "completed",
        "config": {"algo": "fedavg", "schedule": "lama", "init": "ala", "ala_layers": 2, "tau": 5, "phi": 2},
        "method": {"name": "fedavg", "label": "FedAvg"},
    }
    (run / "manifest.json").write_text(json.dumps(manifest))
    # four tensors in parameter order; ALA's last --ala-layers 2 of them: 30 + 3 = 33 weights (FedALA Tables 1, 6)
    (run / "layers.csv").write_text("layer,name,numel\n0,a,10\n1,b,5\n2,c,30\n3,d,3\n")
    p = subprocess.run(
        [sys.executable, "-c", PROGRAM, str(run)],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout)
    assert got == {
        "labels": ["FedLAMA", "FedLAMA", "ALA", None, None, None],
        "layerwise": True,
        "learned_init": True,
        "ala_params": 33.0,
        "label": "FedAvg + ALA + FedLAMA",
        "torch": False,
    }


def test_each_part_class_gets_what_its_spec_declares():
    from fedcli.fl.algorithms.fedala import ALAInit
    from fedcli.fl.algorithms.fedlama import Lama, LamaAccelerate
    from fedcli.fl.parts import OverwriteInit
    from fedcli.fl.schedules import LayerwiseSchedule, Periodic

    assert (Lama.label, LamaAccelerate.label, ALAInit.label, Periodic.label) == ("FedLAMA", "FedLAMA", "ALA", None)
    assert (LayerwiseSchedule.layerwise, Lama.layerwise, Periodic.layerwise) == (True, True, False)
    # the init's class method reads the spec: --ala-layers 1 of [4, 6, 8] -> 8; --ala-layers 0 -> 0; plain: none
    assert (
        ALAInit.learned_weights({"ala_layers": 1}, [4, 6, 8]),
        ALAInit.learned_weights({"ala_layers": 0}, [4]),
        OverwriteInit.learned_weights({}, [4]),
    ) == (8, 0, None)
