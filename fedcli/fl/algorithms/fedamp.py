"""FedAMP (Huang, Chu, Zhou, Wang, Liu, Pei, Zhang, AAAI 2021, "Personalized Cross-Silo Federated Learning on
Non-IID Data", Algorithm 1): attentive message passing between the clients' models.

At the start of round k the server builds, for every client i, a personalized cloud model from all uploaded
models w_1..w_N (Eq. 4-5, with A(x) = 1 - exp(-x / sigma), so A'(x) = exp(-x / sigma) / sigma):

    xi_ij = alpha_k * A'(||w_i - w_j||^2)   (j != i),      xi_ii = 1 - sum_{j != i} xi_ij,
    u_i   = sum_j xi_ij w_j  =  w_i + sum_{j != i} xi_ij (w_j - w_i),

the squared distance taken over all parameters (not buffers) flattened into one vector. Client i then trains
*its own model* w_i (the one it uploaded last round; it is never replaced by a global model) for the round's
local steps on (Eq. 6)

    F_i(w) + lambda / (2 alpha_k) ||w - u_i||^2,   i.e.   grad <- grad F_i(w) + (lambda / alpha_k) (w - u_i),

and uploads it. Clients are judged by their own models (``personal_acc``). Options (FedALA appendix defaults):
``--amp-alpha`` alpha_k = 1000, ``--amp-lambda`` lambda = 1, ``--amp-sigma`` sigma = 0.1. FedAMP is a
cross-silo method: every client every round (``--active-ratio`` < 1 is a ConfigError). Under MPI every rank
gathers every client's uploaded model (``view.comm.allgather``), so results do not depend on the process count.

``--init ala``: ALA mixes the client's old model with what FedAMP sends it, u_i (``received``, one per client,
made by the init's ``download`` hook);
``--init ala --ala-layers 0`` is FedAMP (tested). ALA overwrites the lower layers with u_i, which is an average of
the models only while xi_ii >= 0: with the appendix's alpha 1000 / sigma 0.1 and models closer than a squared
distance of about sigma ln(alpha (N - 1) / sigma), u_i lies far outside them and FedAMP + ALA diverges (the
digits defaults in round 2); ``--amp-alpha`` <= sigma / (N - 1) keeps every u_i an average
(docs/fidelity-fedala.md, "FedAMP + ALA needs clouds that are averages").

Reference: PFLlib ``serveramp.py`` (``send_models``: the coefficients, ``coef_self`` = 1 - sum multiplying the
client's current model, which is its last upload since all clients train every round; nothing is sent in the
first round, when u_i is the initial model, as here where all models are still the initial one) and
``clientamp.py`` (trains ``self.model``, never overwritten; ``set_parameters`` only sets u_i). Deviations:

- The proximal term. PFLlib adds ``0.5 * lamda / alphaK * torch.norm(gm - pm)`` with ``gm``/``pm`` built from
  ``p.data``: detached, so it adds nothing to the gradient (and the norm is not squared); the maintainer's
  stated intent (PFLlib issue #4) is the paper's Eq. 6, which we implement (gradient (lambda/alpha_k)(w - u_i)).
  ``--amp-lambda 0`` gives the reference's training exactly. With the defaults lambda/alpha_k = 1e-3.
- u_i is computed as w_i + sum_{j != i} xi_ij (w_j - w_i), equal to the reference's
  sum_{j != i} xi_ij w_j + xi_ii w_i but without its cancellation (xi_ii can be about -alpha_k / sigma * N);
  distances are summed in float64.
- The engine still averages the uploaded models into a global model (the reference keeps none); that average is
  what ``test_acc`` evaluates, and the communication is counted as FedAvg's (upload w_i, download u_i: 2 Sigma
  per client and round, FedALA Table 3). The reported train loss is the cross-entropy only.
"""

from __future__ import annotations

import torch

from fedcli.fl.parts import OverwriteInit, SGDStep
from fedcli.fl.personal import all_client_models, load_models
from fedcli.specs.fedamp import CLOUDS


# ---------------------------------------------------------------------------- the pieces, as functions
def squared_distances(models: dict, rows: list[int]) -> torch.Tensor:
    """[K, N] float64: ||w_i - w_j||^2 over all tensors of ``models`` (name -> [N, *shape]) for i in ``rows``."""
    n = next(iter(models.values())).shape[0] if models else 0
    d = torch.zeros(len(rows), n, dtype=torch.float64)
    for w in models.values():
        flat = w.reshape(n, -1)
        for k, i in enumerate(rows):
            d[k] += (flat - flat[i]).pow(2).sum(1, dtype=torch.float64).cpu()
    return d


