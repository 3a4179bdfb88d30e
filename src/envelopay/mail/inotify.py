"""New files in directories, as the Linux kernel reports them (inotify through ctypes):
the Maildir pickup's fast path (`maildir.Pickup`), with a poll where this is unavailable."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import struct
from pathlib import Path

__all__ = ["Inotify"]

# inotify constants (linux/inotify.h)
_IN_CREATE = 0x00000100
_IN_MOVED_TO = 0x00000080
_IN_Q_OVERFLOW = 0x00004000
_IN_ONLYDIR = 0x01000000
_IN_DONT_FOLLOW = 0x02000000
_IN_NONBLOCK = 0o4000
_IN_CLOEXEC = 0o2000000
_EVENT = struct.Struct("iIII")


class Inotify:
    """Watches directories for files created or moved in (a symlinked one is not watched)."""

    def __init__(self) -> None:
        libname = ctypes.util.find_library("c")
        if libname is None:
            raise OSError("libc not found")
        libc = ctypes.CDLL(libname, use_errno=True)
        self._add = libc.inotify_add_watch
        self._add.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        fd = libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1 failed")
        self.fd: int = fd
        self.watches: dict[int, Path] = {}

    def watch(self, directory: Path) -> None:
        mask = _IN_CREATE | _IN_MOVED_TO | _IN_ONLYDIR | _IN_DONT_FOLLOW  # a symlinked new/ is not watched
        wd = self._add(self.fd, os.fsencode(directory), mask)
        if wd < 0:
            raise OSError(ctypes.get_errno(), f"inotify_add_watch {directory} failed")
        self.watches[wd] = directory

    def read(self) -> tuple[list[tuple[Path, str]], bool]:
        """Pending (directory, name) events, and whether the kernel queue overflowed."""
        events: list[tuple[Path, str]] = []
        overflow = False
        while True:
            try:
                buf = os.read(self.fd, 65536)
            except BlockingIOError:
                break
            offset = 0
            while offset + _EVENT.size <= len(buf):
                wd, mask, _cookie, length = _EVENT.unpack_from(buf, offset)
                raw_name = buf[offset + _EVENT.size : offset + _EVENT.size + length].rstrip(b"\0")
                offset += _EVENT.size + length
                if mask & _IN_Q_OVERFLOW:
                    overflow = True
                elif wd in self.watches and raw_name:
                    events.append((self.watches[wd], os.fsdecode(raw_name)))
        return events, overflow

    def close(self) -> None:
        os.close(self.fd)
