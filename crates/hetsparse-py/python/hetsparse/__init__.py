"""Sparse matrix products on every device a machine has: CPU cores, CUDA GPUs, OpenCL devices.

scipy.sparse matrices and arrays go in, scipy.sparse results come out::

    import hetsparse, scipy.sparse as sp
    A = sp.random(1000, 1000, density=0.01, format="csr")
    C = hetsparse.spgemm(A, A)            # what A @ A gives, computed by hetsparse
    y = hetsparse.spmv(A, np.ones(1000))  # A @ x
    hetsparse.devices()                   # what this machine has

In a loop of products over one matrix, convert it once with ``hetsparse.Matrix`` (``spgemm``,
``spmv``, ``spmm``, ``mxm``, ``mxv`` and ``vxm`` take it wherever they take a scipy operand)::

    M = hetsparse.Matrix(A)               # checked and converted once, kept in hetsparse
    w = hetsparse.vxm(frontier, M, "any_secondi", mask=visited, complement=True)

``device`` is ``"auto"`` (every device found, each piece of hardware once), ``"all"`` (the
same, sharing every large enough product among them), ``"cpu"``, ``"cuda"`` / ``"cuda:N"``, or
``"opencl"`` / ``"opencl:NAME"`` / ``"opencl:P.D"``.

Products run with the GIL released; Ctrl-C cancels a running product and raises
``KeyboardInterrupt``, and ``spgemm(..., progress=f)`` calls ``f(done, planned)`` as it goes. Errors are exceptions: ``ValueError`` for shapes and malformed
operands, ``TypeError`` for dtypes, ``MemoryError`` when a product cannot fit even out of core,
``DeviceError`` (a ``RuntimeError``) for a missing or failing device.
"""

import atexit
import operator

import numpy as np
import scipy.sparse as _sp

from . import _hetsparse
from ._hetsparse import DeviceError

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

#: The dtypes hetsparse computes in.
DTYPES = (np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.complex64), np.dtype(np.complex128))

#: The semirings of ``mxm``, ``mxv`` and ``vxm``, as python-graphblas names them (``plus_one``
#: is accepted for ``plus_pair`` too).
SEMIRINGS = (
    "plus_times",
    "plus_pair",
    "any_pair",
    "min_plus",
    "max_plus",
    "min_first",
    "min_second",
    "plus_first",
    "plus_second",
    "any_secondi",
    "lor_land",
    "max_times",
    "max_min",
)

#: The monoids of ``Matrix.reduce_scalar``, as python-graphblas names them.
MONOIDS = ("plus", "times", "min", "max", "any", "lor", "land")

#: The backends this build includes (``cpu``, and ``opencl`` / ``cuda`` where built with them).
FEATURES = tuple(_hetsparse.FEATURES)

# The contexts live as long as the process; what their calls taught the device choice is
# written to the calibration file when the interpreter exits.
atexit.register(_hetsparse._save_calibrations)

_INDEX_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))


def _is_array_api(m):
    """Whether ``m`` is a sparse *array* (``csr_array``, ...) rather than a ``*_matrix``."""
    return isinstance(m, _sp.sparray) if hasattr(_sp, "sparray") else False


def _check_sparse(m, name):
    if not _sp.issparse(m):
        raise TypeError(
            f"{name} must be a scipy.sparse matrix or array, not {type(m).__name__}"
        )
    if len(m.shape) != 2:
        raise ValueError(f"{name} must be two-dimensional, it has shape {m.shape}")


def _compute_dtype(*dtypes):
    """The dtype a product of operands of ``dtypes`` is computed in, as scipy would give it."""
    dtype = np.result_type(*dtypes)
    if dtype in DTYPES:
        return dtype
    names = ", ".join(str(np.dtype(d)) for d in dtypes)
    raise TypeError(
        f"hetsparse computes in float32, float64, complex64 and complex128; the operands "
        f"have dtype {names}, which give {dtype} (convert them, e.g. with .astype(np.float64))"
    )


def _index(a):
    a = np.asarray(a)
    if a.dtype not in _INDEX_DTYPES:
        a = a.astype(np.int64)
    return _in_memory_order(a)


def _in_memory_order(a):
    """``a`` itself when it is contiguous and aligned (the native module reads it in place),
    else a copy that is."""
    # The flags first: np.require costs more than a small product's own work.
    flags = a.flags
    if flags.c_contiguous and flags.aligned:
        return a
    return np.require(a, requirements=["C", "A"])


def _parts(m, dtype):
    """``m``'s arrays as the native module takes them, copied only where dtypes differ."""
    fmt = m.format
    if fmt not in ("csr", "csc", "coo"):
        m = m.tocsr()
        fmt = "csr"
    data = m.data
    if data.dtype != dtype:
        data = data.astype(dtype)
    data = _in_memory_order(data)
    nrows, ncols = m.shape
    if fmt == "coo":
        major, minor = m.row, m.col
    else:
        major, minor = m.indptr, m.indices
    return (fmt, int(nrows), int(ncols), _index(major), _index(minor), data)


