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


@contextmanager
def relabeled(label: str) -> Iterator[None]:
    """Report a PoolError raised inside under `label` (an op that runs another op)."""
    try:
        yield
    except PoolError as e:
        extra = dict(log=e.log, options=e.options) if isinstance(e, KernelError) else {}
        fail(type(e), label, e.device, e.dtype, e.reason, **extra)


@dataclass
class Where:
    """What is known so far about the op being run, for the error message."""

    label: str
    device: str = "unknown"
    dtype: object = "unknown"  # a numpy dtype once known; named only if the op fails


class reporting:  # noqa: N801 (used as a context manager, like contextlib's)
    """`with reporting(label) as where:` runs an op's body so that every failure inside it
    leaves through `fail`, naming what `where` knows by then."""

    def __init__(self, label: str) -> None:
        self.where = Where(label)

    def __enter__(self) -> Where:
        return self.where

    def __exit__(self, kind: type | None, e: BaseException | None, tb: object) -> None:
        if e is None or isinstance(e, PoolError) or not isinstance(e, Exception):
            return
        import pyopencl as cl

        w = self.where
        if isinstance(e, Problem):
            fail(e.kind, w.label, w.device, str(w.dtype), e.reason, **e.extra)
        if isinstance(e, cl.Error):
            fail(KernelError, w.label, w.device, str(w.dtype), f"launch failed: {e}")
        if isinstance(e, MemoryError):
            fail(KernelError, w.label, w.device, str(w.dtype), f"out of memory: {e}")
        # a failure nothing above foresaw still leaves through `fail`
        fail(KernelError, w.label, w.device, str(w.dtype), f"unexpected {type(e).__name__}: {e}")
