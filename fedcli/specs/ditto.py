"""Ditto (Li, Hu, Beirami, Smith, ICML 2021, Algorithm 1): FedAvg plus a personalized model per client.

The spec: its options, its parts and the preset (no torch); the parts are in ``fedcli/fl/algorithms/ditto.py``.
"""

from fedcli.params import Open, opt, register_params
from fedcli.specs import Cost, Method, part, register_method
from fedcli.specs.parts import SGD


@register_params(section="ditto")
class DittoParams:
    """Ditto's personalized model (Li et al., ICML 2021, Algorithm 1: lambda and its local epochs)."""

    ditto_lambda: float = opt(
        0.1,
        "Ditto: proximal coefficient lambda of the personalized model toward the global model (FedALA appendix: 0.1).",
        lo=0.0,
        group="personalized",
    )
    ditto_epochs: float = opt(
        2.0,
        "Ditto: local epochs s of the personalized model per round (FedALA appendix: 2).",
        lo=Open(0.0),
        group="personalized",
    )


def personal_passes(g) -> int:
    """The personalized model's steps of a round (``--ditto-epochs`` s epochs, ``fedcli.fl.personal.local_sgd``), each
    a forward-backward pass of a mini-batch of min(B, n_i) samples."""
    return g.epoch_steps(g.params.ditto_epochs) * min(g.batch, g.samples)


#: its cost: besides FedAvg's training of w, every round trains the personalized model v_k for s local epochs
#: (Algorithm 1: "for s local iterations: v_k <- v_k - eta (grad F_k(v_k) + lambda (v_k - w^t))")
STEP = part(
    "local_step",
    "ditto",
    "fedcli.fl.algorithms.ditto:DittoStep",
    base=SGD,
    Params=DittoParams,
    uses=("lr",),
    cost=Cost(
        round=personal_passes,
        source="Ditto (Li et al., ICML 2021), Algorithm 1: s local iterations on the personalized v_k "
        "per round (--ditto-epochs epochs)",
    ),
)


register_method(
    Method(
        "ditto",
        "FedAvg + a personalized model per client with a proximal term (Li et al. 2021); --ditto-lambda, "
        "--ditto-epochs",
        local_step="ditto",
        personalized=True,
        label="Ditto",
        style=("#98DF8A", "d"),
    )
)