def _result_class(a):
    """The class scipy gives ``a @ b``: CSC when ``a`` is CSC, else CSR; an array when ``a``
    is a sparse array (or a ``Matrix`` made from one), a matrix when it is a sparse matrix."""
    csc = not isinstance(a, Matrix) and a.format == "csc"
    if _wants_array(a):
        return _sp.csc_array if csc else _sp.csr_array
    return _sp.csc_matrix if csc else _sp.csr_matrix


def _compressed(cls, nrows, ncols, indptr, indices, data):
    """A ``cls`` (CSR or CSC, matrix or array) over the native result's arrays, which are
    canonical: sorted indices of the dtype scipy would pick, no repeats, offsets from 0 to
    nnz."""
    if _RESULT_FIELDS.get(cls) == _FAST_FIELDS:
        # scipy's constructor checks and converts what is already right, at a cost of tens
        # of microseconds: more than small products take. Where a matrix made by it holds
        # exactly the attributes set here (checked once per class), they are set directly.
        m = cls.__new__(cls)
        m._shape = (nrows, ncols)
        m.maxprint = _MAXPRINT
        m.indptr = indptr
        m.indices = indices
        m.data = data
    else:
        m = cls((data, indices, indptr), shape=(nrows, ncols), copy=False)
    m.has_sorted_indices = True
    m.has_canonical_format = True
    return m


def _made_fields(cls):
    """The attributes a ``cls`` made by scipy's constructor holds, or ``None`` where it
    cannot be made that way."""
    try:
        m = cls(
            (np.ones(1), np.zeros(1, np.int32), np.array([0, 1], np.int32)), shape=(1, 1)
        )
        m.has_sorted_indices = True
        m.has_canonical_format = True
        return frozenset(vars(m))
    except Exception:  # a scipy this code does not know: the constructor is used
        return None


_FAST_FIELDS = frozenset(
    ("_shape", "maxprint", "indptr", "indices", "data", "_has_sorted_indices",
     "_has_canonical_format")
)
_RESULT_FIELDS = {
    cls: _made_fields(cls)
    for cls in (_sp.csr_matrix, _sp.csc_matrix, getattr(_sp, "csr_array", None),
                getattr(_sp, "csc_array", None))
    if cls is not None
}
_MAXPRINT = _sp.csr_matrix(
    (np.ones(1), np.zeros(1, np.int32), np.array([0, 1], np.int32)), shape=(1, 1)
).maxprint


