"""Pickling large state without holding the GIL for the whole of it.

``pickle.dumps`` is one C call: on state of tens of MB it keeps every other thread of the
process (the heartbeats among them) waiting for a second or more. A ``Pickler`` writing to
a file object calls the file's ``write`` about every 64 KiB (each protocol 4+ frame, and
every large bytes object apart); when that ``write`` is Python code, the interpreter can
hand the GIL to another thread there, and the caller can say that its work goes on.
"""

from __future__ import annotations

import pickle
from typing import Callable


def _nothing() -> None:
    pass


class _Frames(list[bytes]):
    """The pickle's pieces, in order: a file whose ``write`` is Python code."""

    def __init__(self, progress: Callable[[], None]) -> None:
        super().__init__()
        self.progress = progress

    def write(self, data: bytes) -> None:
        self.append(bytes(data))  # bytes() copies only a memoryview: a bytes payload is kept as is
        self.progress()


def dump_frames(obj: object, progress: Callable[[], None] = _nothing) -> list[bytes]:
    """``obj`` pickled (highest protocol) as consecutive pieces. Other threads run meanwhile,
    and ``progress`` is called after each piece (a node loop's ``tick``, for its heartbeats)."""
    frames = _Frames(progress)
    pickle.Pickler(frames, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    return frames


def dumps(obj: object, progress: Callable[[], None] = _nothing) -> bytes:
    """``pickle.dumps`` that lets other threads run while it works (see ``dump_frames``)."""
    return b"".join(dump_frames(obj, progress))
