"""Fed-LAMB (Karimi, Li, Li: "Fed-LAMB: Layer-wise and Dimension-wise Locally Adaptive Federated Learning",
Algorithm 1, blue boxes): its local step ``lamb``, local AMSGrad with the server's v_hat fixed for the round and LAMB's
layer-wise trust ratio (Eq. 3), on the stacked cohort (``[K, *shape]`` per parameter tensor). Mime-LAMB takes the same
step; Fed-AMS's (``fedcli.fl.algorithms.fedams``) is this one without the trust ratio. The server is ``vhat-max``
(``fedcli.fl.adaptive.VhatMaxServer``, shared with Fed-AMS); the divisor, v_hat_0 and the options are the adaptive
family's (``fedcli.fl.adaptive``, ``fedcli/specs/adaptive.py``).

``lamb``  Algorithm 1, lines 6-13. Per client i in round
          r and parameter tensor (layer) l, with the server's v_hat_{r-1} held fixed for the whole round::

              start:  p = global model, m = the client's m from its last round (0 at first), v = v_hat_{r-1}
              m <- b1 m + (1 - b1) g          v <- b2 v + (1 - b2) g^2        (no bias correction)
              psi = m / sqrt(v_hat_{r-1})                                    (line 12)
              u   = psi + lambda p                                           (decoupled weight decay)
              p  <- p - lr * phi(||p||) / ||u|| * u                          (Eq. 3; norms per layer per client)

          v_hat_0 = eps (line 2) and v_hat only grows (max), so the step divides by at least sqrt(eps); in
          round 0 it divides by sqrt(eps) everywhere. The client's v only feeds the server (line 20).
          phi is the identity, or with ``--scaling-bounds ZETA,MAX`` the bounded phi(a) = min(a + ZETA, MAX) of
          Assumption 4. As in LAMB (You et al. 2020), the ratio is 1 where phi(||p||) or ||u|| is 0 (a
          zero-initialized tensor still moves). m persists per client across rounds in the client store.
          Departures kept as options (docs/fidelity-fedlamb.md): ``--vhat-eps outside`` (v_hat_0 = 0 and
          psi = m / (sqrt(v_hat) + eps), the authors' prototype code), ``--local-v keep`` (v is the client's
          own, carried across rounds, as the prototype code), ``--vhat-start local`` (before the first
          synchronization a client divides by its own running v).
"""

from __future__ import annotations

import torch

from fedcli.fl.adaptive import check_eps, denominator, vhat_zero
from fedcli.fl.clientstate import ClientState
from fedcli.fl.parts import LocalStep, expand

# each client's m (and with --local-v keep its v) across rounds; "/" keeps the older runs' keys (resumable)
M, V = ClientState("adaptive.m", sep="/"), ClientState("adaptive.v", sep="/")


def scaling_function(bounds: tuple[float, float] | None):
    """phi of Eq. 3: identity, or phi(a) = min(a + zeta, phi_max) (Assumption 4, phi_m = zeta)."""
    if bounds is None:
        return lambda a: a
    zeta, top = bounds
    return lambda a: torch.clamp(a + zeta, max=top)


def trust_ratio(p: torch.Tensor, u: torch.Tensor, phi) -> torch.Tensor:
    """Per-client layer-wise ratio phi(||p||) / ||u|| [K] of stacked tensors (1 where either is 0)."""
    pn = phi(p.reshape(p.shape[0], -1).norm(dim=1))  # reshape, not flatten(1): a 0-dim parameter stacks to [K]
    un = u.reshape(u.shape[0], -1).norm(dim=1)
    ok = (pn > 0) & (un > 0)
    return torch.where(ok, pn / torch.where(ok, un, torch.ones_like(un)), torch.ones_like(un))


class LambStep(LocalStep):
    """Fed-LAMB's local step, Mime-LAMB's too (Algorithm 1, lines 6-13; see the module docstring): local AMSGrad with
    the server's v_hat and LAMB's trust ratio (off with ``--trust-ratio off``: Fed-AMS's step,
    ``fedcli.fl.algorithms.fedams``)."""

    trust_default = True  # the trust ratio under --trust-ratio auto (Fed-AMS's step: off)

    def __init__(self, opts):
        super().__init__(opts)
        p = self.opts
        check_eps(p)
        self.b1, self.b2, self.wd = p.beta1, p.beta2, p.weight_decay
        self.trust = {"auto": self.trust_default, "on": True, "off": False}[p.trust_ratio]
        self.phi = scaling_function(p.scaling_values())
        self.denom: dict[str, torch.Tensor] | None = None

    def begin_round(self, view, cohort) -> None:
        synced = view.offered(
            "vhat", cohort
        )  # the server's v_hat_{r-1}; None before the first synchronization: v_hat_0
        vhat = {
            n: (synced[n].to(p.device) if synced is not None else torch.full_like(p, vhat_zero(self.opts)))
            for n, p in view.global_params.items()
        }
        local = synced is None and self.opts.vhat_start == "local"
        self.denom = None if local else {n: denominator(self.opts, v) for n, v in vhat.items()}  # fixed for the round
        m = M.load(view, cohort)  # m_{r,i}^0 = m_{r-1,i}^T (line 6)
        if self.opts.local_v == "keep":
            v = V.load(view, cohort)
        else:
            v = {n: vhat[n].expand_as(m[n]).clone() for n in m}  # v_{r,i}^0 = v_hat_{r-1} (line 6)
        cohort.opt_state = {"m": m, "v": v}  # this round's optimizer state (the divergence guard scrubs it too)

    def offer(self, capability: str, view, cohort) -> dict[str, torch.Tensor]:
        """ "v": each cohort client's second moment v this round, name -> [K, *shape] (the vhat-max server averages
        it)."""
        if capability != "v":
            return super().offer(capability, view, cohort)
        return cohort.opt_state["v"]

    def end_round(self, view, cohort) -> None:
        M.save(view, cohort, cohort.opt_state["m"])  # a skipped client keeps its own; collective under MPI
        if self.opts.local_v == "keep":
            V.save(view, cohort, cohort.opt_state["v"])

    def direction(self, cohort, grads: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The gradient the optimizer follows: the loss gradient plus method-specific terms."""
        return grads

    @torch.no_grad()
    def step(self, cohort, grads: dict[str, torch.Tensor], lr: float, active: torch.Tensor | None = None) -> None:
        grads = self.direction(cohort, grads)
        b1, b2 = self.b1, self.b2
        ms, vs = cohort.opt_state["m"], cohort.opt_state["v"]
        for n, p in cohort.params.items():
            g, m, v = grads[n], ms[n], vs[n]
            if active is None:
                m.mul_(b1).add_(g, alpha=1 - b1)
                v.mul_(b2).addcmul_(g, g, value=1 - b2)
            else:  # the same operations as above (add with alpha and addcmul may fuse their multiply-add), so a
                # client's bits do not depend on whether another client of its process has finished (--workers)
                a = expand(active, m)
                m.copy_(torch.where(a, m.mul(b1).add_(g, alpha=1 - b1), m))
                v.copy_(torch.where(a, v.mul(b2).addcmul_(g, g, value=1 - b2), v))
            u = m / (self.denom[n] if self.denom is not None else denominator(self.opts, v))  # psi (line 12)
            if self.wd:
                u = u + self.wd * p
            if self.trust:
                u = u * expand(trust_ratio(p, u, self.phi), u)
            if active is not None:
                u = u * expand(active, u)
            p.sub_(u, alpha=lr)
