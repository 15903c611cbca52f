"""Figure kinds register by name (issue 60, item 4): ``fedcli.reports.figures.FIGURE_KINDS`` maps a recipe's
``[[figures]] kind`` to what draws it and the keys it accepts, instead of a tuple in the parser and an ``elif`` chain in
the drawing; a kind of your own is one :func:`register_figure_kind` call."""

import pytest

from fedcli.errors import ConfigError
from fedcli.reports.figures import FIGURE_KINDS, FigureKind, build, register_figure_kind
from fedcli.reports.products import parse_figure


def loc(key):
    return f"r.toml: [[figures]] {key}"


def test_the_built_in_kinds_and_the_keys_each_accepts():
    assert list(FIGURE_KINDS) == [
        "curves",
        "layer-syncs",
        "layer-size",
        "delta-lambda",
        "intervals",
        "clients",
        "time-to-target",
    ]
    with pytest.raises(
        ConfigError,
        match=r"needs a `kind` \(curves, layer-syncs, layer-size, delta-lambda, intervals, "
        r"clients, time-to-target\)",
    ):
        parse_figure({"name": "f", "runs": ["a"]}, loc)
    with pytest.raises(ConfigError, match="key 'sharex' is true or false, for kind = \"curves\"$"):
        parse_figure({"name": "f", "kind": "layer-syncs", "runs": ["a"], "sharex": True}, loc)
    with pytest.raises(ConfigError, match='key \'target\' is for kind = "curves" or "time-to-target"$'):
        parse_figure({"name": "f", "kind": "clients", "runs": ["a"], "target": 0.5}, loc)
    with pytest.raises(
        ConfigError, match="key 'along' is for kind = \"time-to-target\" \\(figure 'f' has kind = \"curves\"\\)"
    ):
        parse_figure({"name": "f", "kind": "curves", "runs": ["a"], "along": "speed"}, loc)
    with pytest.raises(ConfigError, match="a intervals panel shows one FedLAMA run; figure 'f' lists 2"):
        parse_figure({"name": "f", "kind": "intervals", "runs": ["a", "b"]}, loc)


def test_a_kind_of_your_own_is_parsed_and_drawn():
    drawn = []

    def panel(ax, panel, runs, figure_def, x):
        drawn.append((panel.runs, figure_def.target, x))
        return "one line per run"

    register_figure_kind(FigureKind("mine", panel, keys=frozenset({"target"}), x_axis=True))
    try:
        f = parse_figure({"name": "f", "kind": "mine", "runs": ["a"], "target": 0.5, "title": "Mine"}, loc)
        with pytest.raises(TypeError, match="a name of its own"):
            register_figure_kind(FigureKind("mine", panel))
        fig, caption = build(f, {"a": {}}, x="rounds")
        assert drawn == [(["a"], 0.5, "rounds")]
        assert caption == "Mine. one line per run. The dashed line marks the target, 50%"
        assert '\'target\' is for kind = "curves" or "time-to-target" or "mine"' in str(
            pytest.raises(
                ConfigError, parse_figure, {"name": "g", "kind": "clients", "runs": ["a"], "target": 0.5}, loc
            ).value
        )
    finally:
        FIGURE_KINDS.pop("mine", None)