def spgemm(A, B, device="auto", *, progress=None, memory_limit=None, keep=False):
    """``A @ B`` for sparse ``A`` and ``B``, as scipy returns it.

    ``A`` and ``B`` are scipy.sparse matrices or arrays (CSR, CSC or COO; other formats are
    converted to CSR first) of any index dtype, in float32, float64,
    complex64 or complex128 (mixed dtypes are promoted as scipy promotes them), or
    ``Matrix`` objects (checked and converted once; see ``Matrix``). The result is
    a ``csr_matrix`` / ``csr_array`` (``csc_*`` when ``A`` is CSC), of the kind scipy's ``A @ B``
    gives (a ``Matrix`` gives what the scipy operand it was made from gives as CSR), with
    sorted indices. Unlike scipy, entries whose value cancels to zero are kept
    (the structure of the result depends only on the structures of ``A`` and ``B``).

    CSR and CSC operands in canonical form (sorted indices without repeats, as scipy's own
    products give) are read in place, without a copy, once checked: their values where the
    dtype is the one computed in, ``int32`` indices and ``int64`` offsets (``int64`` indices
    and ``int32`` offsets are converted). Other operands are copied into hetsparse's own arrays
    (indices converted and checked, lines sorted and repeats summed). The result's arrays are
    handed to NumPy without a copy. The GIL is released while checking and computing; writing
    an operand's arrays from another Python thread during the call is not supported (as with
    scipy's products).

    ``progress``, when given, is called as ``progress(done, planned)`` on the calling thread,
    about every 50 ms while the product runs and once at its end (with ``done == planned``):
    the intermediate products (``A[i, k] * B[k, j]``) computed so far, of those the product
    has. ``done`` never decreases; ``planned`` is known once the device has analysed the
    product and may grow where a product is split over devices. An exception it raises
    cancels the product and is raised by ``spgemm``.

    ``memory_limit`` is the host memory, in bytes, the result may take (by default, what the
    system reports available, checked for large products only). A product whose result
    cannot fit in it, from the structures of ``A`` and ``B`` alone, raises ``MemoryError``
    before it starts; on CPU devices, one whose result might not fit is computed in row chunks
    held to it.

    ``keep=True`` returns the product as a ``Matrix`` (CSR) kept where it was computed: on a
    device with memory of its own (``"cuda"``, ``"opencl"``, or ``"auto"`` with an operand kept
    on one), C stays in that memory without a copy to the host, and the next product on that
    device reads it there (a chain such as an AMG level's ``R @ (A @ P)``); see ``Matrix``.
    ``memory_limit`` then bounds nothing (C is not in host memory).

    Raises ``ValueError`` when the shapes do not match, an operand's arrays are malformed or
    ``memory_limit`` is negative, ``TypeError`` for another dtype or a ``progress`` that is
    not callable, ``MemoryError`` when the product cannot fit, ``KeyboardInterrupt`` when
    Ctrl-C cancels it, ``hetsparse.DeviceError`` when a device cannot hold a kept result.
    """
    _check_operand(A, "A")
    _check_operand(B, "B")
    if A.shape[1] != B.shape[0]:
        raise ValueError(f"dimension mismatch: A is {A.shape}, B is {B.shape}")
    if progress is not None and not callable(progress):
        raise TypeError(f"progress: expected a callable taking (done, planned), got {progress!r}")
    if memory_limit is not None:
        memory_limit = operator.index(memory_limit)
        if memory_limit < 0:
            raise ValueError(f"memory_limit: expected bytes (0 or more), got {memory_limit}")
    dtype = _compute_dtype(A.dtype, B.dtype)
    cls = _result_class(A)
    csc = cls in (_sp.csc_matrix, _sp.csc_array)
    # A CSC A is multiplied as Cᵀ = Bᵀ · Aᵀ, whose CSR arrays are C's in CSC; not with a
    # Matrix B, which is held in CSR only, nor for a kept result (a Matrix is CSR): C is then
    # computed in CSR (and converted, when returned to scipy).
    transpose = csc and not isinstance(B, Matrix) and not keep
    a = _operand(A, dtype)
    same = B is A
    b = a if same else _operand(B, dtype)
    if keep:
        return Matrix._made(
            _hetsparse.spgemm(a, b, device, False, same, progress, memory_limit, True),
            _wants_array(A),
        )
    nrows, ncols, indptr, indices, data = _hetsparse.spgemm(
        a, b, device, transpose, same, progress, memory_limit
    )
    if transpose:
        # The native product is C's transpose in CSR: the same arrays are C in CSC.
        return _compressed(cls, ncols, nrows, indptr, indices, data)
    if csc:
        c = _compressed(_sp.csr_array if _wants_array(A) else _sp.csr_matrix,
                        nrows, ncols, indptr, indices, data).tocsc()
        c.sort_indices()
        return c
    return _compressed(cls, nrows, ncols, indptr, indices, data)


def spmm(A, X, device="auto"):
    """``A @ X`` for sparse ``A`` and a two-dimensional NumPy array ``X``: a NumPy array.

    ``X`` in C or Fortran order keeps its order in the result; promoted to the common dtype
    like ``A``. ``A`` is a scipy.sparse matrix or array, or a ``Matrix``.
    """
    _check_operand(A, "A")
    X = np.asarray(X)
    if X.ndim != 2:
        raise ValueError(f"X must be two-dimensional, it has shape {X.shape}")
    if A.shape[1] != X.shape[0]:
        raise ValueError(f"dimension mismatch: A is {A.shape}, X is {X.shape}")
    dtype = _compute_dtype(A.dtype, X.dtype)
    if X.dtype != dtype:
        X = X.astype(dtype)
    if not (X.flags.c_contiguous or X.flags.f_contiguous) or not X.flags.aligned:
        X = np.ascontiguousarray(X)
    data, row_major = _hetsparse.spmm(_operand(A, dtype), X, device)
    m, k = A.shape[0], X.shape[1]
    if row_major:
        return data.reshape((m, k))
    return data.reshape((k, m)).T


def spmv(A, x, device="auto"):
    """``A @ x`` for sparse ``A`` and a one-dimensional NumPy array ``x``: a NumPy array.

    ``x`` is read in place when it is contiguous and of the computed dtype. ``A`` is a
    scipy.sparse matrix or array, or a ``Matrix``.
    """
    _check_operand(A, "A")
    x = np.asarray(x)
    if x.ndim != 1:
        raise ValueError(f"x must be one-dimensional, it has shape {x.shape}")
    if A.shape[1] != x.shape[0]:
        raise ValueError(f"dimension mismatch: A is {A.shape}, x has length {x.shape[0]}")
    dtype = _compute_dtype(A.dtype, x.dtype)
    if x.dtype != dtype:
        x = x.astype(dtype)
    x = _in_memory_order(x)
    return _hetsparse.spmv(_operand(A, dtype), x, device)