def amp_coefficients(sq_dist: torch.Tensor, rows: list[int], alpha: float, sigma: float) -> torch.Tensor:
    """xi [K, N] (float64) of Eq. 5: alpha * exp(-d_ij / sigma) / sigma off the diagonal, 1 - their sum on it
    (``rows[k]`` is the column of row k's own client)."""
    xi = alpha * torch.exp(-sq_dist / sigma) / sigma
    own = torch.tensor(rows, dtype=torch.long)
    ar = torch.arange(len(rows))
    xi[ar, own] = 0.0
    xi[ar, own] = 1.0 - xi.sum(1)
    return xi


def cloud_models(models: dict, rows: list[int], alpha: float, sigma: float) -> tuple[dict, torch.Tensor]:
    """(u name -> [K, *shape], xi [K, N]): the personalized cloud models of the clients ``rows`` from all models
    ``models`` (name -> [N, *shape]); u_i = w_i + sum_{j != i} xi_ij (w_j - w_i)."""
    xi = amp_coefficients(squared_distances(models, rows), rows, alpha, sigma)
    off = xi.clone()
    if rows:
        off[torch.arange(len(rows)), torch.tensor(rows)] = 0.0
    u = {}
    for name, w in models.items():
        out = []
        for k, i in enumerate(rows):
            c = off[k].to(w.device, w.dtype)
            out.append(w[i] + torch.tensordot(c, w - w[i], dims=1))
        u[name] = torch.stack(out) if out else w.new_zeros((0, *w.shape[1:]))
    return u, xi


def send_clouds(view, cohort, opts) -> tuple[dict, torch.Tensor]:
    """The round's (u_i, xi) for the cohort clients (collective under MPI: every process calls it); once per round,
    by the init's ``download``, or by the local step's ``begin_round`` when another init part (``--init overwrite``)
    replaced FedAMP's. ``opts``: the calling part's (``amp_alpha``, ``amp_sigma``)."""
    models, _ = all_client_models(view, cohort)
    return cloud_models(models, cohort.clients, float(opts.amp_alpha), float(opts.amp_sigma))


# ---------------------------------------------------------------------------- the parts
class AMPInit(OverwriteInit):
    """Each client starts the round from its own last model; the server sends it u_i."""

    def __init__(self, opts):
        super().__init__(opts)
        self.clouds: dict[str, torch.Tensor] = {}  # this round's u_i (``download``)
        self.xi: torch.Tensor | None = None  # this round's attention weights

    def download(self, view, cohort) -> None:
        self.clouds, self.xi = send_clouds(view, cohort, self.opts)

    def received(self, view, cohort) -> dict:
        """u_i (``download``), name -> ``[K, *shape]``."""
        return self.clouds

    def offer(self, capability: str, view, cohort) -> dict:
        """CLOUDS: u_i, the model each cohort client's proximal term pulls towards (the same as ``received``)."""
        return self.clouds if capability == CLOUDS else super().offer(capability, view, cohort)

    @torch.no_grad()
    def initialize(self, view, cohort) -> None:
        params, buffers = load_models(view, cohort.clients)
        for n, t in params.items():
            cohort.params[n].copy_(t)
        for n, t in buffers.items():
            cohort.buffers[n].copy_(t)


class AMPStep(SGDStep):
    """SGD on F_i(w) + lambda / (2 alpha_k) ||w - u_i||^2 (Eq. 6)."""

    def __init__(self, opts):
        super().__init__(opts)
        self.coef = float(self.opts.amp_lambda) / float(self.opts.amp_alpha)

    def begin_round(self, view, cohort) -> None:
        super().begin_round(view, cohort)
        # FedAMP's init sent them; another init part (--init overwrite) did not: they are computed here
        self.clouds = view.offered(CLOUDS, cohort) if view.provided(CLOUDS) else send_clouds(view, cohort, self.opts)[0]

    def direction(self, cohort, grads: dict) -> dict:
        if not self.coef:
            return grads
        u = self.clouds
        return {n: g + self.coef * (cohort.params[n] - u[n]) for n, g in grads.items()}
