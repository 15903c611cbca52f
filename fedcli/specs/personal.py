"""The options of the personalized evaluation (``fedcli/fl/personal.py``), read by the engine for every method."""

from fedcli.params import opt, register_params


@register_params(section="personal")
class PersonalEvalParams:
    """Where personal_acc is measured in a round (FedALA's reference code: ``evaluate()`` after ALA, before
    training)."""

    personal_eval: str = opt(
        "after-training",
        "Personalized evaluation (personal_acc) of each client's model after the round's local training "
        "(default: fedcli's number since the start, the model the round produced) or after its local "
        "initialization and before training (after-init: where FedALA's/PFLlib's reference code evaluates, "
        "e.g. right after ALA; the row of round r holds the models initialized at the start of round r).",
        choices=["after-training", "after-init"],
        group="personalized",
    )
