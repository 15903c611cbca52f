"""Passwords out of what fedcli writes and prints (docs/tuning.md, "The password is masked"): a database URL given as
``fedcli tune --storage URL`` reaches ``tune.json``, the manifests, printed lines and the command a lock file names
(:mod:`fedcli.results.lock`); each goes through :func:`masked` first.
"""

from __future__ import annotations

import re

#: the userinfo ``user:password@`` of a URL (RFC 3986, 3.2.1), after ``scheme://`` or at the start of a bare
#: ``user:password@host`` (a token of its own: at the start or after white space; not ``scheme://``, whose
#: ``scheme:`` would otherwise read as a user). The password runs to the first ``@``, as SQLAlchemy reads it: an ``@``
#: in it is percent-encoded (``%40``), a ``:`` or ``/`` may stand as it is.
_USERINFO = re.compile(r"(://|(?<!\S))([^:/@\s]*:)(?!//)[^@\s]*@")


def masked(text: str) -> str:
    """``text`` (a URL, a command line) with the password of every ``scheme://user:password@host`` and bare
    ``user:password@host`` in it replaced by ``***``; a URL without a password or a user is left as it is."""
    return _USERINFO.sub(r"\1\2***@", text)
