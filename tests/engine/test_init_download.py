"""The init part's round contract: ``download`` (the engine calls it once per round, right before ``initialize``, on
every process) does the server's work of sending the models: exchanges, the ledger, per-client server state;
``received`` only returns what it prepared. FedFomo's extra downloads worked by hand on 4 clients."""

import pytest
import torch

from fedcli.data.setup import load_data_and_partition
from fedcli.fl.cohort import Cohort
from fedcli.fl.engine import Simulation
from fedcli.fl.parts import Init, OverwriteInit
from simkit import personal_config as config


@pytest.fixture(scope="module")
def data():
    return load_data_and_partition(config())


def after_round_0(data, **kw):
    """A simulation that ran round 0 (every client uploaded a model) and the cohort of round 1, as the engine makes
    it."""
    sim = Simulation(config(rounds=1, **kw)).setup(*data)
    sim.run()
    ids = list(range(len(sim.client_indices)))
    cohort = Cohort.from_global(ids, sim.cohort_weights(ids, ids), sim.global_params, sim.global_buffers)
    cohort.round_idx, cohort.cohort_ids = 1, ids
    return sim, cohort


def snapshot(sim) -> tuple[list[float], dict]:
    return list(sim.ledger.bytes_), {n: {c: t.clone() for c, t in tab.items()} for n, tab in sim.store.tables.items()}


def same_snapshot(a, b) -> bool:
    (bytes_a, store_a), (bytes_b, store_b) = a, b
    return (
        bytes_a == bytes_b
        and store_a.keys() == store_b.keys()
        and all(
            store_a[n].keys() == store_b[n].keys()
            and all(torch.equal(store_a[n][c], store_b[n][c]) for c in store_a[n])
            for n in store_a
        )
    )


def test_the_default_sends_the_global_model_and_downloads_nothing(data):
    sim, cohort = after_round_0(data)
    assert type(sim.init) is OverwriteInit and OverwriteInit.download is Init.download
    before = snapshot(sim)
    sim.init.download(sim.view, cohort)
    rec = sim.init.received(sim.view, cohort)
    assert same_snapshot(before, snapshot(sim)) and cohort.state == {}
    assert all(rec[n].shape == (1, *g.shape) and torch.equal(rec[n][0], g) for n, g in sim.global_params.items())


def test_fedfomo_download_records_the_extra_copies_once_and_received_is_a_query(data):
    """M = 3 of 4 clients: each downloads 3 models, the engine counts one, so (3 - 1) * 4 = 8 extra model copies of
    4 bytes per element: the MLP 64-32-10's tensors (2048, 32, 320, 10 elements) get 8 * 4 * numel bytes each."""
    sim, cohort = after_round_0(data, algo="fedfomo", fomo_m=3)
    assert [li.numel for li in sim.layers] == [2048, 32, 320, 10]
    bytes0 = list(sim.ledger.bytes_)
    rows0 = {c: t.clone() for c, t in sim.store.tables.get("fomo.P", {}).items()}
    sim.init.download(sim.view, cohort)
    extra = [b - a for a, b in zip(bytes0, sim.ledger.bytes_)]
    assert extra == [65536.0, 1024.0, 10240.0, 320.0] and sum(extra) == 8 * 2410 * 4
    rows = sim.store.tables["fomo.P"]  # the affinity rows moved from e_i (round 0 kept none)
    assert (
        rows0 == {} and sorted(rows) == [0, 1, 2, 3] and not torch.equal(rows[0], torch.eye(4, dtype=torch.float64)[0])
    )
    # received: the prepared aggregates, the same object every time, and nothing recorded, stored or exchanged
    before = snapshot(sim)
    first, second = sim.init.received(sim.view, cohort), sim.init.received(sim.view, cohort)
    assert first is second and all(t.shape == (4, *sim.global_params[n].shape) for n, t in first.items())
    assert same_snapshot(before, snapshot(sim)) and cohort.state == {}


def test_fedfomo_round_0_downloads_only_the_initial_model(data):
    sim = Simulation(config(algo="fedfomo", fomo_m=3, rounds=1)).setup(*data)
    ids = list(range(4))
    cohort = Cohort.from_global(ids, sim.cohort_weights(ids, ids), sim.global_params, sim.global_buffers)
    before = snapshot(sim)
    sim.init.download(sim.view, cohort)
    rec = sim.init.received(sim.view, cohort)
    assert list(sim.ledger.bytes_) == before[0] and "fomo.P" not in sim.store.tables
    assert all(torch.equal(rec[n], g.expand(4, *g.shape)) for n, g in sim.global_params.items())  # nobody trained yet


def test_fedamp_download_makes_the_clouds_once(data):
    sim, cohort = after_round_0(data, algo="fedamp", amp_alpha=1.0, amp_sigma=10.0)
    sim.init.download(sim.view, cohort)
    u = sim.init.clouds
    sim.local_step.begin_round(sim.view, cohort)  # the local step reads the same u_i, it does not compute them again
    assert (
        sim.local_step.clouds is u
        and sim.init.received(sim.view, cohort) is u
        and sim.init.received(sim.view, cohort) is u
    )
    assert sim.view.offered("amp.clouds", cohort) is u and cohort.state == {}  # offered through the declared capability


@pytest.mark.parametrize("algo", ["fedfomo", "fedamp"])
def test_ala_downloads_through_the_method_and_receives_what_it_prepared(data, algo):
    sim, cohort = after_round_0(data, algo=algo, init="ala")
    bytes0 = list(sim.ledger.bytes_)
    sim.init.download(sim.view, cohort)
    per_copy = [4.0 * li.numel for li in sim.layers]
    copies = (4 - 1) * 4 if algo == "fedfomo" else 0  # FedFomo's M = 0: all 4 clients
    assert [b - a for a, b in zip(bytes0, sim.ledger.bytes_)] == [copies * p for p in per_copy]
    assert sim.init.received(sim.view, cohort) is sim.init.base.received(sim.view, cohort)


@pytest.mark.parametrize("algo", ["fedfomo", "fedamp", "fedavg-c"])
def test_the_engine_downloads_once_per_round_before_initializing(data, algo):
    sim = Simulation(config(algo=algo, init="ala", rounds=3)).setup(*data)
    calls = []
    for hook in ("download", "initialize"):
        orig = getattr(sim.init, hook)

        def traced(s, cohort, orig=orig, hook=hook):
            calls.append((cohort.round_idx, hook))
            return orig(s, cohort)

        setattr(sim.init, hook, traced)
    sim.run()
    assert calls == [(r, h) for r in range(3) for h in ("download", "initialize")]
