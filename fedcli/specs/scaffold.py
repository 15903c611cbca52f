"""SCAFFOLD (Karimireddy et al., ICML 2020), option II control variates.

The spec: its options, its parts and the preset (no torch); the parts are in ``fedcli/fl/algorithms/scaffold.py``.
"""

from fedcli.specs import Method, part, register_method
from fedcli.specs.parts import SGD


STEP = part("local_step", "scaffold", "fedcli.fl.algorithms.scaffold:ScaffoldStep", base=SGD)


register_method(Method("scaffold", "local SGD corrected by control variates, option II (Karimireddy et al. 2020); --server-lr",
                       local_step="scaffold", server="server-lr", label="SCAFFOLD", style=("#17BECF", ">")))
