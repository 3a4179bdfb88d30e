"""Clearing the x87 floating-point unit after LiteSVM runs a transaction.

Why: executing an SPL Token transaction in LiteSVM (solders 0.2x, x86-64) leaves the
calling thread's x87 unit dirty — registers tagged in use, as MMX code leaves them
without EMMS, and the stack-fault flag set (seen with gdb's `info float`). Python's own
floats never touch the x87, but SQLite 3.40 (Debian 12's, which CPython links here)
computes in `long double` where it compares an INTEGER with a REAL and where it prints a
REAL: on such a thread `printf('%.1f', 2.5)` gives 'NaN', and an index seek such as
`updated_at > 0` over REAL keys returned half its rows (measured: 3 of 6). Any process
that holds a LiteSVM chain and a SQLite store on one thread — the demo, the devnet, the
tests — would read wrong answers from its own database.

`clear()` runs EMMS and FNINIT (five bytes of x86-64 machine code, mapped read-and-
execute, never writable once made executable) on the calling thread: every register
empty, default control word, no flags. Elsewhere (another architecture, or a system that
refuses an executable mapping) it does nothing.
"""

from __future__ import annotations

import ctypes
import mmap
import platform
from collections.abc import Callable

__all__ = ["clear"]

_CODE = b"\x0f\x77" + b"\xdb\xe3" + b"\xc3"  # emms; fninit; ret


def _make() -> Callable[[], None]:
    if platform.machine().lower() not in ("x86_64", "amd64") or not hasattr(mmap, "PROT_EXEC"):
        return lambda: None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        page.write(_CODE)
        address = ctypes.addressof(ctypes.c_char.from_buffer(page))
        libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
        if libc.mprotect(address, mmap.PAGESIZE, mmap.PROT_READ | mmap.PROT_EXEC) != 0:
            return lambda: None  # W^X policy refuses it: stay as we were
    except (OSError, AttributeError, ValueError):
        return lambda: None
    _KEEP.append(page)  # the page lives as long as the function that points into it
    fn: Callable[[], None] = ctypes.CFUNCTYPE(None)(address)
    return fn


_KEEP: list[mmap.mmap] = []
clear: Callable[[], None] = _make()
