"""Debug buffers with named slots: MLX's habit of adding one more output, ``dbg``, where each
thread writes what it wants to see (``dbg[tid * K + slot] = value``), made readable.

>>> dbg = kiln.debug_buffer(["sum", "max", "idx"], threads=64)
>>> kernel = kiln.metal_kernel("k", ["x"], ["out", "dbg"], source, header=dbg.header())
>>> out, raw = kernel(inputs=[x], output_shapes=[x.shape, dbg.shape],
...                   output_dtypes=[x.dtype, dbg.dtype], grid=(64, 1, 1), threadgroup=(32, 1, 1))
>>> print(dbg.read(raw))          # a table; dbg.read(raw)["sum"] is a NumPy array per thread

In the kernel, ``dbg[tid * DBG_SLOTS + DBG_SUM] = s;`` (the constants come from
:meth:`DebugBuffer.header`), or with ``per_thread=R`` records per thread,
``dbg[(tid * R + r) * DBG_SLOTS + DBG_MAX] = m;``.
"""

from __future__ import annotations

import re

import numpy as np

from .errors import InvalidArgumentError

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class DebugValues(dict):
    """The slots of a debug buffer by name, each a NumPy array indexed by thread (and record);
    ``str()`` gives a table of the first threads."""

    def __init__(self, values: dict, limit: int = 32):
        super().__init__(values)
        self._limit = limit

    def table(self, limit: int | None = None) -> str:
        """A fixed-width table, one row per thread (and record), at most ``limit`` rows."""
        limit = self._limit if limit is None else int(limit)
        names = list(self)
        if not names:
            return ""
        first = next(iter(self.values()))
        index_names = ["thread"] if first.ndim == 1 else ["thread", "record"]
        rows = []
        for index in np.ndindex(*first.shape):
            rows.append([str(i) for i in index] + [_cell(self[n][index]) for n in names])
            if len(rows) == limit:
                break
        header = index_names + names
        widths = [max(len(h), *(len(r[c]) for r in rows)) if rows else len(h) for c, h in enumerate(header)]
        lines = ["  ".join(h.rjust(w) for h, w in zip(header, widths))]
        lines += ["  ".join(v.rjust(w) for v, w in zip(r, widths)) for r in rows]
        total = first.size
        if total > len(rows):
            lines.append(f"... {total - len(rows)} more")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


def _cell(v) -> str:
    if isinstance(v, (np.floating, float)):
        return "nan" if np.isnan(v) else f"{float(v):.6g}"
    return str(v)


class DebugBuffer:
    """A debug output of ``threads × per_thread`` records of ``len(slots)`` named values.

    ``shape``, ``dtype`` and ``name`` go into the kernel call (an extra output, ``init_value``
    unset so unwritten float slots read NaN on the CPU emulator, which poisons outputs);
    :meth:`output` is the same as a :class:`kiln.Output` for :func:`kiln.metal_library`;
    :meth:`header` declares ``DBG_<SLOT>`` and ``DBG_SLOTS`` for the kernel's source; after the
    call :meth:`read` names the slots.
    """

    __slots__ = ("slots", "threads", "per_thread", "dtype", "name", "prefix")

    def __init__(self, slots, threads, per_thread: int = 1, dtype=np.float32, name: str = "dbg",
                 prefix: str = "DBG_"):
        slots = tuple(slots)
        if not slots:
            raise InvalidArgumentError("[debug_buffer] needs at least one slot name")
        for s in slots:
            if not isinstance(s, str) or not _NAME.match(s):
                raise InvalidArgumentError(f"[debug_buffer] slot name {s!r} is not an identifier")
        if len(set(slots)) != len(slots):
            raise InvalidArgumentError(f"[debug_buffer] slot names repeat: {list(slots)}")
        if isinstance(threads, (tuple, list)):
            dims = [int(t) for t in threads]
            threads = int(np.prod(dims)) if dims else 0
        threads = int(threads)
        per_thread = int(per_thread)
        if threads <= 0 or per_thread <= 0:
            raise InvalidArgumentError(
                f"[debug_buffer] threads ({threads}) and per_thread ({per_thread}) must be positive"
            )
        self.slots = slots
        self.threads = threads
        self.per_thread = per_thread
        self.dtype = np.dtype(dtype)
        self.name = name
        self.prefix = prefix

    @property
    def stride(self) -> int:
        """Values per record: the ``K`` of ``dbg[tid * K + slot]``."""
        return len(self.slots)

    @property
    def shape(self) -> tuple:
        return (self.threads * self.per_thread * self.stride,)

    def slot(self, name: str) -> int:
        """The index of slot ``name``."""
        try:
            return self.slots.index(name)
        except ValueError:
            raise InvalidArgumentError(f"[debug_buffer] no slot {name!r} (slots: {list(self.slots)})") from None

    def output(self):
        """This buffer as a :class:`kiln.Output`, for :func:`kiln.metal_library` dispatches."""
        from ._kernel import Output

        return Output(self.shape, self.dtype)

    def header(self) -> str:
        """Metal declarations of the slot indices (``DBG_SUM``, ...), ``DBG_SLOTS`` and
        ``DBG_RECORDS`` (records per thread), for a kernel's header."""
        p = self.prefix
        lines = [f"constant uint {p}{s.upper()} = {i};" for i, s in enumerate(self.slots)]
        lines.append(f"constant uint {p}SLOTS = {self.stride};")
        lines.append(f"constant uint {p}RECORDS = {self.per_thread};")
        return "\n".join(lines) + "\n"

    def read(self, array, limit: int = 32) -> DebugValues:
        """The slots of a filled buffer by name: arrays of shape ``(threads,)``, or
        ``(threads, per_thread)`` with several records per thread. ``limit`` caps the rows its
        ``str()`` shows."""
        if hasattr(array, "detach") and hasattr(array, "cpu"):
            array = array.detach().cpu()
        values = np.asarray(array)
        if values.size != self.threads * self.per_thread * self.stride:
            raise InvalidArgumentError(
                f"[debug_buffer] the buffer holds {values.size} values, not {self.threads} threads × "
                f"{self.per_thread} records × {self.stride} slots"
            )
        records = values.reshape(self.threads, self.per_thread, self.stride)
        out = {}
        for i, s in enumerate(self.slots):
            column = records[:, :, i]
            out[s] = column[:, 0].copy() if self.per_thread == 1 else column.copy()
        return DebugValues(out, limit)

    def __repr__(self) -> str:
        return (f"DebugBuffer(slots={list(self.slots)}, threads={self.threads}, per_thread={self.per_thread}, "
                f"dtype={self.dtype.name}, shape={self.shape})")


def debug_buffer(slots, threads, per_thread: int = 1, dtype=np.float32, name: str = "dbg",
                 prefix: str = "DBG_") -> DebugBuffer:
    """A debug output with named slots (see :class:`DebugBuffer`): ``threads`` is the number of
    threads that write (an int, or a grid tuple whose product is taken), each writing
    ``per_thread`` records of one value per slot, at ``dbg[(tid * per_thread + r) * len(slots) +
    slot]`` where ``tid`` is the thread's linear index in the grid."""
    return DebugBuffer(slots, threads, per_thread, dtype, name, prefix)
