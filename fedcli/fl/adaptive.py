"""What the adaptive optimizers share: Fed-LAMB and Mime-LAMB (Karimi, Li, Li: "Fed-LAMB: Layer-wise and
Dimension-wise Locally Adaptive Federated Learning", Algorithm 1), Fed-AMS, Mime, and the server Adam of Adp-Fed /
FedAdam, FedYogi and FedAdagrad. Each method's parts are in its own file, ``fedcli/fl/algorithms/<method>.py``
(``fedlamb``: the local step ``lamb``; ``fedams``: ``ams``; ``mimelamb``: ``vhat-fullgrad``; ``mime``: its step
and server; ``fedadam``: ``adam``); this module holds what they build on:
the adaptive step's divisor (``--vhat-eps``), v_hat_0, the skip synchronization, the cohort's full-batch gradients,
the base of the servers that share a second moment v_hat with the clients (:class:`VhatServer`) and the server of
Fed-LAMB and Fed-AMS (``vhat-max``). Fed-LAMB's local step, which Fed-AMS and Mime-LAMB take, is
``fedcli.fl.algorithms.fedlamb.LambStep``.

``vhat-max``       Fed-LAMB / Fed-AMS (Algorithm 1, line 20): v_hat <- max(v_hat, mean of the cohort's v),
                   v_hat = v_hat_0 (eps; 0 with ``--vhat-eps outside``) before the first time.

Until v_hat has been synchronized once (round 0, or the first Z-1 rounds with ``--vhat-every Z``), lamb and ams
divide by the server's v_hat_0 (``--vhat-start eps``, default: sqrt(eps), or eps with ``--vhat-eps outside``);
``--vhat-start local`` lets a client divide by its own running v instead.

Skip synchronization (``--vhat-every Z``): v_hat (Mime: the server state) is updated and sent only at the end
of rounds r with (r + 1) % Z == 0 (0-based), so Z = 1 is every round. Cohort means are weighted by the
cohort weights (``--weighting``) and summed across processes with one all-reduce.

Communication (``comm_bytes``, per layer in ``layers.csv``; ``comm_params`` stays FedLAMA's Eq. 8 of the
model layers): at a v_hat synchronization each of the m cohort clients uploads its v (Fed-LAMB, Fed-AMS) or
its full-batch gradient (Mime-LAMB) and downloads v_hat, 2 x 32 bits per element. Mime: every round each
client uploads its full-batch gradient and downloads c, plus m_s and v_hat at a state synchronization. As in
the paper, v_hat is counted as sent to the synchronizing cohort only.
"""

from __future__ import annotations

import torch

from fedcli.errors import ConfigError
from fedcli.fl.cohort import Cohort, Stream, register_purpose
from fedcli.fl.parts import AverageServer, expand

# full-batch gradients (Mime, Mime-LAMB): the whole split in order; a used-up client's dummy batch weighs 1 (its
# gradient is then scaled by 0; an all-zero mask would make the masked mean 0 / 0)
FULL_BATCH = register_purpose("mime-full", Stream(shuffled=False, spent=1.0))


# ---------------------------------------------------------------------------- helpers
def vhat_zero(cfg) -> float:
    """v_hat_0, the server's second moment before any synchronization: eps (Algorithm 1, line 2, with
    ``--vhat-eps floor``) or 0 (``outside``: eps is added to sqrt(v_hat) instead)."""
    return cfg.eps if cfg.vhat_eps == "floor" else 0.0


def denominator(cfg, vhat: torch.Tensor) -> torch.Tensor:
    """The adaptive step's divisor for a second moment ``vhat``.

    ``floor`` (Algorithm 1, line 12: psi = m / sqrt(v_hat)): v_hat never drops below v_hat_0 = eps, so this
    is sqrt(v_hat); the clamp only matters for a client's own running v (``--vhat-start local``).
    ``outside`` (the authors' prototype code): sqrt(v_hat) + eps.
    """
    if cfg.vhat_eps == "floor":
        return vhat.clamp(min=cfg.eps).sqrt()
    return vhat.sqrt() + cfg.eps


