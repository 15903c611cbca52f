"""FedNova (Wang et al., NeurIPS 2020): normalized averaging of unequal local work.

The spec: its options, its parts and the preset (no torch); the parts are in ``fedcli/fl/algorithms/fednova.py``.
"""

from fedcli.specs import Method, part, register_method
from fedcli.specs.parts import AVERAGE

SERVER = part("server", "nova", "fedcli.fl.algorithms.fednova:NovaServer", base=AVERAGE, uses=("momentum",))


register_method(
    Method(
        "fednova",
        "local SGD + normalized averaging over unequal local steps (Wang et al. 2020); --local-epochs",
        server="nova",
        label="FedNova",
        style=("#BCBD22", "h"),
    )
)
