"""Where a run may write: refuse a folder whose place is taken by a file, in one line.

Imports nothing heavy, so the CLI can check ``--out`` and ``output.dir`` before the run header.
"""

from __future__ import annotations

from pathlib import Path


def check_folder(path: Path, what: str) -> None:
    """Raise FileExistsError (one line naming ``what`` and the path as given) if ``path`` or a parent is a file."""
    for p in [path, *path.parents]:
        if p.exists() and not p.is_dir():
            raise FileExistsError(f"{what}: {p} is an existing file, not a folder; point {what} at a folder")


def make_dir(path: Path, what: str) -> None:
    """Create folder ``path`` (and its parents), or raise FileExistsError with one line naming ``what``.

    Raises
    ------
    FileExistsError
        ``path`` or one of its parents is an existing file, or the folder
        cannot be created (permissions); the message names ``what`` (e.g.
        ``output.dir``) and the path.
    """
    check_folder(path, what)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise FileExistsError(f"{what}: cannot create the folder {path}: {e.strerror or e}") from None
