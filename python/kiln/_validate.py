"""The arguments of a kernel call or a library dispatch, checked once in Python: each error is
a :class:`kiln.KilnError` subclass (also a ``ValueError`` or ``TypeError``) whose message starts
with the kernel (``[metal_kernel myexp]``) and names the argument (``grid``, ``output_shapes[1]``,
``template 'N'``), never a bare ``OverflowError`` from a conversion."""

from __future__ import annotations

import math
import operator

import numpy as np

from ._dtypes import dtype_name
from .errors import InvalidArgumentError, KilnError, UnsupportedDTypeError

_U32 = 2**32
_I32 = 2**31


def integer(value) -> int | None:
    """``value`` as a Python int when it is an integer (not a bool), else None."""
    if isinstance(value, (bool, np.bool_)):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def dims(op: str, what: str, value) -> tuple:
    """Three non-negative integers below 2^32 (a grid, threadgroup or threadgroup count)."""
    try:
        items = tuple(value)
    except TypeError:
        items = None
    ints = None if items is None or len(items) != 3 else [integer(v) for v in items]
    if ints is None or any(v is None or not 0 <= v < _U32 for v in ints):
        raise InvalidArgumentError(f"[{op}] {what} must be three integers in [0, 2^32), got {value!r}")
    return tuple(ints)


def shape(op: str, what: str, value) -> tuple:
    """A shape: non-negative integers."""
    try:
        items = tuple(value)
    except TypeError:
        raise InvalidArgumentError(f"[{op}] {what} must be a sequence of non-negative integers, got {value!r}") from None
    ints = [integer(v) for v in items]
    if any(v is None or v < 0 or v >= 2**63 for v in ints):
        raise InvalidArgumentError(f"[{op}] {what} must be a sequence of non-negative integers, got {value!r}")
    return tuple(ints)


def shapes(op: str, value) -> list:
    return [shape(op, f"output_shapes[{k}]", s) for k, s in enumerate(sequence(op, "output_shapes", value))]


def dtype(op: str, what: str, value) -> str:
    """kiln's name of a dtype argument."""
    try:
        return dtype_name(value)
    except UnsupportedDTypeError as e:
        raise UnsupportedDTypeError(f"[{op}] {what}: {_message(e)}") from None


def dtypes(op: str, value) -> list:
    return [dtype(op, f"output_dtypes[{k}]", d) for k, d in enumerate(sequence(op, "output_dtypes", value))]


def template(op: str, value) -> list:
    """MLX's template list: ``(name, value)`` pairs with bool, int (32-bit) or dtype values."""
    if not value:
        return []
    out = []
    for item in sequence(op, "template", value):
        if not isinstance(item, (tuple, list)) or len(item) != 2 or not isinstance(item[0], str):
            raise InvalidArgumentError(f"[{op}] template entries are (name, value) pairs, got {item!r}")
        name, v = item
        if not name.isidentifier():
            raise InvalidArgumentError(f"[{op}] template name {name!r} is not an identifier")
        if isinstance(v, (bool, np.bool_)):
            out.append((name, bool(v)))
            continue
        n = integer(v)
        if n is not None:
            if not -_I32 <= n < _I32:
                raise InvalidArgumentError(
                    f"[{op}] template {name!r} = {n} does not fit the 32-bit int that template integers are"
                )
            out.append((name, n))
            continue
        try:
            out.append((name, dtype_name(v)))
        except UnsupportedDTypeError:
            raise InvalidArgumentError(
                f"[{op}] invalid template argument {name!r} = {v!r}; must be Dtype, int or bool"
            ) from None
    return out


def init_value(op: str, value) -> float | None:
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)) or integer(value) is not None or isinstance(value, (float, np.floating)):
        return float(value)
    raise InvalidArgumentError(f"[{op}] init_value must be a number, got {value!r}")


def device(op: str, value) -> str | None:
    """``None``, ``"cpu"``, ``"cuda"`` or ``"cuda:N"`` (a ``torch.device`` prints as one)."""
    if value is None:
        return None
    text = str(value)
    kind, _, index = text.partition(":")
    if kind in ("cpu", "cuda") and (not index or (kind == "cuda" and index.isdigit())):
        return text
    raise InvalidArgumentError(f"[{op}] device must be 'cpu', 'cuda' or 'cuda:N', got {value!r}")


def timeout(op: str, value) -> float | None:
    """A time limit in seconds: a positive, finite number."""
    if value is None:
        return None
    seconds = init_value(op, value) if not isinstance(value, (bool, np.bool_)) else None
    if seconds is None or not math.isfinite(seconds) or seconds <= 0:
        raise InvalidArgumentError(f"[{op}] timeout must be a positive number of seconds, got {value!r}")
    return seconds


def text(op: str, what: str, value) -> str:
    """A string argument (a name, a source, a header)."""
    if not isinstance(value, str):
        raise InvalidArgumentError(f"[{op}] {what} must be a str, got {type(value).__name__}")
    return value


def names(op: str, what: str, value) -> list:
    """A list of names (``input_names``, ``output_names``); a bare string is refused, not split
    into characters."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise InvalidArgumentError(f"[{op}] {what} must be a list of str, got {value!r}")
    items = list(value)
    for k, n in enumerate(items):
        if not isinstance(n, str):
            raise InvalidArgumentError(f"[{op}] {what}[{k}] must be a str, got {n!r}")
    return items


def number(op: str, what: str, value) -> float:
    """A real number (an op's ``eps``, ``scale``, ``base``)."""
    if isinstance(value, (bool, np.bool_)) or not (integer(value) is not None or isinstance(value, (float, np.floating))):
        raise InvalidArgumentError(f"[{op}] {what} must be a number, got {value!r}")
    return float(value)


def count(op: str, what: str, value, low: int = 0, high: int = 2**63) -> int:
    """An integer in ``[low, high)`` (an op's ``dims``, ``hop``, ``bins``, ``offset``)."""
    n = integer(value)
    if n is None or not low <= n < high:
        raise InvalidArgumentError(f"[{op}] {what} must be an integer in [{low}, {high}), got {value!r}")
    return n


def scalar(op: str, what: str, value):
    """A Python int input kiln can pass (int32, else int64: MLX's rule)."""
    if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**63:
        raise InvalidArgumentError(f"[{op}] {what} = {value} does not fit int64")
    return value


def named(op: str, what: str, error: KilnError) -> KilnError:
    """``error`` of a conversion, as the same class with a message naming ``op`` and ``what``."""
    return type(error)(f"[{op}] {what}: {_message(error)}")


def _message(error: Exception) -> str:
    """An error's text without the ``[kiln]`` prefix of a context-free conversion."""
    text = str(error)
    return text[len("[kiln] "):] if text.startswith("[kiln] ") else text


def sequence(op: str, what: str, value) -> list:
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise InvalidArgumentError(f"[{op}] {what} must be a list, got {value!r}")
    return list(value)
