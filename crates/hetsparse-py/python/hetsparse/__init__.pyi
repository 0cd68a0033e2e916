"""Type stubs of hetsparse: sparse matrix products on CPU cores, CUDA GPUs, OpenCL devices."""

from typing import Callable, List, Literal, Optional, Tuple, TypedDict, Union, overload

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

__all__ = [
    "spgemm",
    "spmm",
    "spmv",
    "mxm",
    "mxv",
    "vxm",
    "Matrix",
    "devices",
    "generate",
    "DeviceError",
    "DTYPES",
    "FEATURES",
    "SEMIRINGS",
    "MONOIDS",
]

DTYPES: Tuple[np.dtype, ...]
EXACT_DTYPES: Tuple[np.dtype, ...]
FEATURES: Tuple[str, ...]
SEMIRINGS: Tuple[str, ...]
MONOIDS: Tuple[str, ...]

class DeviceError(RuntimeError):
    """A device, driver or runtime failed, or no device of the kind asked for is present."""

class Device(TypedDict):
    id: str
    name: Optional[str]
    backend: str
    kind: Optional[str]
    compute_units: int
    memory_bytes: int
    dtypes: List[str]
    used: bool
    reason: Optional[str]

_Sparse = Union[sp.spmatrix, sp.sparray]
# progress(done, planned): intermediate products computed of those planned
_Progress = Callable[[int, int], object]

@overload
def spgemm(
    A: sp.csc_matrix,
    B: Union[_Sparse, "Matrix"],
    device: str = ...,
    *,
    progress: Optional[_Progress] = ...,
    memory_limit: Optional[int] = ...,
    keep: Literal[False] = ...,
) -> sp.csc_matrix: ...
@overload
def spgemm(
    A: sp.csc_array,
    B: Union[_Sparse, "Matrix"],
    device: str = ...,
    *,
    progress: Optional[_Progress] = ...,
    memory_limit: Optional[int] = ...,
    keep: Literal[False] = ...,
) -> sp.csc_array: ...
@overload
def spgemm(
    A: sp.sparray,
    B: Union[_Sparse, "Matrix"],
    device: str = ...,
    *,
    progress: Optional[_Progress] = ...,
    memory_limit: Optional[int] = ...,
    keep: Literal[False] = ...,
) -> sp.csr_array: ...
@overload
def spgemm(
    A: sp.spmatrix,
    B: Union[_Sparse, "Matrix"],
    device: str = ...,
    *,
    progress: Optional[_Progress] = ...,
    memory_limit: Optional[int] = ...,
    keep: Literal[False] = ...,
) -> sp.csr_matrix: ...
@overload
def spgemm(
    A: "Matrix",
    B: Union[_Sparse, "Matrix"],
    device: str = ...,
    *,
    progress: Optional[_Progress] = ...,
    memory_limit: Optional[int] = ...,
    keep: Literal[False] = ...,
) -> Union[sp.csr_matrix, sp.csr_array]: ...
@overload
def spgemm(
    A: Union[_Sparse, "Matrix"],
    B: Union[_Sparse, "Matrix"],
    device: str = ...,
    *,
    progress: Optional[_Progress] = ...,
    memory_limit: Optional[int] = ...,
    keep: Literal[True],
) -> "Matrix": ...
def spgemm(
    A: Union[_Sparse, "Matrix"],
    B: Union[_Sparse, "Matrix"],
    device: str = "auto",
    *,
    progress: Optional[_Progress] = None,
    memory_limit: Optional[int] = None,
    keep: bool = False,
) -> Union[_Sparse, "Matrix"]:
    """``A @ B`` for sparse ``A`` and ``B`` (scipy operands or ``Matrix`` objects), as scipy
    returns it (CSR, or CSC when ``A`` is CSC; an array or a matrix as ``A`` is);
    ``progress(done, planned)`` hears the intermediate products done as it runs,
    ``memory_limit`` bounds the result's bytes; ``keep=True`` gives a ``Matrix`` left where
    it was computed."""

def spmm(
    A: Union[_Sparse, "Matrix"], X: npt.ArrayLike, device: str = "auto"
) -> npt.NDArray[np.generic]:
    """``A @ X`` for a two-dimensional dense ``X``."""

def spmv(
    A: Union[_Sparse, "Matrix"], x: npt.ArrayLike, device: str = "auto"
) -> npt.NDArray[np.generic]:
    """``A @ x`` for a one-dimensional dense ``x``."""

