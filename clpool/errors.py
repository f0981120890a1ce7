"""The exception classes of clpool and the one handler every failure goes through."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import NoReturn


class PoolError(Exception):
    """A clpool op failed; the message names the op, the device and the dtype."""

    def __init__(self, label: str, device: str, dtype: str, reason: str) -> None:
        super().__init__(f"{label} kernel failed (device={device}, dtype={dtype}): {reason}")
        self.label = label
        self.device = device
        self.dtype = dtype
        self.reason = reason


class PoolArgumentError(PoolError, ValueError):
    """An argument is invalid: sizes, rank, shapes of gradients or indices, index dtype."""


class UnsupportedDtypeError(PoolError, TypeError):
    """clpool, or the chosen device, does not support the dtype."""


class KernelError(PoolError, RuntimeError):
    """An OpenCL build or launch failed; carries the build log and options when building."""

    def __init__(
        self, label: str, device: str, dtype: str, reason: str, log: str = "", options: str = ""
    ) -> None:
        super().__init__(label, device, dtype, reason)
        self.log = log
        self.options = options


class Problem(Exception):
    """Raised inside clpool where the op, device or dtype is not known; `reporting` turns it
    into the right PoolError subclass."""

    def __init__(self, kind: type[PoolError], reason: str, **extra: str) -> None:
        super().__init__(reason)
        self.kind = kind
        self.reason = reason
        self.extra = extra


def fail(
    kind: type[PoolError], label: str, device: str, dtype: str, reason: str, **extra: str
) -> NoReturn:
    """The one handler: raise `kind` with the clpool message format."""
    raise kind(label, device, dtype, reason, **extra)


@dataclass
class Where:
    """What is known so far about the op being run, for the error message."""

    label: str
    device: str = "unknown"
    dtype: object = "unknown"  # a numpy dtype once known; named only if the op fails


@contextmanager
def reporting(label: str) -> Iterator[Where]:
    """Run an op's body so that every failure inside it leaves through `fail`."""
    import pyopencl as cl

    where = Where(label)
    try:
        yield where
    except PoolError:
        raise
    except Problem as p:
        fail(p.kind, label, where.device, str(where.dtype), p.reason, **p.extra)
    except (cl.Error, MemoryError) as e:
        fail(KernelError, label, where.device, str(where.dtype), f"launch failed: {e}")
    except Exception as e:  # a failure nothing above foresaw still leaves through `fail`
        fail(
            KernelError,
            label,
            where.device,
            str(where.dtype),
            f"unexpected {type(e).__name__}: {e}",
        )
