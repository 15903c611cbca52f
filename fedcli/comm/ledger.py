"""Per-layer communication ledger (FedLAMA Eq. 8).

C = sum_l C_l = sum_l dim(u_l) * c_l, where c_l counts the synchronizations of layer l. That is
``comm_params``: what the paper reports. ``comm_bytes`` counts what really travels: at each
synchronization of layer l every client of the cohort uploads its (encoded) layer and downloads the
new one, so ``m * numel * (uplink_bits + downlink_bits) / 8`` bytes, plus whatever a method sends
on top: whole-model copies each client of the round uploads or downloads through :meth:`Ledger.record_transfer`
(SCAFFOLD's control variates, FedFomo's extra downloads: per layer, so that ``layers.csv`` sums to
``metrics.csv``; the system model charges their transfer time, from :meth:`Ledger.take_round`), per tensor through
:meth:`Ledger.record_bytes`, or unattributed through :meth:`Ledger.extra`.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Ledger:
    numel: list[int]
    syncs: list[int] = field(default_factory=list)
    bytes_: list[float] = field(default_factory=list)
    extra_bytes: float = 0.0

    def __post_init__(self):
        self.syncs = self.syncs or [0] * len(self.numel)
        self.bytes_ = self.bytes_ or [0.0] * len(self.numel)
        self._round = ([0.0] * len(self.numel), [0.0] * len(self.numel))  # this round's bytes per client, up and down

    def record_sync(self, layer: int, clients: int, up_bits: float, down_bits: float = 32.0) -> None:
        self.syncs[layer] += 1
        self.bytes_[layer] += clients * self.numel[layer] * (up_bits + down_bits) / 8.0

    def extra(self, nbytes: float) -> None:
        self.extra_bytes += nbytes

    def record_bytes(self, layer: int, nbytes: float) -> None:
        """Bytes that travel for layer l outside a synchronization of the layer itself (SCAFFOLD's control
        variates for that tensor): counted in ``comm_bytes`` (total and per layer), not in Eq. 8's syncs."""
        self.bytes_[layer] += nbytes

    def record_copies(self, copies: float, bytes_per_element: float = 4.0) -> None:
        """``copies`` whole-model copies that travel outside the synchronizations (SCAFFOLD's c and c_i, the extra
        models APPLE and FedFomo download, Mime's and Fed-LAMB's state): ``copies * numel * bytes_per_element``
        bytes recorded on every layer (:meth:`record_bytes`)."""
        for layer, n in enumerate(self.numel):
            self.bytes_[layer] += copies * n * bytes_per_element

    def record_transfer(self, clients: int, up: float = 0.0, down: float = 0.0, bytes_per_element: float = 4.0) -> None:
        """Each of the round's ``clients`` uploads ``up`` and downloads ``down`` whole-model copies outside the
        synchronizations (SCAFFOLD's c down and c_i+ - c_i up, FedFomo's M - 1 extra models down): recorded on every
        layer as :meth:`record_copies` does, and kept per client and direction for the round's simulated time
        (:meth:`take_round`)."""
        self.record_copies(clients * (up + down), bytes_per_element)
        for layer, n in enumerate(self.numel):
            self._round[0][layer] += up * n * bytes_per_element
            self._round[1][layer] += down * n * bytes_per_element

    def take_round(self) -> tuple[list[float], list[float]]:
        """(up, down): the bytes per layer each client of the round moved through :meth:`record_transfer` since the
        last call, and start counting afresh (the system model reads them when the round closes)."""
        out, self._round = self._round, ([0.0] * len(self.numel), [0.0] * len(self.numel))
        return out

    def layer_params(self, layer: int) -> int:
        return self.numel[layer] * self.syncs[layer]

    @property
    def params(self) -> int:
        return sum(n * s for n, s in zip(self.numel, self.syncs))

    @property
    def bytes(self) -> float:
        return sum(self.bytes_) + self.extra_bytes

    def state_dict(self) -> dict:
        return {
            "numel": list(self.numel),
            "syncs": list(self.syncs),
            "bytes": list(self.bytes_),
            "extra_bytes": self.extra_bytes,
        }

    @classmethod
    def from_state(cls, state: dict) -> "Ledger":
        return cls(list(state["numel"]), list(state["syncs"]), list(state["bytes"]), float(state["extra_bytes"]))


def fedavg_params(total_numel: int, iterations: int, tau: int) -> int:
    """Communication of FedAvg with interval tau over ``iterations`` (the 100% of the paper's C ratio)."""
    return total_numel * (iterations // tau)


def fedavg_params_so_far(total_numel: int, iteration: int, rounds_done: int, tau: int, per_round: bool = False) -> int:
    """FedAvg's communication at the same point of training: every tensor once per tau local iterations done, or
    once per round done when a round is one local phase (``--local-epochs``: FedAvg synchronizes at its end). The
    "so far" of ``comm X% of FedAvg``: a run with FedAvg's schedule stays at 100% all along."""
    return total_numel * rounds_done if per_round else fedavg_params(total_numel, iteration, tau)