def devices(device: str = "auto") -> List[Device]:
    """Every device ``device`` reaches, used or not, with why not."""

@overload
def generate(
    matrix_class: str, size: int, seed: int = ..., dtype: npt.DTypeLike = ..., *, array: Literal[True]
) -> Tuple[sp.csr_array, sp.csr_array]: ...
@overload
def generate(
    matrix_class: str, size: int, seed: int = ..., dtype: npt.DTypeLike = ..., array: bool = ...
) -> Tuple[sp.csr_matrix, sp.csr_matrix]: ...

class Matrix:
    """A sparse matrix checked and converted once, kept in hetsparse's memory: ``spgemm``,
    ``spmv``, ``spmm``, ``mxm``, ``mxv`` and ``vxm`` take it wherever they take a scipy operand,
    without converting it again."""

    def __init__(
        self,
        A: Union[_Sparse, "Matrix"],
        dtype: Optional[npt.DTypeLike] = ...,
        device: Optional[str] = ...,
    ) -> None: ...
    @property
    def shape(self) -> Tuple[int, int]: ...
    @property
    def nnz(self) -> int: ...
    @property
    def dtype(self) -> np.dtype: ...
    @property
    def ndim(self) -> int: ...
    @property
    def device(self) -> Optional[str]:
        """The device whose memory holds a copy, or ``None``."""
    def to_scipy(self) -> Union[sp.csr_matrix, sp.csr_array]:
        """A copy in CSR: an array when made from a sparse array, else a matrix."""
    def reduce_scalar(self, monoid: object = "plus", *, allow_empty: bool = True) -> Optional[np.generic]:
        """The stored values combined by ``monoid`` (``MONOIDS``); ``None`` when there are none
        and ``allow_empty``."""

_Operand = Union[_Sparse, Matrix]
_Vector = Union[npt.ArrayLike, _Sparse, Matrix]

@overload
def mxm(
    A: _Operand,
    B: _Operand,
    semiring: object = "plus_times",
    *,
    mask: Optional[_Operand] = ...,
    structural: bool = ...,
    complement: bool = ...,
    replace: bool = ...,
    accum: Optional[object] = ...,
    out: Optional[_Operand] = ...,
    device: str = ...,
    keep: Literal[False] = ...,
) -> Union[sp.csr_matrix, sp.csr_array]: ...
@overload
def mxm(
    A: _Operand,
    B: _Operand,
    semiring: object = "plus_times",
    *,
    mask: Optional[_Operand] = ...,
    structural: bool = ...,
    complement: bool = ...,
    replace: bool = ...,
    accum: Optional[object] = ...,
    out: Optional[_Operand] = ...,
    device: str = ...,
    keep: Literal[True],
) -> Matrix: ...
def mxm(
    A: _Operand,
    B: _Operand,
    semiring: object = "plus_times",
    *,
    mask: Optional[_Operand] = ...,
    structural: bool = ...,
    complement: bool = ...,
    replace: bool = ...,
    accum: Optional[object] = ...,
    out: Optional[_Operand] = ...,
    device: str = ...,
    keep: bool = ...,
) -> Union[sp.csr_matrix, sp.csr_array, Matrix]:
    """``C⟨mask⟩ = A ⊕.⊗ B`` over ``semiring``, GraphBLAS's ``mxm``; ``keep=True`` gives a
    ``Matrix`` left where it was computed."""

def mxv(
    A: _Operand,
    u: _Vector,
    semiring: object = "plus_times",
    *,
    mask: Optional[_Vector] = ...,
    structural: bool = ...,
    complement: bool = ...,
    replace: bool = ...,
    accum: Optional[object] = ...,
    out: Optional[_Vector] = ...,
    device: str = ...,
) -> Union[sp.csr_matrix, sp.csr_array]:
    """``w⟨mask⟩ = A ⊕.⊗ u``, GraphBLAS's ``mxv``: a sparse column."""

def vxm(
    u: _Vector,
    A: _Operand,
    semiring: object = "plus_times",
    *,
    mask: Optional[_Vector] = ...,
    structural: bool = ...,
    complement: bool = ...,
    replace: bool = ...,
    accum: Optional[object] = ...,
    out: Optional[_Vector] = ...,
    device: str = ...,
) -> Union[sp.csr_matrix, sp.csr_array]:
    """``wᵀ⟨maskᵀ⟩ = uᵀ ⊕.⊗ A``, GraphBLAS's ``vxm``: a sparse row."""
