"""Making a rename or a new file durable: fsync the directory that holds it."""

from __future__ import annotations

import os
from pathlib import Path


def fsync_dir(directory: Path) -> None:
    """A directory's entries (a file created or renamed into it) on disk once this returns."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
