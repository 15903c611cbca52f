"""Per-client state as one helper (``fedcli.fl.clientstate.ClientState``, FedJAX's client_init / client_final): a
part declares it once (name, shape, default) and loads and saves it for a cohort; the empty cohort, the skipped
clients and the store keys are the helper's, in memory and on disk alike."""

import pytest
import torch

from fedcli.comm.communicator import Communicator
from fedcli.fl.clientstate import BUFFERS, GLOBAL, ClientState
from fedcli.fl.cohort import Cohort
from fedcli.fl.store import DiskStore, MemoryStore
from fedcli.fl.view import PartView

GLOB = {"w": torch.tensor([1.0, 2.0]), "b": torch.tensor(3.0, dtype=torch.float64)}
BUF = {"bn.mean": torch.tensor([0.5])}


def view_of(store):
    return PartView.fake(
        global_params=GLOB,
        global_buffers=BUF,
        store=store,
        comm=Communicator(),
        full_participation=False,
        device=torch.device("cpu"),
    )


def cohort_of(clients, skipped=()):
    one = torch.ones(len(clients), dtype=torch.float64)
    c = Cohort(list(clients), one, {n: g.expand(len(clients), *g.shape).clone() for n, g in GLOB.items()}, {})
    c.skipped = set(skipped)
    return c


@pytest.fixture(params=["memory", "disk"])
def store(request, tmp_path):
    s = MemoryStore() if request.param == "memory" else DiskStore(tmp_path / "store")
    yield s
    s.close()


def test_load_gives_the_default_then_what_was_saved_and_a_skipped_client_keeps_its_row(store):
    view = view_of(store)
    state = ClientState("m.x")  # one row per parameter tensor, zeros
    rows = state.load(view, cohort_of([4, 9]))
    assert list(rows) == ["w", "b"] and rows["w"].shape == (2, 2) and rows["b"].dtype == torch.float64
    assert all(float(t.abs().sum()) == 0 for t in rows.values())
    state.save(
        view,
        cohort_of([4, 9]),
        {"w": torch.tensor([[1.0, 1.0], [2.0, 2.0]]), "b": torch.tensor([5.0, 6.0], dtype=torch.float64)},
    )
    state.save(
        view,
        cohort_of([4, 9], skipped={9}),
        {"w": torch.full((2, 2), 7.0), "b": torch.tensor([8.0, 9.0], dtype=torch.float64)},
    )
    again = state.load(view, cohort_of([9, 4, 1]))
    assert again["w"].tolist() == [[2.0, 2.0], [7.0, 7.0], [0.0, 0.0]]  # 9 skipped: its old row; 1: the default
    assert again["b"].tolist() == [6.0, 8.0, 0.0]
    assert store.get("m.x:w", 4).tolist() == [7.0, 7.0]  # the key: name:tensor, built by the helper


def test_the_empty_cohort_is_handled_inside():
    view = view_of(MemoryStore())
    rows = ClientState("m.x").load(view, cohort_of([]))
    assert {n: (tuple(t.shape), t.dtype) for n, t in rows.items()} == {
        "w": ((0, 2), torch.float32),
        "b": ((0,), torch.float64),
    }
    ClientState("m.x").save(view, cohort_of([]), rows)  # collective: a process without clients calls it too
    single = ClientState("s.p", (3,), dtype=torch.float64)
    assert single.load(view, []).shape == (0, 3)


def test_defaults_shapes_and_keys():
    view = view_of(MemoryStore())
    assert ClientState("g", default=GLOBAL).load(view, [2])["w"].tolist() == [[1.0, 2.0]]
    assert ClientState("o", default=1.0).load(view, [2])["b"].dtype == torch.float64
    assert ClientState("o", default=1.0).load(view, [2])["w"].tolist() == [[1.0, 1.0]]
    assert ClientState("bn", BUFFERS, GLOBAL).load(view, [0, 1])["bn.mean"].tolist() == [[0.5], [0.5]]
    own = ClientState("p", (3,), default=lambda c, zeros: zeros.index_fill_(0, torch.tensor(c), 1.0))
    assert own.load(view, [2, 0]).tolist() == [[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]
    assert ClientState("h").load(view, [1], names={"w"}).keys() == {"w"}  # a subset of the tensors (FedRep's head)
    assert (
        ClientState("adaptive.m", sep="/").key("w") == "adaptive.m/w"
        and ClientState("apple.p", (3,)).key() == "apple.p"
    )


def test_the_copies_a_part_declares_are_recorded_around_its_round():
    """Issue 60: copies a part sends every round are declared (``Cost(down=, up=)``, SCAFFOLD's c and c_i+ - c_i),
    and the engine records them around the part's round. By hand: 3 clients, a layer of 5 elements, 4 bytes each;
    1 copy down before ``begin_round``, 2 up after ``end_round``: 3 x 3 x 5 x 4 = 180 bytes, 40 up and 20 down a
    client."""
    from fedcli.comm.ledger import Ledger
    from fedcli.fl import clientstate
    from fedcli.fl.parts import Part
    from fedcli.specs import Cost

    seen = []

    class Sends(Part):
        cost = Cost(down=1, up=2)

        def begin_round(self, view, cohort):
            seen.append(("begin", view.ledger.bytes_[0]))

        def end_round(self, view, cohort):
            seen.append(("end", view.ledger.bytes_[0]))

    ledger = Ledger([5])
    view = PartView.fake(ledger=ledger, n_active=3, global_params={"w": torch.zeros(5)})
    part = Sends.__new__(Sends)
    cohort = Cohort([0, 1, 2], torch.full((3,), 1 / 3, dtype=torch.float64), {}, {})
    clientstate.open_round(part, view, cohort)
    clientstate.close_round(part, view, cohort)
    assert seen == [("begin", 60.0), ("end", 60.0)] and ledger.bytes_ == [180.0]
    assert ledger.take_round() == ([40.0], [20.0])
