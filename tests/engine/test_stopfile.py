"""The stop file (fedcli/results/stopfile.py): a request to stop a run at a round boundary, written whole and never
through a link, read back whatever a person or a crash left there; a pruned manifest's state and label."""

import json
import os

import pytest

from fedcli.errors import ConfigError, Pruned
from fedcli.results import stopfile
from fedcli.results.runstate import PRUNED, run_state
from fedcli.results.validate import pruned, status_label
from fedcli.safefs import LinkRefused


def test_request_read_clear_round_trip(tmp_path):
    rec = stopfile.request_stop(tmp_path, why="below the median at iteration 40", iteration=40)
    assert set(rec) == {"reason", "why", "iteration", "at"} and rec["reason"] == "pruned" and rec["iteration"] == 40
    assert rec["at"].endswith("Z") and len(rec["at"]) == 20  # 2026-11-29T05:00:00Z
    on_disk = json.loads((tmp_path / "stop.json").read_text())
    assert on_disk == rec
    assert stopfile.read_stop(tmp_path) == rec
    assert [p.name for p in tmp_path.iterdir()] == ["stop.json"]  # no temporary file left beside it
    assert stopfile.stop_requested(tmp_path)
    assert stopfile.clear_stop(tmp_path) is True
    assert stopfile.read_stop(tmp_path) is None and not stopfile.stop_requested(tmp_path)
    assert stopfile.clear_stop(tmp_path) is False
    assert stopfile.EXIT_PRUNED == Pruned.exit_code == 5


def test_due_is_the_first_boundary_at_or_after_the_iteration():
    assert stopfile.due({"iteration": None}, 0)
    assert not stopfile.due({"iteration": 20}, 16)
    assert stopfile.due({"iteration": 20}, 20) and stopfile.due({"iteration": 20}, 24)


@pytest.mark.parametrize(
    "kwargs,word",
    [
        ({"reason": "done"}, "reason"),
        ({"iteration": -1}, "iteration"),
        ({"iteration": 2.5}, "iteration"),
        ({"iteration": True}, "iteration"),
    ],
)
def test_bad_request_refused_nothing_written(tmp_path, kwargs, word):
    with pytest.raises(ConfigError, match=word):
        stopfile.request_stop(tmp_path, **kwargs)
    assert list(tmp_path.iterdir()) == []


def test_request_needs_the_run_folder(tmp_path):
    with pytest.raises(ConfigError, match="no such run folder"):
        stopfile.request_stop(tmp_path / "nope")
    assert not (tmp_path / "nope").exists()


def test_request_never_writes_through_a_link(tmp_path):
    target = tmp_path / "elsewhere.json"
    target.write_text("keep\n")
    run = tmp_path / "run"
    run.mkdir()
    (run / "stop.json").symlink_to(target)
    with pytest.raises(LinkRefused):
        stopfile.request_stop(run, why="x")
    assert target.read_text() == "keep\n"
    assert stopfile.clear_stop(run) is True  # the link goes, never what it points to
    assert target.read_text() == "keep\n" and not os.path.lexists(run / "stop.json")


@pytest.mark.parametrize(
    "text,what",
    [
        ("", "is not JSON (0 bytes)"),
        ('{"reason": "pru', "is not JSON (15 bytes)"),
        ("[1, 2]", "holds a JSON list, not an object"),
        (b"\xff\xfe", "is not JSON (2 bytes)"),
    ],
)
def test_malformed_file_is_still_a_request(tmp_path, text, what):
    f = tmp_path / "stop.json"
    f.write_bytes(text if isinstance(text, bytes) else text.encode())
    req = stopfile.read_stop(tmp_path)
    assert req["reason"] == "pruned" and req["iteration"] is None and req["at"] is None
    assert req["malformed"] == f"{f} {what}" and req["why"] == f"{f} {what}; stopped on its presence"


def test_malformed_fields_dropped_the_good_ones_kept(tmp_path):
    (tmp_path / "stop.json").write_text(json.dumps({"reason": "bored", "why": "w", "iteration": "12", "at": 3}))
    req = stopfile.read_stop(tmp_path)
    assert req["reason"] == "pruned" and req["iteration"] is None and req["at"] is None
    assert req["why"].startswith("w (") and "reason 'bored'" in req["why"] and "iteration '12'" in req["why"]
    (tmp_path / "stop.json").write_text(json.dumps({"why": "hand", "iteration": 8}))
    assert stopfile.read_stop(tmp_path) == {"reason": "pruned", "why": "hand", "iteration": 8, "at": None}


def _manifest(run, **m):
    run.mkdir(parents=True, exist_ok=True)
    (run / "manifest.json").write_text(json.dumps({"config": {"lr": 0.1}, **m}))


def test_pruned_manifest_state_and_label(tmp_path):
    where = {"iteration": 20, "round": 5, "why": "hopeless"}
    _manifest(tmp_path / "p", status="interrupted", reason="pruned", pruned=where, world_size=1)
    man = json.loads((tmp_path / "p" / "manifest.json").read_text())
    assert pruned(man) == where and status_label(man) == "pruned"
    st = run_state(tmp_path / "p", {"lr": 0.1})
    assert st.state == PRUNED == "pruned" and not st.resumable
    assert st.words() == (
        f"pruned: at iteration 20 (round 5): hopeless; kept as it stands; fedcli train --resume "
        f"{tmp_path / 'p'} --promote finishes it"
    )
    # another config: stale wins (a sweep trains it over)
    assert run_state(tmp_path / "p", {"lr": 0.2}).state == "stale"
    # an interrupted run that was not pruned, and a pruned mark beside another status: not pruned
    _manifest(tmp_path / "i", status="interrupted", error="Interrupted: SIGTERM")
    _manifest(tmp_path / "f", status="failed", reason="pruned")
    for name, label in (("i", "interrupted"), ("f", "failed")):
        man = json.loads((tmp_path / name / "manifest.json").read_text())
        assert pruned(man) is None and status_label(man) == label and run_state(tmp_path / name).state == label
