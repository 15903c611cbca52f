"""Paper tables and figures from the run directories of a sweep (``fedcli report``).

``products``: what a recipe asks for ([[tables]], [[figures]]: ``TableDef``, ``FigureDef``); ``rundata``: one run
directory;
``aggregate``: seeds, communication ratios, early stopping (pure functions); ``tables``: build and
render (md, latex, csv); ``figures``: PNG + PDF; ``core``: find sweeps, list, check, produce.
"""

import sys as _sys
import types as _types


class _CallablePackage(_types.ModuleType):
    """``fedcli.report(*paths, **flags)`` in a notebook runs ``fedcli report`` (fedcli.api.write_report), while
    ``fedcli.report`` stays this package (``fedcli.report.tables`` and the others import as before)."""

    def __call__(self, *paths, **options):
        import importlib  # by name: the API sits above the report layer (pyproject.toml layers)

        return importlib.import_module("fedcli.api").write_report(*paths, **options)


_sys.modules[__name__].__class__ = _CallablePackage
