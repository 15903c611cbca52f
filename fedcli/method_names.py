"""Method names as people type them: case-insensitive, the papers' spellings, and a "did you mean" for typos.

Imports nothing of torch: the command line resolves ``--algo`` before any model code loads.
"""

from __future__ import annotations

import difflib

from fedcli.errors import ConfigError


def _fold(name: str) -> str:
    return name.strip().lower()


def resolve_method(name: str, labels: dict[str, str]) -> str:
    """The registered name that ``name`` means. ``labels`` maps every registered name (and alias) to its label
    (``fedlamb`` -> ``Fed-LAMB``). Exact names win; then names and labels compared case-insensitively (``FedLAMA``,
    ``Fed-LAMB``, ``FEDAVG``). An unknown name raises ConfigError naming the closest names (exit 2)."""
    if name in labels:
        return name
    folded = {_fold(n): n for n in labels}
    folded.update({_fold(label): n for n, label in labels.items() if _fold(label) not in folded})
    if _fold(name) in folded:
        return folded[_fold(name)]
    hint = suggest(_fold(name), folded)
    raise ConfigError(
        f"--algo: unknown method '{name}'; {hint}choose one of: {', '.join(sorted(labels))} "
        f"(`fedcli train --list-algos` describes them)",
        key="algo",
    )


def suggest(name: str, choices) -> str:
    """ "did you mean X or Y? " for the choices closest to ``name`` (difflib, ratio >= 0.6), else "". ``choices``: the
    names, or a dict from the names compared to the names said."""
    said = choices if isinstance(choices, dict) else {c: c for c in choices}
    close = difflib.get_close_matches(name, list(said), n=3, cutoff=0.6)
    return f"did you mean {' or '.join(dict.fromkeys(said[c] for c in close))}? " if close else ""
