"""fedcli's own source read as syntax trees, for the tests that read the code (names, layers, style, parts): each file
parsed once per test process, however many of those tests read it (fedcli's 222 files: 0.3 s of CPU each time they
are all parsed, by a dozen tests). A tree is shared: the tests only walk it."""

import ast
import functools
from pathlib import Path


def tree(path: Path) -> ast.Module:
    """The syntax tree of the Python file ``path`` (parsed again if the file changed since)."""
    st = Path(path).stat()
    return _parse(str(Path(path).resolve()), st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=None)
def _parse(path: str, size: int, mtime_ns: int) -> ast.Module:
    return ast.parse(Path(path).read_text(encoding="utf-8"))