#: The dtypes of the semiring products besides ``DTYPES``: GraphBLAS's bool and integers.
EXACT_DTYPES = (
    np.dtype(np.bool_),
    np.dtype(np.int32),
    np.dtype(np.int64),
    np.dtype(np.uint32),
    np.dtype(np.uint64),
)


def _semiring_dtype(*dtypes):
    """The dtype a semiring product computes in: as NumPy promotes the operands, with the
    narrow integers widened to 32 bits (``int8``, ``int16`` to ``int32``; ``uint8``,
    ``uint16`` to ``uint32``)."""
    dtype = np.result_type(*dtypes)
    if dtype.kind in "iu" and dtype.itemsize < 4:
        dtype = np.dtype(np.int32 if dtype.kind == "i" else np.uint32)
    if dtype in EXACT_DTYPES:
        return dtype
    return _compute_dtype(dtype)


def _semiring_name(semiring):
    """A semiring's name: a string, or a python-graphblas ``Semiring`` (its ``name``)."""
    name = getattr(semiring, "name", semiring)
    if not isinstance(name, str):
        raise TypeError(f"semiring: expected a name such as 'min_plus', got {semiring!r}")
    return name


def _accum_name(accum):
    """An accumulator's name (``plus``, ``times``, ``min``, ``max``, ``second``), or a
    python-graphblas ``BinaryOp`` (its ``name``); ``None`` for none."""
    if accum is None:
        return None
    name = getattr(accum, "name", accum)
    if not isinstance(name, str):
        raise TypeError(f"accum: expected a name such as 'plus', got {accum!r}")
    return name


