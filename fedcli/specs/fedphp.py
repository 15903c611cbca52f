"""FedPHP (Li, Zhan, Shao, Li, Song, ECML PKDD 2021): personalized models that inherit from themselves and are
pulled toward the global model's representation.

The spec: its options, its parts and the preset (no torch); the parts are in ``fedcli/fl/algorithms/fedphp.py``.
"""

from fedcli.params import opt, register_params
from fedcli.specs import FORWARD_ONLY, Cost, Method, part, register_method
from fedcli.specs.parts import OVERWRITE, SGD


@register_params(section="fedphp")
class FedPHPParams:
    """FedPHP's moving-average inheritance and MMD weight (Li et al., ECML PKDD 2021)."""

    php_mu: float = opt(
        0.9,
        "FedPHP: moving-average coefficient mu; round t starts from (1 - mu_t) * global + mu_t * local "
        "with mu_t = mu * t / rounds (FedALA appendix: 0.9).",
        lo=0.0,
        hi=1.0,
        group="personalized",
    )
    php_lambda: float = opt(
        0.01,
        "FedPHP: weight lambda of the MMD between local and global representations: (1 - lambda) * CE + "
        "lambda * MMD (FedALA appendix: 0.01).",
        lo=0.0,
        hi=1.0,
        group="personalized",
    )


INIT = part("init", "fedphp", "fedcli.fl.algorithms.fedphp:PHPInit", base=OVERWRITE, Params=FedPHPParams)
#: its cost: the MMD term compares the batch's representations under the local and the global model, a forward pass
#: of the global model per local step (none with --php-lambda 0)
STEP = part(
    "local_step",
    "fedphp",
    "fedcli.fl.algorithms.fedphp:PHPStep",
    base=SGD,
    Params=FedPHPParams,
    cost=Cost(
        step=lambda g: FORWARD_ONLY if g.params.php_lambda else 0.0,
        source="FedPHP (Li et al., ECML PKDD 2021), the local objective (1 - lambda) CE + lambda MMD "
        "to the global model's representation: its forward pass on every mini-batch",
    ),
)


register_method(
    Method(
        "fedphp",
        "inherited private models: moving-average init mu*t/T of own and global model, CE + MMD to the "
        "global representation (Li et al. 2021); --php-mu, --php-lambda",
        local_step="fedphp",
        init="fedphp",
        personalized=True,
        label="FedPHP",
        style=("#AEC7E8", "p"),
    )
)
