"""The types of the public ops' arguments, for their annotations and for users' checkers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, TypeAlias

import numpy as np
import pyopencl.array as cla

# kernel_size, stride, padding, dilation: one int for every spatial axis, or one per axis.
Size: TypeAlias = int | tuple[int, ...]
# an adaptive op's output_size: None keeps that axis's input size.
OptionalSize: TypeAlias = int | None | tuple[int | None, ...]


class DLPackTensor(Protocol):
    """Any array that exports itself through DLPack: a torch tensor, a JAX or CuPy array."""

    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any: ...


# What an op takes and gives back: a numpy array, a pyopencl Array, or a DLPack producer
# such as a torch tensor (the result is then a tensor like it).
Tensor: TypeAlias = np.ndarray[Any, Any] | cla.Array | DLPackTensor

# out=: a pyopencl Array to write the result into, or a pair of them (values, indices).
Out: TypeAlias = cla.Array | Sequence[cla.Array] | None
