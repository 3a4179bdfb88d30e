"""The mtimes of many directories, read as cheaply as the platform allows: the poll's
half of `maildir.Pickup` where inotify is missing.

A stat by path walks the path on every call (2.5 µs here for a garden's
`<root>/<address>/new`); an fstat of a directory held open reads the inode directly
(about half of that). So the poll holds each directory open, up to a budget of file
descriptors, and stats the rest by path. A held descriptor keeps pointing at its
directory even after that directory is removed or replaced, so a held one is checked
against its path on every `verify` (the poll calls it about once a second): a removed
directory (no links left) or a different inode is reopened. Between two checks, a
directory replaced under a held descriptor is seen late, never lost: its files are listed
once it is reopened.
"""

from __future__ import annotations

import os
import resource

__all__ = ["DirStamps", "fd_budget"]

# File descriptors the rest of the process may need (sockets, databases, files).
_FD_HEADROOM = 256


def fd_budget(wanted: int) -> int:
    """How many directories to hold open: at most half of what the soft RLIMIT_NOFILE
    leaves above the headroom, so a large garden never starves the server of sockets."""
    try:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):
        return 0
    if soft == resource.RLIM_INFINITY:
        return wanted
    return max(0, min(wanted, (soft - _FD_HEADROOM) // 2))


class DirStamps:
    """`mtime_ns(i)` of directory `paths[i]`; None when it is missing."""

    def __init__(self, paths: list[str], *, budget: int | None = None) -> None:
        self.paths = paths
        self._fds: list[int] = [-1] * len(paths)
        self._ino: list[tuple[int, int]] = [(0, 0)] * len(paths)
        limit = fd_budget(len(paths)) if budget is None else max(0, min(budget, len(paths)))
        for i in range(limit):
            self._open(i)

    @property
    def held(self) -> int:
        return sum(1 for fd in self._fds if fd >= 0)

    def _open(self, i: int) -> None:
        try:
            fd = os.open(self.paths[i], os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:  # missing now, or out of descriptors: stat by path
            return
        st = os.fstat(fd)
        self._fds[i], self._ino[i] = fd, (st.st_dev, st.st_ino)

    def _drop(self, i: int) -> None:
        fd, self._fds[i] = self._fds[i], -1
        if fd >= 0:
            os.close(fd)

    def mtime_ns(self, i: int) -> int | None:
        fd = self._fds[i]
        try:
            if fd >= 0:
                st = os.fstat(fd)
                if st.st_nlink > 0:
                    return st.st_mtime_ns
                self._drop(i)  # removed under us: back to its path, and hold it again
                self._open(i)
            return os.stat(self.paths[i]).st_mtime_ns
        except FileNotFoundError:
            return None

    def verify(self) -> None:
        """Reopen every held directory whose path now names another inode (replaced)."""
        for i, fd in enumerate(self._fds):
            if fd < 0:
                continue
            try:
                st = os.stat(self.paths[i])
            except FileNotFoundError:
                continue  # gone: the next mtime_ns sees no links and falls back to the path
            if (st.st_dev, st.st_ino) != self._ino[i]:
                self._drop(i)
                self._open(i)

    def close(self) -> None:
        for i in range(len(self._fds)):
            self._drop(i)