class Matrix:
    """A sparse matrix checked and converted once, kept in hetsparse's memory, for loops of
    products (``spgemm``, ``spmv``, ``spmm``, ``mxm``, ``mxv``, ``vxm``) over one matrix.

    Each call of those products on a scipy.sparse operand checks its arrays (sorted indices,
    bounds) and converts what it cannot read in place; a ``Matrix`` was checked and converted
    when it was made, and the products read it by reference::

        M = hetsparse.Matrix(A)            # A: any scipy.sparse matrix or array
        for _ in range(levels):
            q = hetsparse.vxm(q, M, "any_secondi", mask=parents, complement=True, replace=True)

    ``A`` is any scipy.sparse matrix or array the products take (CSR, CSC, COO or another
    format, int32 or int64 indices; unsorted indices are sorted and repeats summed, as the
    products do with them). The values are stored in ``dtype`` (by default ``A``'s, with
    ``int8`` and ``int16`` widened to ``int32`` and ``uint8``, ``uint16`` to ``uint32`` as the
    products widen them), one of the dtypes the semiring products compute in: float32,
    float64, complex64, complex128, bool, int32, int64, uint32, uint64. Explicit zeros are kept.
    The matrix is a copy: writing ``A`` afterwards does not change it, and it cannot be written.

    ``spgemm`` takes a ``Matrix`` as ``A`` and ``B``, ``spmv`` and ``spmm`` as ``A`` (in the
    dtypes those compute in: float32, float64, complex64, complex128); ``mxm`` as ``A``, ``B``,
    ``mask`` and ``out``; ``mxv`` and ``vxm`` as ``A`` (and, converted on each call, as a
    vector of shape ``1 × n`` or ``n × 1``). A product
    computes in the dtype its operands promote to (as with scipy operands); a ``Matrix`` of
    another dtype is converted for that call (make it in the product's dtype to avoid that).
    As a mask it is used in its own dtype: ``structural=False`` admits its non-zero values.
    Results are scipy.sparse, as with scipy operands: an array when the ``Matrix`` was made
    from a sparse array, else a matrix.

    With ``device`` (a name as the products' ``device=`` takes it: ``"cuda"``, ``"cuda:1"``,
    ``"opencl"``, ...), the matrix is also copied into that device's memory when it is made,
    and ``mxm``, ``spgemm``, ``spmv`` and ``spmm`` on that device read it there instead of
    copying it over on every call — as a GPU graph library keeps its graphs::

        L = hetsparse.Matrix(lower, device="cuda")      # copied to the GPU once
        for _ in range(runs):
            c = hetsparse.mxm(L, L, "plus_pair", mask=L) # computed where L lies

    One of those products whose ``device`` is ``"auto"`` (the default) runs on the device of
    its first operand that has a copy (``A``, then ``B``); other operands are copied for that
    call. Used as a mask on that device, a ``Matrix`` is copied there on its first use and
    kept. ``mxv`` and ``vxm`` read the host copy. A
    device that computes in host memory (``"cpu"``, ``"auto"``) needs no copy and gets none.
    The copy holds device memory until the ``Matrix`` is deleted; results come back to host
    memory as scipy.sparse. A pickled ``Matrix`` is made again in host memory alone.

    ``mxm(..., keep=True)`` and ``spgemm(..., keep=True)`` return their product as a
    ``Matrix`` left where it was computed: on a device with memory of its own, without a copy
    in host memory until something reads one (``to_scipy``, ``mxv``/``vxm``, a product on
    another device, a mask, pickling), which then copies it over once. ``reduce_scalar``
    reads only its values. LAGraph's triangle count, with nothing but the count coming
    back::

        L = hetsparse.Matrix(lower, device="cuda")
        C = hetsparse.mxm(L, L, "plus_pair", mask=L, keep=True)   # stays on the GPU
        triangles = C.reduce_scalar("plus")

    Raises ``TypeError`` when ``A`` is not a scipy.sparse matrix or array or the dtype is not
    one of those above, ``ValueError`` for malformed arrays or an unknown device name, and
    ``hetsparse.DeviceError`` when the device is absent or its memory cannot hold the copy.
    """

    __slots__ = ("_native", "_array")

    def __init__(self, A, dtype=None, device=None):
        if hasattr(self, "_native"):
            raise AttributeError("a hetsparse.Matrix cannot be changed once made")
        if isinstance(A, Matrix):
            A = A.to_scipy()
        _check_sparse(A, "A")
        if dtype is None:
            dtype = _semiring_dtype(A.dtype)
        else:
            dtype = np.dtype(dtype)
            if dtype not in DTYPES and dtype not in EXACT_DTYPES:
                names = ", ".join(str(d) for d in DTYPES + EXACT_DTYPES)
                raise TypeError(f"dtype: {dtype} is not one hetsparse stores ({names})")
        if device is not None and not isinstance(device, str):
            raise TypeError(f"device: expected a device name or None, not {type(device).__name__}")
        self._native = _hetsparse.StoredMatrix(_parts(A, dtype), device)
        self._array = _is_array_api(A)

    @property
    def shape(self):
        """``(rows, columns)``."""
        return tuple(self._native.shape)

    @property
    def nnz(self):
        """Stored entries (explicit zeros included)."""
        return self._native.nnz

    @property
    def dtype(self):
        """The values' NumPy dtype."""
        return np.dtype(self._native.dtype)

    @property
    def device(self):
        """The device whose memory holds a copy (``"cuda:0"``, ``"opencl:NAME"``), or ``None``
        where the matrix is in host memory alone."""
        return self._native.device

    @property
    def ndim(self):
        """2."""
        return 2

    @classmethod
    def _made(cls, native, array):
        """A ``Matrix`` around a native stored matrix a product made (``keep=True``)."""
        m = object.__new__(cls)
        m._native = native
        m._array = array
        return m

    def reduce_scalar(self, monoid="plus", *, allow_empty=True):
        """The stored values combined by ``monoid`` (``MONOIDS``, python-graphblas's names,
        or a python-graphblas ``Monoid``), as python-graphblas's
        ``A.reduce_scalar(monoid).new().value``: a NumPy scalar of the matrix's dtype
        (``bool`` for ``lor`` and ``land``, which read values as ``value != 0``). Integer
        sums and products wrap on overflow; over ``bool`` ``plus`` is ``lor`` and ``times``
        is ``land``. A matrix with no stored entry gives ``None``, or with
        ``allow_empty=False`` the monoid's identity (``any`` has none: ``ValueError``).

        A matrix kept on a device without a host copy (a ``keep=True`` result) has only its
        values copied over, not its structure.

        Raises ``ValueError`` for an unknown monoid, ``TypeError`` for ``min`` and ``max`` of
        complex values.
        """
        name = getattr(monoid, "name", monoid)
        if not isinstance(name, str) or name not in MONOIDS:
            raise ValueError(f"monoid: {monoid!r} is not one of {', '.join(MONOIDS)}")
        dtype = self.dtype
        if dtype == np.bool_ and name in ("plus", "times"):
            name = "lor" if name == "plus" else "land"
        if dtype.kind == "c" and name in ("min", "max"):
            raise TypeError(f"monoid: {name} is not defined over {dtype}")
        values = self._native.values()
        if values.size == 0:
            if allow_empty:
                return None
            return _identity(name, dtype)
        if name == "plus":
            return values.sum(dtype=dtype)
        if name == "times":
            return values.prod(dtype=dtype)
        if name == "min":
            return values.min()
        if name == "max":
            return values.max()
        if name == "any":
            return values[0]
        if name == "lor":
            return np.bool_(values.any())
        return np.bool_(values.all())

    def to_scipy(self):
        """A copy as scipy CSR with sorted indices, as the products return theirs: a
        ``csr_array`` when the matrix was made from a sparse array, else a ``csr_matrix``."""
        cls = _sp.csr_array if self._array else _sp.csr_matrix
        return _compressed(cls, *self._native.to_csr())

    def __reduce__(self):
        # Pickled as its contents, made again when unpickled.
        return (Matrix, (self.to_scipy(),))

    def __repr__(self):
        rows, cols = self.shape
        where = f" on {self.device}" if self.device is not None else ""
        return (
            f"<hetsparse.Matrix {rows}×{cols}, {self.nnz} stored entries of dtype {self.dtype}"
            f"{where}>"
        )


