"""Moved to :mod:`fedcli.safefs` (below the results layer, so that the engine's client store uses it too); the
names stay importable from here."""

from fedcli.safefs import LinkRefused, is_link, make_dir, open_fd, open_file, refuse_link, replace  # noqa: F401