def check_eps(cfg) -> None:
    if cfg.vhat_eps == "floor" and cfg.eps <= 0:
        raise ConfigError(
            "--eps must be > 0 with --vhat-eps floor: Algorithm 1's v_hat_0 = eps is what the first round divides by"
        )


def sync_due(cfg, round_idx: int) -> bool:
    """Skip synchronization: v_hat (Mime: the server state) is updated at the end of every Z-th round."""
    return (round_idx + 1) % cfg.vhat_every == 0


@torch.no_grad()
def cohort_mean(view, cohort, stacked: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """sum_i p_i x_i over the whole cohort (added in cohort order across processes), per tensor."""
    return view.cohort_sums(cohort, {n: t.float() for n, t in stacked.items()}, cohort.weights)


def full_batch_grads(view, cohort) -> dict[str, torch.Tensor]:
    """Each cohort client's full-batch gradient at the global model, stacked [K, ...].

    The client's whole training split is cut into mini-batches of ``--batch-size`` (the local objective as the
    local steps see it: train mode, BatchNorm batch statistics on a throwaway copy of the buffers, no
    augmentation) and the batch gradients are combined weighted by their sample counts, i.e. the gradient of
    the mean loss over the client's samples.
    """
    k = cohort.size
    anchor = Cohort.from_global(cohort.clients, cohort.weights, view.global_params, view.global_buffers)
    acc = {n: torch.zeros_like(p) for n, p in anchor.params.items()}
    if k == 0:
        return acc
    plan = view.batches.plan(FULL_BATCH, cohort.clients)  # the whole split in order, padded; no augmentation
    sizes = torch.tensor([view.client_indices[c].numel() for c in cohort.clients], device=plan.real.device)
    fracs = (plan.real.double() / sizes.clamp(min=1).double()).float()  # each batch's share of the client's samples
    for s in range(plan.idx.shape[0]):
        grads, _ = view.trainer.grads(anchor, view.train_x[plan.idx[s]], view.train_y[plan.idx[s]], plan.mask[s])
        for n, g in grads.items():
            acc[n] += g.detach() * expand(fracs[s], g)
    return acc


def count_transfer(view, up: int, down: int) -> None:
    """Every cohort client uploads ``up`` and downloads ``down`` full-precision tensors per layer."""
    view.ledger.record_transfer(view.n_active, up=up, down=down)


def to_device(state: dict | None, device) -> dict | None:
    """A server's state (name -> tensor, or None) on ``device``."""
    return None if state is None else {n: t.to(device) for n, t in state.items()}


# ---------------------------------------------------------------------------- servers
class VhatServer(AverageServer):
    """Model averaging plus a second moment v_hat held by the server and shared with the clients."""

    keeps = ("vhat",)  # checkpointed and resumed with the run

    def __init__(self, opts):
        super().__init__(opts)
        self.vhat: dict[str, torch.Tensor] | None = None

    def offer(self, capability: str, view, cohort) -> dict[str, torch.Tensor] | None:
        """ "vhat": the v_hat the server shares with the clients this round (None before the first synchronization);
        the local steps that read it require a server that provides it (checked with the config)."""
        if capability != "vhat":
            return super().offer(capability, view, cohort)
        return self.vhat

    def begin_round(self, view, cohort) -> None:
        self.vhat = to_device(self.vhat, view.device)

    def raise_vhat(self, candidate: dict[str, torch.Tensor]) -> None:
        """v_hat <- max(v_hat, candidate), v_hat = v_hat_0 (eps, or 0 with --vhat-eps outside) before the first time."""
        if self.vhat is None:
            self.vhat = {n: t.clamp(min=vhat_zero(self.opts)) for n, t in candidate.items()}
        else:
            self.vhat = {n: torch.maximum(self.vhat[n], candidate[n]) for n in self.vhat}


class VhatMaxServer(VhatServer):
    """Fed-LAMB / Fed-AMS: v_hat <- max(v_hat, sum_i p_i v_i) every ``--vhat-every`` rounds (Alg. 1, line 20)."""

    def end_round(self, view, cohort) -> None:
        if not sync_due(self.opts, cohort.round_idx):
            return
        self.raise_vhat(cohort_mean(view, cohort, view.offered("v", cohort)))
        count_transfer(view, up=1, down=1)  # v up, v_hat down