def _identity(monoid, dtype):
    """``monoid``'s identity in ``dtype`` (an empty reduction's value)."""
    if monoid in ("lor", "land"):
        return np.bool_(monoid == "land")
    if monoid == "any":
        raise ValueError("monoid: any has no identity (reduce an empty matrix with allow_empty)")
    if monoid in ("plus", "times"):
        return dtype.type(0 if monoid == "plus" else 1)
    if dtype.kind == "f":
        return dtype.type(np.inf if monoid == "min" else -np.inf)
    if dtype.kind == "b":
        return np.bool_(monoid == "min")
    info = np.iinfo(dtype)
    return dtype.type(info.max if monoid == "min" else info.min)


def _check_operand(m, name):
    """``TypeError`` unless ``m`` is a two-dimensional sparse operand: a scipy.sparse matrix or
    array, or a ``Matrix``."""
    if not isinstance(m, Matrix):
        _check_sparse(m, name)


def _operand(m, dtype):
    """What the native products take for an operand of ``dtype``: a ``Matrix``'s stored matrix
    when it is of ``dtype`` (converted for this call when not), else ``m``'s parts."""
    if isinstance(m, Matrix):
        if m.dtype == dtype:
            return m._native
        m = m.to_scipy()
    return _parts(m, dtype)


def _wants_array(a):
    """Whether products of ``a`` are sparse arrays rather than matrices."""
    return a._array if isinstance(a, Matrix) else _is_array_api(a)


def _matching(m, shape, dtype, name):
    """What the native products take for an optional matrix ``m`` (mask or existing result)
    of ``shape``."""
    if m is None:
        return None
    _check_operand(m, name)
    if m.shape != shape:
        raise ValueError(f"{name} has shape {m.shape}, the result {shape}")
    return _operand(m, dtype)


def _mask(m, shape, dtype):
    """``mxm``'s mask: a ``Matrix`` is used as it is, in its own dtype."""
    if isinstance(m, Matrix):
        if m.shape != shape:
            raise ValueError(f"mask has shape {m.shape}, the result {shape}")
        return m._native
    return _matching(m, shape, dtype, "mask")


def mxm(
    A,
    B,
    semiring="plus_times",
    *,
    mask=None,
    structural=True,
    complement=False,
    replace=False,
    accum=None,
    out=None,
    device="auto",
    keep=False,
):
    """``C⟨mask⟩ = A ⊕.⊗ B`` over ``semiring``, GraphBLAS's ``mxm``: scipy.sparse in and out.

    ``semiring`` is a python-graphblas name (``SEMIRINGS``: ``"min_plus"``, ``"plus_pair"``,
    ``"any_secondi"``, ...) or a python-graphblas ``Semiring``. The result holds an entry
    wherever a product lands (also where its value is the semiring's zero), like
    python-graphblas's and unlike scipy's ``A @ B``, which drops zeros.

    ``mask`` (a sparse matrix of C's shape) limits which entries are computed: its stored
    entries (``structural=True``) or its non-zero ones (``structural=False``; -0.0 is zero, as
    the GraphBLAS C API's cast to bool has it, where SuiteSparse:GraphBLAS admits it), or with
    ``complement=True`` every other position. ``out`` is an existing C the product is merged
    into: through ``accum`` (``"plus"``, ``"times"``, ``"min"``, ``"max"``, ``"second"``)
    where both hold an entry, and on the positions the mask refuses ``out``'s entries are kept,
    or removed with ``replace=True`` (python-graphblas's ``C(mask, accum, replace) <<
    A.mxm(B, semiring)``).

    The product is computed in the operands' dtype (promoted as NumPy does; ``int8`` and
    ``int16`` widen to ``int32``, the unsigned ones to ``uint32``), with GraphBLAS's meaning:
    integer sums and products wrap on overflow, ``min`` and ``max`` start from the type's
    bounds, and over ``bool`` ``+`` is ``or`` and ``×`` is ``and`` (``plus_times`` is
    ``lor_land``, ``plus_pair`` gives ``True``: count in an integer dtype, e.g.
    ``A.astype(np.int64)``). The result is CSR (an array when ``A`` is a sparse array). Raises ``ValueError`` for unknown names and shapes that do not match,
    ``TypeError`` for a semiring not defined over the dtype (only the ``plus_*`` and
    ``any_pair`` ones are over complex values) or a device that does not run it.

    ``A``, ``B``, ``mask`` and ``out`` may be ``Matrix`` objects, checked and converted once
    (see ``Matrix``), where a loop would convert a scipy operand on every call.

    ``keep=True`` returns C as a ``Matrix`` kept where it was computed: on a device with
    memory of its own, C stays there (no copy to the host; with ``out``, the merged result is
    copied there), for the next product or ``Matrix.reduce_scalar``; see ``Matrix``.
    """
    _check_operand(A, "A")
    _check_operand(B, "B")
    if A.shape[1] != B.shape[0]:
        raise ValueError(f"dimension mismatch: A is {A.shape}, B is {B.shape}")
    semiring, accum = _semiring_name(semiring), _accum_name(accum)
    dtype = _semiring_dtype(A.dtype, B.dtype)
    shape = (A.shape[0], B.shape[1])
    m = _mask(mask, shape, dtype)
    c = _matching(out, shape, dtype, "out")
    result = _hetsparse.mxm(
        _operand(A, dtype),
        _operand(B, dtype),
        m,
        c,
        semiring,
        bool(structural),
        bool(complement),
        bool(replace),
        accum,
        device,
        bool(keep),
    )
    if keep:
        return Matrix._made(result, _wants_array(A))
    nrows, ncols, indptr, indices, data = result
    cls = _sp.csr_array if _wants_array(A) else _sp.csr_matrix
    return _compressed(cls, nrows, ncols, indptr, indices, data)


