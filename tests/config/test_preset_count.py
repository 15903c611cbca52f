"""The README's count of method presets is the registry's (issue 60: it said 25 when 27 existed)."""

import re
from pathlib import Path

from fedcli.specs import METHODS


def test_the_readme_counts_the_registered_presets():
    text = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    said = [int(n) for n in re.findall(r"\((\d+) method presets\)", text)]
    assert said == [len({m.name for m in METHODS.values()})]
