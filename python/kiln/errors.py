"""kiln's exceptions: one class per kind of failure, all under :class:`KilnError`.

Every message starts with the kernel or op it concerns (``[metal_kernel myexp] ...``).
Argument errors are also ``ValueError`` (dtype errors also ``TypeError``), and
:class:`TimeoutError` is also the built-in ``TimeoutError``, so code written against MLX's
exceptions keeps working. Ctrl-C during a kernel raises ``KeyboardInterrupt``.
"""

import builtins


class KilnError(Exception):
    """Base class of every error kiln raises."""


class InvalidArgumentError(KilnError, ValueError):
    """A kernel or op was called with arguments it cannot accept."""


class ShapeMismatchError(InvalidArgumentError):
    """An input has the wrong shape."""


class UnsupportedDTypeError(InvalidArgumentError, TypeError):
    """A dtype the kernel, op or framework bridge does not support."""


class CompileError(KilnError, RuntimeError):
    """Translating or compiling a kernel failed; the message holds the compiler's log."""


class BackendUnavailableError(KilnError, RuntimeError):
    """A backend cannot run here (no driver, no device, no compiler)."""


class DriverError(KilnError, RuntimeError):
    """A device driver call failed."""


class TimeoutError(KilnError, builtins.TimeoutError):  # noqa: A001 - kiln.TimeoutError by design
    """A kernel ran past its time limit and was stopped."""


class KernelFaultError(KilnError, RuntimeError):
    """A kernel faulted while running (an out-of-bounds access, a device exception)."""


class SpecError(KilnError, ValueError):
    """A kernel spec file is malformed."""


class KilnIOError(KilnError, OSError):
    """A file could not be read or written."""


class InternalError(KilnError, RuntimeError):
    """A bug in kiln itself, caught before it could reach the interpreter (please report it)."""


__all__ = [
    "KilnError",
    "InvalidArgumentError",
    "ShapeMismatchError",
    "UnsupportedDTypeError",
    "CompileError",
    "BackendUnavailableError",
    "DriverError",
    "TimeoutError",
    "KernelFaultError",
    "SpecError",
    "KilnIOError",
    "InternalError",
]