def _as_row(v, length, dtype, name):
    """A vector as the parts of a ``1 × length`` CSR matrix: a one-dimensional NumPy array
    (every position stored), or a sparse ``1 × length`` or ``length × 1`` matrix or a
    one-dimensional sparse array."""
    if v is None:
        return None
    if isinstance(v, Matrix):
        v = v.to_scipy()
    if _sp.issparse(v):
        if len(v.shape) == 1:
            v = v.reshape((1, v.shape[0]))
        elif v.shape[0] != 1 and v.shape[1] == 1:
            v = v.T
        if v.shape != (1, length):
            raise ValueError(f"{name} has shape {v.shape}, expected a vector of {length}")
        return _parts(_sp.csr_matrix(v), dtype)
    dense = np.asarray(v)
    if dense.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional or sparse, it has shape {dense.shape}")
    if dense.shape[0] != length:
        raise ValueError(f"{name} has length {dense.shape[0]}, expected {length}")
    row = _sp.csr_matrix(
        (dense.astype(dtype), np.arange(length, dtype=np.int64), np.array([0, length], dtype=np.int64)),
        shape=(1, length),
    )
    return _parts(row, dtype)


def _readable_booleans(mask, length, structural):
    """Whether a dense mask is a valued one of contiguous NumPy booleans of the right length:
    such a mask is read in place, a byte a position, with nothing packed or copied, so a loop
    masking with a growing set (BFS's visited vertices) pays for the positions a product
    looks up, not for the mask's length."""
    return (
        not structural
        and isinstance(mask, np.ndarray)
        and mask.dtype == np.bool_
        and mask.ndim == 1
        and mask.shape[0] == length
        and mask.flags.c_contiguous
    )


def _packed_mask(mask, length, structural):
    """A dense mask (a one-dimensional NumPy array, every position stored) as the bits of
    the positions it admits, 64 a word: each position where structural, the non-zero ones
    where valued. Packed, it crosses over without being listed, so a loop that masks with a
    growing set (BFS's visited vertices) pays for the bitmap's length, not for a list."""
    dense = np.asarray(mask)
    if dense.ndim != 1:
        raise ValueError(f"mask must be one-dimensional or sparse, it has shape {dense.shape}")
    if dense.shape[0] != length:
        raise ValueError(f"mask has length {dense.shape[0]}, expected {length}")
    if structural:
        admitted = np.ones(length, dtype=bool)
    elif dense.dtype == np.bool_:
        admitted = dense
    else:
        admitted = dense != 0
    packed = np.packbits(admitted, bitorder="little")
    # Whole words: a length of a multiple of 64 packs into them as it is, others gain the
    # zero bytes of the last word (one copy, only then).
    tail = (length + 63) // 64 * 8 - packed.shape[0]
    words = np.concatenate((packed, np.zeros(tail, dtype=np.uint8))) if tail else packed
    # Bit j of the little-endian bytes is position j: the words' bit order on every machine.
    return words.view("<u8").astype(np.uint64, copy=False)


