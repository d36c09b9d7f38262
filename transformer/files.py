# Generated from book/checkpoints.md by tools/export.py: edit the chapter.
"""Files written whole or not at all: one file, or a folder of several. Imports nothing
from the package, so that any module may write with it."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO


def write_atomically(path: str | Path, write: Callable[[BinaryIO], None]) -> Path:
    """write(file) into PATH.PID.tmp, synced to the disk, then renamed to PATH (the
    rename synced too): PATH is the old file or the whole new one, never a part, even
    with several processes writing it. Nothing is left behind when write or the disk
    fails."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        with open(temporary, "wb") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())  # the bytes on the disk before the name
        os.replace(temporary, path)
        folder = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(folder)  # and the new name
        finally:
            os.close(folder)
    finally:
        temporary.unlink(missing_ok=True)
    return path


@contextlib.contextmanager
def building_folder(folder: str | Path, keep_theirs: bool = False) -> Iterator[Path]:
    """A new folder beside `folder`, to fill in the block. When the block ends without
    an error, the old `folder` is deleted and the new one renamed to its name (a crash
    in between leaves no folder, never a part of one); after an error the new one is
    deleted. keep_theirs: if another process renamed its folder into place between
    the two, keep that one (two runs building the same cache)."""
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    # not tempfile.mkdtemp, whose folder only its owner may read: os.mkdir's mode
    # follows the umask, as any folder the user makes
    building = folder.with_name(f".{folder.name}.{os.getpid()}.{secrets.token_hex(4)}")
    building.mkdir()
    try:
        yield building
        shutil.rmtree(folder, ignore_errors=True)
        try:
            os.replace(building, folder)
        except OSError:
            if not keep_theirs or not folder.is_dir():
                raise
    finally:
        shutil.rmtree(building, ignore_errors=True)


__all__ = [
    'write_atomically',
    'building_folder',
]
