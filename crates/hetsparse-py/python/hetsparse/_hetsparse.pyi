"""Type stubs of the native module; use the functions of ``hetsparse`` instead."""

from typing import Any, Callable, List, Optional, Tuple, Union

import numpy as np
import numpy.typing as npt

# (format, nrows, ncols, indptr or row, indices or col, data)
_Parts = Tuple[str, int, int, npt.NDArray[np.integer], npt.NDArray[np.integer], npt.NDArray[Any]]
# (nrows, ncols, indptr, indices, data) of a CSR matrix
_Csr = Tuple[int, int, npt.NDArray[np.integer], npt.NDArray[np.integer], npt.NDArray[Any]]

FEATURES: List[str]

class DeviceError(RuntimeError): ...

def spgemm(
    a: Union[_Parts, "StoredMatrix"],
    b: Union[_Parts, "StoredMatrix"],
    device: str,
    transpose: bool = False,
    same: bool = False,
    progress: Optional[Callable[[int, int], object]] = None,
    memory_limit: Optional[int] = None,
) -> _Csr: ...
def spmm(
    a: Union[_Parts, "StoredMatrix"], x: npt.NDArray[Any], device: str
) -> Tuple[npt.NDArray[Any], bool]: ...
def spmv(a: Union[_Parts, "StoredMatrix"], x: npt.NDArray[Any], device: str) -> npt.NDArray[Any]: ...
def devices(device: str = "auto") -> List[dict]: ...
def generate(matrix_class: str, size: int, seed: int) -> Tuple[_Csr, _Csr]: ...
def time_spgemm(
    a: _Parts, b: _Parts, device: str = "auto", runs: int = 5, same: bool = False
) -> List[float]: ...
def _save_calibrations() -> int: ...
def _operands_read() -> int: ...

class StoredMatrix:
    """A matrix converted and checked once (the native half of ``hetsparse.Matrix``)."""

    def __init__(self, parts: _Parts, device: Optional[str] = None) -> None: ...
    @property
    def shape(self) -> Tuple[int, int]: ...
    @property
    def device(self) -> Optional[str]: ...
    @property
    def nnz(self) -> int: ...
    @property
    def dtype(self) -> str: ...
    def to_csr(self) -> _Csr: ...