def _vector_product(kind, A, u, semiring, mask, structural, complement, replace, accum, out, device):
    _check_operand(A, "A")
    u_len, w_len = (A.shape[1], A.shape[0]) if kind == "mxv" else A.shape
    semiring, accum = _semiring_name(semiring), _accum_name(accum)
    u_dtype = u.dtype if _sp.issparse(u) or isinstance(u, Matrix) else np.asarray(u).dtype
    dtype = _semiring_dtype(A.dtype, u_dtype)
    mask_bits = mask_bytes = None
    if mask is not None and not (_sp.issparse(mask) or isinstance(mask, Matrix)):
        if _readable_booleans(mask, w_len, structural):
            mask_bytes, mask = mask, None
        else:
            mask_bits, mask = _packed_mask(mask, w_len, structural), None
    nrows, ncols, indptr, indices, data = _hetsparse.vector_product(
        kind,
        _operand(A, dtype),
        _as_row(u, u_len, dtype, "u"),
        _as_row(mask, w_len, dtype, "mask"),
        _as_row(out, w_len, dtype, "out"),
        semiring,
        bool(structural),
        bool(complement),
        bool(replace),
        accum,
        device,
        mask_bits,
        mask_bytes,
    )
    cls = _sp.csr_array if _wants_array(A) else _sp.csr_matrix
    row = _compressed(cls, nrows, ncols, indptr, indices, data)
    # mxv's w is a column, vxm's a row, as the products' shapes say.
    return row.T.tocsr() if kind == "mxv" else row


def mxv(
    A,
    u,
    semiring="plus_times",
    *,
    mask=None,
    structural=True,
    complement=False,
    replace=False,
    accum=None,
    out=None,
    device="auto",
):
    """``w⟨mask⟩ = A ⊕.⊗ u``, GraphBLAS's ``mxv``: ``w[i] = ⊕ₖ A[i, k] ⊗ u[k]``.

    ``u`` (and ``mask``, ``out``) are vectors: a one-dimensional NumPy array (every position
    stored) or a sparse ``1 × n`` or ``n × 1`` matrix or array (a sparse frontier). A NumPy
    ``mask`` is a full vector: structurally it admits every position, so mask by its values
    with ``structural=False`` (a boolean array of the vertices visited, say); it crosses
    packed, a bit a position, however many it admits. ``w`` is a
    sparse ``A.shape[0] × 1`` CSR column holding an entry wherever a product lands. The
    semiring, the mask's modes, ``accum``, ``out`` and ``replace`` are as for ``mxm``. ``A``
    may be a ``Matrix``, converted once for a loop of calls; one made with ``device=`` (or a
    product kept there) is read in that device's memory, so a graph searched level after
    level on a GPU crosses once.
    """
    return _vector_product("mxv", A, u, semiring, mask, structural, complement, replace, accum, out, device)


def vxm(
    u,
    A,
    semiring="plus_times",
    *,
    mask=None,
    structural=True,
    complement=False,
    replace=False,
    accum=None,
    out=None,
    device="auto",
):
    """``wᵀ⟨maskᵀ⟩ = uᵀ ⊕.⊗ A``, GraphBLAS's ``vxm``: ``w[j] = ⊕ₖ u[k] ⊗ A[k, j]``, the
    frontier ``u`` pushed along A's edges (``any_secondi`` gives each vertex reached a parent
    ``k``). ``w`` is a sparse ``1 × A.shape[1]`` CSR row; the rest is as for ``mxv``.
    """
    return _vector_product("vxm", A, u, semiring, mask, structural, complement, replace, accum, out, device)


def devices(device="auto"):
    """Every device ``device`` reaches, as dicts with ``id``, ``name``, ``backend``, ``kind``,
    ``compute_units``, ``memory_bytes``, ``dtypes``, ``used`` and ``reason`` (why a device is
    not used, else ``None``). Backends built in that found no device are listed, unused, with
    the reason."""
    return list(_hetsparse.devices(device))


def generate(matrix_class, size, seed=2026, dtype=np.float64, array=False):
    """The operands ``(A, B)`` hetsparse's benchmarks multiply for ``matrix_class`` (one of
    ``stencil3d``, ``banded``, ``powerlaw``, ``uniform``, ``road``, ``skewed``, ``lp``,
    ``dense``) of about ``size`` rows: ``B`` is ``A`` for the square classes, ``A.T`` for
    ``lp``. ``csr_matrix`` (``csr_array`` with ``array=True``) of ``dtype``."""
    cls = _sp.csr_array if array else _sp.csr_matrix
    dtype = np.dtype(dtype)
    out = []
    for nrows, ncols, indptr, indices, data in _hetsparse.generate(matrix_class, size, seed):
        if data.dtype != dtype:
            data = data.astype(dtype)
        out.append(_compressed(cls, nrows, ncols, indptr, indices, data))
    return tuple(out)
