"""Type stubs of the native module; use the functions of ``hetsparse`` instead."""

from typing import Any, Callable, List, Optional, Tuple

import numpy as np
import numpy.typing as npt

# (format, nrows, ncols, indptr or row, indices or col, data)
_Parts = Tuple[str, int, int, npt.NDArray[np.integer], npt.NDArray[np.integer], npt.NDArray[Any]]
# (nrows, ncols, indptr, indices, data) of a CSR matrix
_Csr = Tuple[int, int, npt.NDArray[np.integer], npt.NDArray[np.integer], npt.NDArray[Any]]

FEATURES: List[str]

class DeviceError(RuntimeError): ...

def spgemm(
    a: _Parts,
    b: _Parts,
    device: str,
    transpose: bool = False,
    same: bool = False,
    progress: Optional[Callable[[int, int], object]] = None,
    memory_limit: Optional[int] = None,
) -> _Csr: ...
def spmm(a: _Parts, x: npt.NDArray[Any], device: str) -> Tuple[npt.NDArray[Any], bool]: ...
def spmv(a: _Parts, x: npt.NDArray[Any], device: str) -> npt.NDArray[Any]: ...
def devices(device: str = "auto") -> List[dict]: ...
def generate(matrix_class: str, size: int, seed: int) -> Tuple[_Csr, _Csr]: ...
def time_spgemm(
    a: _Parts, b: _Parts, device: str = "auto", runs: int = 5, same: bool = False
) -> List[float]: ...
def _save_calibrations() -> int: ...
