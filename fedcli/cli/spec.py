"""What the command line knows about the config and the methods, without importing torch.

``fedcli train --help``, ``fedcli partition --help`` and argument errors need every option (the fields of the
assembled :class:`fedcli.config.TrainConfig`) and every method name, but assembling the config loads every method
file, and so torch (1-3 s). The first command after a change to fedcli's source assembles it once and writes what
the command line needs (names, types, defaults, help, choices, the method presets and their defaults) as JSON to a
cache file keyed by the source files (their paths, sizes and modification times); every later command reads that
file (a few milliseconds). ``make install`` fills the cache. The cache folder is ``$FEDCLI_CACHE_DIR``, else
``$XDG_CACHE_HOME/fedcli``, else ``~/.cache/fedcli``; a folder that cannot be written only costs the speed.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

from fedcli.paths import cache_dir

#: bumped when the layout of the cached JSON changes (2: the dataset names; 3: each method option's panel)
LAYOUT = 3
PACKAGE = Path(__file__).resolve().parents[1]


def fingerprint() -> str:
    """A digest of fedcli's source files (relative path, size, mtime): any edit gives another cache file."""
    h = hashlib.sha1(f"{LAYOUT}".encode())
    for p in sorted(PACKAGE.rglob("*.py")):
        st = p.stat()
        h.update(f"{p.relative_to(PACKAGE)}:{st.st_size}:{st.st_mtime_ns};".encode())
    return h.hexdigest()[:16]


def build() -> dict:
    """The spec, from the assembled config and the method registry (imports torch)."""
    import fedcli.fl.methods  # noqa: F401 - start-up: the method registry extends the config
    from fedcli.config import FIELDS, field_type
    from fedcli.data.datasets import DATASETS
    from fedcli.fl.methods import METHODS
    from fedcli.params import section_of

    panels = method_panels()
    fields = [{"name": f.name, "type": field_type(f).__name__, "default": f.default, "help": f.metadata["help"],
               "group": f.metadata["group"], "choices": f.metadata.get("choices"),
               "multiple": f.metadata.get("multiple", False), "panel": panels.get(section_of(f.name))}
              for f in FIELDS.values()]
    methods = {name: {"name": m.name, "label": m.label_for(name), "personalized": m.personalized,
                      "defaults": m.effective_defaults()} for name, m in METHODS.items()}
    return {"fields": fields, "methods": methods, "datasets": sorted(DATASETS)}


def method_panels() -> dict[str, str]:
    """Each params section's ``--help`` panel title: the section (its recipe table ``[section]``) and the methods whose
    parts read it."""
    from fedcli.fl.methods import METHODS, run_sections
    from fedcli.params import SECTIONS

    readers: dict[str, list[str]] = {s: [] for s in SECTIONS}
    for name, m in METHODS.items():
        if name == m.name:
            for s in run_sections(name):
                readers[s].append(name)
    # a section no method's parts read (the personalized evaluation's, read by the engine) stays in its general panel
    return {s: f"method options: {s}" + (f" ({', '.join(sorted(r))})" if r != [s] else "") for s, r in readers.items() if r}


def load() -> dict:
    """The spec: from the cache when it matches the source, else built (and cached). A process that has loaded the
    methods already (a script that registers its own method before calling ``main``) builds it: that costs nothing
    more, and sees methods outside fedcli's source."""
    import sys

    if "fedcli.fl.methods" in sys.modules:
        return build()
    path = cache_dir() / f"cli-spec-{fingerprint()}.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        pass
    spec = build()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(spec))
        os.replace(tmp, path)
        stale = time.time() - 30 * 86400  # other checkouts share the folder: drop only month-old entries
        for old in path.parent.glob("cli-spec-*.json"):
            if old.stat().st_mtime < stale:
                old.unlink(missing_ok=True)
    except OSError:
        pass
    return spec


if __name__ == "__main__":  # `python -m fedcli.cli.spec`: fill the cache (make install)
    print(f"fedcli: {len(load()['fields'])} options cached in {cache_dir()}")
