"""FedPAQ's uplink codec, QSGD's stochastic quantization (``fedcli/fl/codecs.py``): its option."""

from fedcli.params import opt, register_params
from fedcli.specs import part


@register_params(section="qsgd")
class QSGDParams:
    """Levels s of the QSGD quantizer (Alistarh et al., NeurIPS 2017) of FedPAQ and FedCOM."""

    quant_levels: int = opt(
        16,
        "FedPAQ/FedCOM: levels s of the stochastic uniform (QSGD) quantizer of each client's layer update, "
        "on |v|/||v|| (the paper's compression level 16); 0: no quantization.",
        lo=0,
        group="method",
    )


QSGD = part("codec", "qsgd", "fedcli.fl.codecs:QSGDCodec", Params=QSGDParams)
