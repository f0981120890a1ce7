"""bfloat16 through the optional ml_dtypes (extra "bfloat16"): 16 bits in memory,
computed in float32. ml_dtypes is imported only where a bfloat16 is asked for by name or
comes as a torch tensor (its import takes about half a second); clpool runs without it."""

from __future__ import annotations

import importlib.util
import sys

import numpy as np

from .errors import Problem, UnsupportedDtypeError

NAME = "bfloat16"
MISSING = "dtype bfloat16 needs ml_dtypes: pip install 'clpool[bfloat16]'"


def available() -> bool:
    """True where ml_dtypes is installed (nothing is imported)."""
    return importlib.util.find_spec("ml_dtypes") is not None


def dtype() -> np.dtype:
    """ml_dtypes.bfloat16 as a numpy dtype; an UnsupportedDtypeError without ml_dtypes."""
    try:
        import ml_dtypes
    except ImportError:
        raise Problem(UnsupportedDtypeError, MISSING) from None
    dt: np.dtype = np.dtype(ml_dtypes.bfloat16)
    return dt


def is_bfloat16(dt: np.dtype) -> bool:
    """True for ml_dtypes.bfloat16 (an array of it means ml_dtypes is loaded already)."""
    ml = sys.modules.get("ml_dtypes")
    return ml is not None and dt == ml.bfloat16


def as_dtype(name: object) -> np.dtype:
    """np.dtype(name), where "bfloat16" is ml_dtypes.bfloat16."""
    return dtype() if name == NAME else np.dtype(name)  # type: ignore[call-overload]
