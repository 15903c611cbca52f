"""Flower's simulation of the ``fedcli bench`` round workload (run as ``python -m fedcli.bench.flower SETTING OUT
CORES``).

Needs the optional ``bench`` extra (``flwr[simulation]``, which brings Ray). The ``ClientApp`` trains a client
with :func:`fedcli.bench.compare.plain_client_update` on the mini-batches fedcli's plan gives that client in that round;
the ``ServerApp`` runs Flower's ``FedAvg`` (weighted by each client's training samples) for the same rounds and
evaluates the global model centrally after each round (:func:`fedcli.bench.compare.plain_evaluate`). Ray runs one
client per CPU, as many at a time as cores, each process with 1 torch thread. Round time: between two
consecutive central evaluations (local training of the cohort + aggregation + evaluation).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch

from fedcli.bench import compare as bench


def _client_app(setting: dict):
    """Flower's ClientApp: each client's local training (``bench.plain_client_update``) from the global model."""
    from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp

    client_app = ClientApp()

    @client_app.train()
    def train(msg: Message, context: Context) -> Message:
        cfg, dataset, indices, model = bench.cached_setting(setting)  # once per Ray worker process
        client = int(context.node_config["partition-id"])
        round_idx = int(msg.content["config"]["server-round"]) - 1
        model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
        idx, mask = bench.client_plan(cfg, round_idx, client, indices)
        bench.plain_client_update(model, dataset.train_x, dataset.train_y, idx, mask, cfg.lr)
        content = RecordDict(
            {
                "arrays": ArrayRecord(model.state_dict()),
                "metrics": MetricRecord({"num-examples": int(indices[client].numel())}),
            }
        )
        return Message(content=content, reply_to=msg)

    return client_app


def _server_app(cfg, dataset, indices, marks: list, accs: list):
    """Flower's ServerApp: FedAvg over all clients for ``cfg.rounds`` rounds, the central evaluation after each
    appending its accuracy to ``accs`` and its time to ``marks``."""
    from flwr.app import ArrayRecord, Context, MetricRecord
    from flwr.serverapp import Grid, ServerApp
    from flwr.serverapp.strategy import FedAvg

    server_app = ServerApp()

    @server_app.main()
    def server(grid: Grid, context: Context) -> None:
        model = bench.initial_model(cfg, dataset)
        k = len(indices)
        strategy = FedAvg(fraction_train=1.0, fraction_evaluate=0.0, min_train_nodes=k, min_available_nodes=k)

        def central(server_round: int, arrays: ArrayRecord) -> MetricRecord:
            model.load_state_dict(arrays.to_torch_state_dict())
            loss, acc = bench.plain_evaluate(model, dataset.test_x, dataset.test_y)
            if server_round > 0:
                accs.append(acc)
            marks.append(time.perf_counter())
            return MetricRecord({"accuracy": acc, "loss": loss})

        strategy.start(
            grid=grid, initial_arrays=ArrayRecord(model.state_dict()), num_rounds=cfg.rounds, evaluate_fn=central
        )

    return server_app


def main(setting_json: str, out_path: str, cores: int) -> None:
    """Run the setting's FedAvg in Flower's simulation on ``cores`` clients at a time; write its round times and
    accuracies as JSON to ``out_path``."""
    from flwr.simulation import run_simulation

    setting = json.loads(setting_json)
    torch.set_num_threads(1)
    cfg, dataset, indices, _ = bench.cached_setting(setting)
    client_app = _client_app(setting)
    marks, accs = [], []
    server_app = _server_app(cfg, dataset, indices, marks, accs)
    t0 = time.perf_counter()
    run_simulation(
        server_app=server_app,
        client_app=client_app,
        num_supernodes=len(indices),
        backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0}, "init_args": {"num_cpus": cores}},
    )
    times = [b - a for a, b in zip(marks, marks[1:])]
    Path(out_path).write_text(
        json.dumps(
            {
                "system": "flower",
                "impl": f"ClientApp + FedAvg ServerApp, {cores} client(s) at a time x 1 thread",
                "workers": cores,
                "round_times": times,
                "acc": accs,
                "simulation_s": time.perf_counter() - t0,
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
