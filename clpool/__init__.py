"""clpool: the pooling ops of PyTorch as OpenCL C kernels, on any OpenCL device."""

from ._version import __version__ as __version__
from .adaptive_max import (
    adaptive_max_pool1d,
    adaptive_max_pool1d_backward,
    adaptive_max_pool2d,
    adaptive_max_pool2d_backward,
    adaptive_max_pool3d,
    adaptive_max_pool3d_backward,
)
from .discovery import DeviceInfo, devices
from .errors import KernelError, PoolArgumentError, PoolError, UnsupportedDtypeError
from .ops import (
    adaptive_avg_pool2d,
    adaptive_avg_pool2d_backward,
    avg_pool2d,
    avg_pool2d_backward,
    default_queue,
    empty_cache,
    max_pool2d,
    max_pool2d_with_indices,
    max_pool2d_with_indices_backward,
)
from .pool1d import (
    adaptive_avg_pool1d,
    adaptive_avg_pool1d_backward,
    avg_pool1d,
    avg_pool1d_backward,
    max_pool1d,
    max_pool1d_with_indices_backward,
)
from .pool3d import (
    adaptive_avg_pool3d,
    adaptive_avg_pool3d_backward,
    avg_pool3d,
    avg_pool3d_backward,
    max_pool3d,
    max_pool3d_with_indices,
    max_pool3d_with_indices_backward,
)
from .unpool import (
    max_unpool1d,
    max_unpool1d_backward,
    max_unpool2d,
    max_unpool2d_backward,
    max_unpool3d,
    max_unpool3d_backward,
)

__all__ = [
    "DeviceInfo",
    "KernelError",
    "PoolArgumentError",
    "PoolError",
    "UnsupportedDtypeError",
    "adaptive_avg_pool1d",
    "adaptive_avg_pool1d_backward",
    "adaptive_avg_pool2d",
    "adaptive_avg_pool2d_backward",
    "adaptive_max_pool1d",
    "adaptive_max_pool1d_backward",
    "adaptive_max_pool2d",
    "adaptive_max_pool2d_backward",
    "adaptive_max_pool3d",
    "adaptive_max_pool3d_backward",
    "avg_pool1d",
    "avg_pool1d_backward",
    "avg_pool2d",
    "avg_pool2d_backward",
    "default_queue",
    "devices",
    "empty_cache",
    "max_pool1d",
    "max_pool1d_with_indices_backward",
    "max_pool2d",
    "max_pool2d_with_indices",
    "max_pool2d_with_indices_backward",
    "max_unpool1d",
    "max_unpool1d_backward",
    "max_unpool2d",
    "max_unpool2d_backward",
    "max_unpool3d",
    "max_unpool3d_backward",
    "adaptive_avg_pool3d",
    "adaptive_avg_pool3d_backward",
    "avg_pool3d",
    "avg_pool3d_backward",
    "max_pool3d",
    "max_pool3d_with_indices",
    "max_pool3d_with_indices_backward",
]
