"""FedRep (Collins, Hassani, Mokhtari, Shakkottai, ICML 2021, Algorithm 1): a shared body (representation)
and a local head per client.

The spec: its options, its parts and the preset (no torch); the parts are in ``fedcli/fl/algorithms/fedrep.py``.
"""

from fedcli.params import Open, opt, register_params
from fedcli.specs import Cost, Method, part, register_method
from fedcli.specs.parts import SGD


@register_params(section="fedrep")
class FedRepParams:
    """FedRep's local head (Collins et al., ICML 2021, Algorithm 1)."""

    head_layers: int = opt(
        2,
        "FedRep: the last this many parameter tensors are the client's head (kept local, never "
        "synchronized; 2: the final Linear; 0: no head, FedAvg-C).",
        lo=0,
        group="personalized",
    )
    head_epochs: float = opt(
        5.0,
        "FedRep: local epochs of head training (body frozen) before the body epochs (FedALA appendix: tau = 5).",
        lo=Open(0.0),
        group="personalized",
    )


def head_passes(g) -> int:
    """The head's steps of a round (``--head-epochs`` epochs, ``fedcli.fl.personal.local_sgd``), each counted as a
    forward-backward pass of a mini-batch (an upper bound: with the body frozen the backward pass stops at the head);
    none without a head."""
    if not g.params.head_layers:
        return 0
    return g.epoch_steps(g.params.head_epochs) * min(g.batch, g.samples)


#: its cost: the head's updates before the body's (Algorithm 1: "for s = 1, ..., tau_h: h <- GRD(f_i(h, phi), h)")
STEP = part(
    "local_step",
    "fedrep",
    "fedcli.fl.algorithms.fedrep:FedRepStep",
    base=SGD,
    Params=FedRepParams,
    uses=("lr",),
    cost=Cost(
        round=head_passes,
        source="FedRep (Collins et al., ICML 2021), Algorithm 1: tau_h head updates "
        "before the body's (--head-epochs epochs)",
    ),
)


register_method(
    Method(
        "fedrep",
        "shared body, local head trained first each round, never synchronized (Collins et al. 2021); "
        "--head-layers, --head-epochs",
        local_step="fedrep",
        personalized=True,
        label="FedRep",
        style=("#2CA02C", "P"),
    )
)
