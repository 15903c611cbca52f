"""SCAFFOLD, option II: the control-variate step worked out by hand, and a run that matches it with what the ledger
counts (digits + a small MLP, seconds)."""

import torch

from baselines_kit import data, sim_of
from fedcli.fl.clientstate import close_round, open_round
from fedcli.fl.cohort import Cohort
from fedcli.results.runlog import layer_rows


def test_scaffold_option2_hand_computed(data):
    """Constant gradient 1: the control variates become 1 (option II: c_i+ = c_i - c + (x - y_i) / (K lr)),
    with momentum and a changing lr too (the normalization by the lr actually used and by momentum)."""
    for momentum in (0.0, 0.9):
        sim = sim_of(data, algo="scaffold", momentum=momentum)
        mine = [0, 2, 5, 7]
        cohort = Cohort.from_global(mine, sim.cohort_weights(mine, mine), sim.global_params, sim.global_buffers)
        cohort.cohort_ids = mine
        step = sim.local_step
        open_round(step, sim.view, cohort)
        ones = {n: torch.ones_like(p) for n, p in cohort.params.items()}
        start = {n: p.clone() for n, p in cohort.params.items()}
        for lr in (0.1, 0.2, 0.3):
            step.step(cohort, ones, lr)
        if momentum == 0.0:  # x - y_i = (0.1 + 0.2 + 0.3) * 1
            for n in start:
                assert torch.allclose(start[n] - cohort.params[n], torch.full_like(start[n], 0.6))
        close_round(step, sim.view, cohort)
        for n, p in sim.global_params.items():
            for c in mine:
                assert torch.allclose(sim.store.tables[f"scaffold.c_i:{n}"][c], torch.ones_like(p))
            # c = (|S| / N) * mean_i (c_i+ - c_i) = (4 / 8) * 1
            assert torch.allclose(step.c[n], torch.full_like(p, 0.5))
        # next round: a client's direction is g - c_i + c: 1 - 1 + 0.5 for one seen before, 1 + 0.5 for a new one
        nxt = [2, 3]
        cohort2 = Cohort.from_global(nxt, sim.cohort_weights(nxt, nxt), sim.global_params, sim.global_buffers)
        open_round(step, sim.view, cohort2)
        d = step.direction(cohort2, {n: torch.ones_like(p) for n, p in cohort2.params.items()})
        for n in d:
            assert torch.allclose(d[n][0], torch.full_like(d[n][0], 0.5))
            assert torch.allclose(d[n][1], torch.full_like(d[n][1], 1.5))


def test_scaffold_run_matches_option2_and_ledger(data):
    """In a real run (plain SGD, constant lr, periodic): c_i+ = c_i - c + (x - y_i) / (K lr) with y_i the
    local model just before the round's synchronization; the ledger adds c down and c_i up."""
    sim = sim_of(data, algo="scaffold", iterations=8)
    seen = []
    sync = sim.synchronize

    def spy(cohort, layers, step, last_sync, round_end, **kw):
        st = sim.local_step
        seen.append(
            {
                "clients": list(cohort.clients),
                "x": {n: p.clone() for n, p in sim.global_params.items()},
                "y": {n: p.clone() for n, p in cohort.params.items()},
                "c": {n: t.clone() for n, t in st.c.items()},
                "c_i": {n: t.clone() for n, t in st.c_i.items()},
            }
        )
        return sync(cohort, layers, step, last_sync, round_end=round_end, **kw)

    checked = []

    def hook(sim_, state):
        r = seen[-1]
        for n in r["x"]:
            want = r["c_i"][n] - r["c"][n] + (r["x"][n] - r["y"][n]) / (4 * 0.05)
            for k, c in enumerate(r["clients"]):
                torch.testing.assert_close(sim.store.tables[f"scaffold.c_i:{n}"][c], want[k], rtol=1e-4, atol=1e-5)
            torch.testing.assert_close(
                sim.local_step.c[n], r["c"][n] + (want - r["c_i"][n]).sum(0) / 8, rtol=1e-4, atol=1e-6
            )
        checked.append(state.round_idx)

    sim.synchronize = spy
    sim.add_round_hook(hook)
    s = sim.run()
    assert checked == [1, 2] and len(seen) == 2
    assert any(float(t.abs().max()) > 0 for t in seen[1]["c"].values())  # round 2 used a nonzero c
    total = sum(li.numel for li in sim.layers)
    assert s.comm_params == 2 * total  # Eq. 8 over the model layers only
    model_bytes = 2 * 4 * total * (32 + 32) / 8
    assert s.comm_bytes == model_bytes + 2 * (2 * 4 * total * 4)  # 2 rounds x (c down + c_i up) x 4 clients
    assert sum(r["comm_bytes"] for r in layer_rows(sim)) == s.comm_bytes
