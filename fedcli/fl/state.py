"""Where a run stands: its summary, the state between rounds that a checkpoint keeps, what the last round produced,
and the round-indexed rules over them (the learning rate, the evaluation points). The engine
(``fedcli.fl.engine.Simulation``) owns one of each; docs/architecture.md, "The engine"."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fedcli.config import TrainConfig


@dataclass
class Summary:
    rounds: int = 0
    iteration: int = 0
    final_acc: float = float("nan")
    best_acc: float = float("nan")
    best_iteration: int = 0
    final_loss: float = float("nan")
    comm_params: int = 0
    comm_bytes: float = 0.0
    fedavg_comm_params: int = 0
    wall_s: float = 0.0
    history: list = field(default_factory=list)
    best_personal_acc: float = float("nan")  # personalized methods: best personal_acc (pFedMe/FedALA report it) ...
    best_personal_round: int = 0  # ... and the round of that evaluation
    final_personal_acc: float = float("nan")

    def add(self, row: dict, personal: float | None) -> None:
        """An evaluation's metrics ``row`` (and its ``personal`` accuracy, or None) into the history, the best and the
        final numbers (the best: the first evaluation with the highest accuracy)."""
        acc = row["test_acc"]
        self.history.append(row)
        if math.isnan(self.best_acc) or acc > self.best_acc:
            self.best_acc, self.best_iteration = acc, row["iteration"]
        self.final_acc, self.final_loss = acc, row["test_loss"]
        if personal is not None:
            if math.isnan(self.best_personal_acc) or personal > self.best_personal_acc:
                self.best_personal_acc, self.best_personal_round = personal, row["round"]
            self.final_personal_acc = personal

    def close(self, state: TrainState, ledger, numel: int, cfg: TrainConfig) -> None:
        """The run's end (``Simulation.run``): its rounds and iterations, what the ``ledger`` counted, and FedAvg's
        parameters over the same budget (``numel`` per synchronization: the 100% of :attr:`comm_pct`)."""
        from fedcli.comm.ledger import fedavg_params_so_far

        self.rounds, self.iteration = state.round_idx, state.iteration
        self.comm_params, self.comm_bytes = ledger.params, ledger.bytes
        self.fedavg_comm_params = fedavg_params_so_far(
            numel, state.iteration, state.round_idx, cfg.tau, bool(cfg.local_epochs)
        )

    @property
    def comm_pct(self) -> float:
        return 100.0 * self.comm_params / self.fedavg_comm_params if self.fedavg_comm_params else float("nan")

    def as_dict(self) -> dict:
        return {
            "rounds": self.rounds,
            "iterations": self.iteration,
            "final_acc": self.final_acc,
            "best_acc": self.best_acc,
            "best_iteration": self.best_iteration,
            "final_test_loss": self.final_loss,
            "comm_params": self.comm_params,
            "comm_bytes": self.comm_bytes,
            "fedavg_comm_params": self.fedavg_comm_params,
            "comm_pct_of_fedavg": self.comm_pct,
            "wall_s": self.wall_s,
            **(
                {}
                if math.isnan(self.best_personal_acc)
                else {  # personalized methods only
                    "best_personal_acc": self.best_personal_acc,
                    "best_personal_round": self.best_personal_round,
                    "final_personal_acc": self.final_personal_acc,
                }
            ),
        }


@dataclass
class TrainState:
    """Where a run stands between rounds: everything ``run`` needs to continue (checkpointed)."""

    iteration: int = 0
    round_idx: int = 0
    next_eval: int = 0
    loss_sum: float = 0.0  # sum over (client, round) of the round's mean local loss, since the last evaluation
    loss_count: int = 0
    wall_s: float = 0.0
    skipped: int = 0  # client updates dropped so far by --on-diverge skip-client (metrics.csv skipped_clients)
    sim_time_s: float = 0.0  # --system: simulated seconds of the rounds done (fedcli.fl.system)
    layer_time_s: list = field(default_factory=list)  # --system: simulated seconds of each layer's synchronizations
    summary: Summary = field(default_factory=Summary)


@dataclass
class RoundRecord:
    """What the round just done produced, for the round hooks (``fedcli.results.runlog`` writes it to the CSVs)."""

    round: int = 0
    start_iteration: int = 0  # the iteration the round started at
    skips: list = field(default_factory=list)  # client updates dropped by --on-diverge skip-client (Cohort.skips)
    adjustment: object = None  # the schedule's interval adjustment at the round's end, or None
    metrics: dict | None = None  # the evaluation's metrics row, when the round ended at an evaluation
    system: dict | None = None  # --system: the round's system.csv row (SystemModel.round_row)
    timing: dict | None = None  # a run that can be re-timed: its timing.csv row (fedcli.fl.timing)


def lr_at(cfg: TrainConfig, iteration: int, round_idx: int) -> float:
    """Local learning rate at a global iteration: linear warm-up (Goyal et al. 2017), then step decay."""
    lr = cfg.lr
    if cfg.warmup_iterations and iteration < cfg.warmup_iterations:
        lr = cfg.lr * (iteration + 1) / cfg.warmup_iterations
    at = iteration if cfg.lr_decay_unit == "iteration" else round_idx
    decays = sum(1 for p in cfg.decay_points() if at >= p)
    return lr * cfg.lr_decay_factor**decays


def evaluation_points(points: list[int], eval_every: int) -> list[int]:
    """The round ends (progress ``points``: iterations, or rounds under a round budget, increasing, the last one
    the end of the budget) at which ``Simulation.run`` evaluates: the first at or after each multiple of
    ``eval_every``, and the last."""
    out, next_eval = [], eval_every
    for i, p in enumerate(points):
        if p >= next_eval or i == len(points) - 1:
            out.append(p)
            while next_eval <= p:
                next_eval += eval_every
    return out


def eval_interval(cfg: TrainConfig, plan) -> int:
    """The evaluation interval: ``--eval-every``, or about 20 evaluations over the budget (rounds under a round
    budget, else iterations, at least one round)."""
    if cfg.rounds:
        return cfg.eval_every or max(1, math.ceil(cfg.rounds / 20))
    return cfg.eval_every or max(plan.round_length, math.ceil(cfg.iterations / 20))


def planned_evaluations(cfg: TrainConfig, plan, eval_every: int) -> int | None:
    """How many metrics.csv rows a complete run writes (``Simulation.run``'s evaluation rule, :func:`evaluation_points`,
    over the round ends of the budget ``plan``); None when round lengths depend on the data (``--local-epochs`` under
    an iteration budget)."""
    if cfg.rounds:
        points = list(range(1, cfg.rounds + 1))
    elif cfg.local_epochs:
        return None
    else:
        points = [min(r * plan.round_length, cfg.iterations) for r in range(1, plan.rounds + 1)]
    return len(evaluation_points(points, eval_every))
