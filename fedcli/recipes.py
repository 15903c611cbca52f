"""TOML recipes: config keys (= ``fedcli train`` option names with ``_``), with file and line in errors.

A recipe for a single run is a flat table of keys. A recipe for a sweep (``fedcli sweep``) has
``[base]`` keys, optional ``[scale.<name>]`` overrides and a list of ``[[runs]]``; ``fedcli train
--recipe`` on such a file uses ``[base]`` (+ ``--scale``).
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from fedcli.config import FIELDS, TrainConfig, check_value, coerce
from fedcli.errors import ConfigError


def key_line(text: str, key: str) -> int | None:
    pat = re.compile(rf"^\s*{re.escape(key)}\s*=", re.M)
    m = pat.search(text)
    return text.count("\n", 0, m.start()) + 1 if m else None


def read_recipe(path: str | Path) -> tuple[dict, str]:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise ConfigError(f"recipe {path}: cannot be read ({e.strerror})") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"recipe {path}: not valid TOML ({e})") from None
    return data, text


def where(path, text: str, key: str) -> str:
    line = key_line(text, key)
    return f"{path}, line {line}" if line else str(path)


def check_keys(values: dict, path, text: str) -> dict:
    """Coerce and range-check recipe values; errors name the key, the file and the line."""
    out = {}
    for k, v in values.items():
        name = k.replace("-", "_")
        if name not in FIELDS:
            raise ConfigError(f"{where(path, text, k)}: unknown key '{k}'")
        v = coerce(FIELDS[name], v, where(path, text, k))
        try:
            check_value(FIELDS[name], v)
        except ConfigError as e:
            raise ConfigError(f"{where(path, text, k)}: {e}") from None
        out[name] = v
    return out


def train_values(path: str | Path, scale: str | None = None) -> dict:
    """Config values of a recipe for ``fedcli train``."""
    data, text = read_recipe(path)
    if "base" in data or "runs" in data:
        values = dict(data.get("base", {}))
        if scale:
            scales = data.get("scale", {})
            if scale not in scales:
                raise ConfigError(f"recipe {path}: no [scale.{scale}] table; it has: {', '.join(scales) or 'none'}")
            values.update(scales[scale])
    else:
        values = {k: v for k, v in data.items() if not isinstance(v, dict)}
    return check_keys(values, path, text)


def build_config(recipe: str | None, overrides: dict, scale: str | None = None) -> TrainConfig:
    values = train_values(recipe, scale) if recipe else {}
    values.update(overrides)
    return TrainConfig(**values).validate()
