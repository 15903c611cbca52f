"""Paper tables and figures from the run directories of a sweep (``fedcli report``; in a notebook ``fedcli.report``,
fedcli/api.py's ``write_report``).

``products``: what a recipe asks for ([[tables]], [[figures]]: ``TableDef``, ``FigureDef``); ``rundata``: one run
directory;
``aggregate``: seeds, communication ratios, early stopping (pure functions); ``tables``: build and
render (md, latex, csv); ``figures``: PNG + PDF; ``core``: find sweeps, list, check, produce.
"""
