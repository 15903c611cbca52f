"""What the command line knows about the config and the methods: plain data read from the specs, without torch.

``fedcli train --help``, ``fedcli partition --help`` and argument errors need every option (the fields of the
assembled :class:`fedcli.config.TrainConfig`), every method name and every dataset name. All of it is declared
without torch (``fedcli.config``, the method specs of ``fedcli.specs``, the datasets' declarations in
``fedcli.data.datasets``), so it is read directly at each start (a few milliseconds): there is nothing to cache and
nothing to go stale.
"""

from __future__ import annotations

import functools


@functools.cache
def load() -> dict:
    """The options (name, type, default, help, group, choices, ``--help`` panel), the method presets (label,
    personalized, defaults) and the dataset names."""
    from fedcli import specs
    from fedcli.config import FIELDS, field_type
    from fedcli.data.datasets import DECLARED
    from fedcli.params import section_of

    panels = method_panels()
    fields = [
        {
            "name": f.name,
            "type": field_type(f).__name__,
            "default": f.default,
            "help": f.metadata["help"],
            "group": f.metadata["group"],
            "choices": f.metadata.get("choices"),
            "multiple": f.metadata.get("multiple", False),
            "panel": panels.get(section_of(f.name)),
            "search": f.metadata.get("search"),
            "was": list(f.metadata.get("was", ())),
        }
        for f in FIELDS.values()
    ]
    methods = {
        name: {
            "name": m.name,
            "label": m.label_for(name),
            "personalized": m.personalized,
            "defaults": m.effective_defaults(),
        }
        for name, m in specs.METHODS.items()
    }
    return {"fields": fields, "methods": methods, "datasets": sorted(DECLARED)}


def method_panels() -> dict[str, str]:
    """Each params section's ``--help`` panel title: the section (its recipe table ``[section]``) and the methods whose
    parts read it."""
    from fedcli import specs
    from fedcli.params import SECTIONS

    readers: dict[str, list[str]] = {s: [] for s in SECTIONS}
    for name, m in specs.METHODS.items():
        if name == m.name:
            for s in specs.run_sections(name):
                readers[s].append(name)
    # a section no method's parts read (the personalized evaluation's, read by the engine) stays in its general panel
    return {
        s: f"method options: {s}" + (f" ({', '.join(sorted(r))})" if r != [s] else "") for s, r in readers.items() if r
    }
