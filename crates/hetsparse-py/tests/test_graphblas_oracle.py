"""mxm, mxv and vxm against python-graphblas (SuiteSparse:GraphBLAS), an implementation of
GraphBLAS independent of hetsparse: every semiring × dtype × mask mode × accumulator, 50 random
cases each, on every device under test. The dtypes are float32, float64, complex64 and
complex128 (the semirings and accumulators defined over complex values) and the exact ones,
bool, int32, int64, uint32 and uint64, which python-graphblas computes in the same type.

The 50 cases of a combination are the diagonal blocks of one problem: A, B, the mask and the
existing C are block diagonal (for a vector, the cases' vectors lie one after another), so no
product reaches from one case into another and one call computes all 50 independently, each
with its own shape (rows, columns or inner dimension of size 0 included), density, empty rows
and columns and explicit zeros. Every value compares exactly (``==``):

- floats are multiples of 1/2 of magnitude at most 4: every product, sum and accumulation of
  these cases is exact in float32 as in float64, whatever the order of summation;
- integers are small (negative ones too where signed), but in a random part of the cases some
  or all lie near the type's bounds (MAX − j, MIN + j, 2^(n−1) + j unsigned), at ±2^(n/2) + j
  or anywhere in the type's range, so that sums and products wrap: integer arithmetic is
  modular, whatever the order, so these compare exactly too. SuiteSparse wraps (its signed
  overflow, undefined in C, wraps in practice: checked here against hetsparse's
  ``Wrapping``), and ``min``/``max`` start from the type's bounds;
- bool values are true or false (a stored false is an explicit zero). Over BOOL GraphBLAS
  renames the operators (plus and max are lor, times and min land: ``plus_times`` is
  ``lor_land``, ``min_plus`` ``land_lor``, ...), python-graphblas has BOOL semirings for
  only a few of hetsparse's names, so the expected values come from GraphBLAS's semiring of
  the renamed operators (``BOOL_SEMIRINGS``; ``test_bool_renaming_agrees_with_graphblas``
  checks it against the names python-graphblas does type over BOOL). ``any_secondi`` is not
  defined over bool: refused with ``TypeError`` (``test_bool_any_secondi_is_refused``).

A valued mask admits where its value is non-zero (true). ``any_secondi`` may keep any of the
products landing on an entry: a value other than python-graphblas's must be another inner index
``k`` with both factors stored (through the accumulator where C holds an entry). A failure
names the combination (the test's id), the seed of its generator (the CRC-32 of that id), the
device and the case.

On a device that does not run sparse-vector products (none today), mxv and vxm must be
refused with ``TypeError``; on a device that does not run an exact dtype (none of CPU, OpenCL
and CUDA today), so must mxm over it.

Skipped where python-graphblas is not installed; with ``HETSPARSE_REQUIRE_GRAPHBLAS=1`` (CI) its
absence fails the run instead.
"""

import os
import zlib

import numpy as np
import pytest
import scipy.sparse as sp

import hetsparse
from conftest import DEVICES

if os.environ.get("HETSPARSE_REQUIRE_GRAPHBLAS") == "1":
    import graphblas as gb
else:
    gb = pytest.importorskip("graphblas")

CASES = 50
MAX_DIM = 30
DENSITIES = (0.0, 0.03, 0.1, 0.3, 0.6, 1.0)

# The semirings hetsparse defines over complex values (the others need an order).
COMPLEX_SEMIRINGS = ("plus_times", "plus_pair", "plus_first", "plus_second", "any_pair")
# GraphBLAS's bool and integer types, whose values are exact at any magnitude.
EXACT_DTYPES = ("bool", "int32", "int64", "uint32", "uint64")
ACCUMULATORS = (None, "plus", "times", "min", "max", "second")
# The devices that run sparse-vector products (mxv, vxm): all of them (the CPU backend, which
# "auto" and "all" give them to, CUDA and OpenCL).
VECTOR_PRODUCT_DEVICES = ("cpu", "auto", "all", "cuda", "opencl")
# The exact dtypes each device runs (any product): the CPU backend (which "auto" and "all" give
# them to), OpenCL (bool as a byte 0 or 1 in its kernels) and CUDA (its semiring kernels) all of
# them.
EXACT_DTYPE_DEVICES = {
    "cpu": EXACT_DTYPES,
    "auto": EXACT_DTYPES,
    "all": EXACT_DTYPES,
    "opencl": EXACT_DTYPES,
    "cuda": EXACT_DTYPES,
}
# How the others refuse an exact dtype's mxm.
EXACT_REFUSAL = r"does not support SpGEMM \(\w+\) for (bool|i32|i64|u32|u64)$"

# Over BOOL, GraphBLAS renames the operators of a semiring (the C API and SuiteSparse's "Boolean
# rename" rules): plus and max are lor, times and min are land; first, second, pair, any, lor and
# land stay. hetsparse's semiring of each name over bool is GraphBLAS's semiring so renamed.
# python-graphblas gives the same for the names it types over BOOL itself (min_first →
# land_first, min_second → land_second, any_pair, lor_land; checked below); for the others it
# has none (plus_times, min_plus, max_plus, max_times, max_min, plus_first, plus_second: KeyError)
# or, for plus_pair, one of its own that counts in INT64 (cast to a BOOL C: true wherever a
# product lands, which is lor_pair too). any_secondi is not defined over bool (an index is no
# bool): hetsparse raises TypeError.
BOOL_SEMIRINGS = {
    "plus_times": "lor_land",
    "plus_pair": "lor_pair",
    "any_pair": "any_pair",
    "min_plus": "land_lor",
    "max_plus": "lor_lor",
    "min_first": "land_first",
    "min_second": "land_second",
    "plus_first": "lor_first",
    "plus_second": "lor_second",
    "lor_land": "lor_land",
    "max_times": "lor_land",
    "max_min": "lor_land",
}
# Per case, the fraction of an integer block's values drawn near the type's bounds or over its
# whole range (the rest are small), so that some cases' sums and products wrap and others not.
LARGE_FRACTIONS = (0.0, 0.0, 0.1, 0.3, 1.0)
# (structural, complement, replace), or None for no mask.
MASK_MODES = (None,) + tuple(
    (structural, complement, replace)
    for structural in (True, False)
    for complement in (False, True)
    for replace in (False, True)
)


def _mask_id(mode):
    if mode is None:
        return "no_mask"
    structural, complement, replace = mode
    return (
        ("structural" if structural else "valued")
        + ("_complement" if complement else "")
        + ("_replace" if replace else "")
    )


def _combinations():
    for op in ("mxm", "mxv", "vxm"):
        for semiring in hetsparse.SEMIRINGS:
            for dtype in ("float32", "float64", "complex64", "complex128") + EXACT_DTYPES:
                complex_ = dtype.startswith("complex")
                if complex_ and semiring not in COMPLEX_SEMIRINGS:
                    continue
                if dtype == "bool" and semiring not in BOOL_SEMIRINGS:
                    # any_secondi: refused (test_bool_any_secondi_is_refused).
                    continue
                for mask_mode in MASK_MODES:
                    for accum in ACCUMULATORS:
                        # min and max need an order, which complex values lack.
                        if complex_ and accum in ("min", "max"):
                            continue
                        key = f"{op}-{semiring}-{dtype}-{_mask_id(mask_mode)}-{accum or 'no_accum'}"
                        yield pytest.param(op, semiring, np.dtype(dtype), mask_mode, accum, id=key)


def graphblas_semiring(name, dtype):
    """python-graphblas's semiring of hetsparse's name over operands of ``dtype``
    (``any_secondi`` is SuiteSparse's own, under ``semiring.ss``; over bool, BOOL_SEMIRINGS'
    renaming)."""
    if name == "any_secondi":
        return gb.semiring.ss.any_secondi
    if dtype == np.bool_:
        return getattr(gb.semiring, BOOL_SEMIRINGS[name])
    return getattr(gb.semiring, name)


def exact_values(rng, count, dtype, large):
    """Bool: true with probability 0.6 (a stored false is an explicit zero). Integers: small
    ones (in [-4, 4], [0, 8] unsigned), a fifth of them explicit zeros, but where ``large``
    (a fraction per value) says, one of MAX − j, MIN + j (2^(n−1) + j unsigned), ±(2^(n/2) + j)
    (j < 4) or any value of the type: sums and products of these wrap."""
    if dtype == np.bool_:
        return rng.random(count) < 0.6
    info = np.iinfo(dtype)
    signed = info.min < 0
    v = rng.integers(-4 if signed else 0, 5 if signed else 9, count).astype(dtype)
    v[rng.random(count) < 0.2] = 0
    big = np.nonzero(rng.random(count) < large)[0]
    n = len(big)
    j = rng.integers(0, 4, n).astype(dtype)
    low = info.min if signed else 2 ** (info.bits - 1)
    half = np.full(n, 2 ** (info.bits // 2), dtype=dtype) + j
    sign = rng.choice(np.array([-1, 1] if signed else [1], dtype=dtype), n)
    choices = np.stack(
        [
            np.full(n, info.max, dtype=dtype) - j,
            np.full(n, low, dtype=dtype) + j,
            half * sign,
            rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True),
        ]
    )
    v[big] = choices[rng.integers(0, 4, n), np.arange(n)]
    return v


def random_values(rng, count, dtype, large=None):
    """Multiples of 1/2 in [-4, 4], a fifth of them explicit zeros (0.0 or -0.0, neither of which
    a valued mask admits); complex values have a real and an imaginary part of that kind (so
    some are purely imaginary, non-zero). The exact dtypes: ``exact_values``."""
    if dtype.kind in "biu":
        return exact_values(rng, count, dtype, large)

    def part():
        v = rng.integers(-8, 9, count) / 2.0
        zero = rng.random(count) < 0.2
        v[zero] = np.where(rng.random(zero.sum()) < 0.5, 0.0, -0.0)
        return v

    if dtype.kind == "c":
        v = part() + 1j * part()
        v[rng.random(count) < 0.2] = 0.0
        return v.astype(dtype)
    return part().astype(dtype)


def random_blocks(rng, shapes, row_offsets, col_offsets, dtype, full=False):
    """The entries (rows, cols, values) of one random block per case, case ``c`` of shape
    ``shapes[c]`` at ``(row_offsets[c], col_offsets[c])``: each block of a density drawn from
    DENSITIES with about a fifth of its rows and of its columns empty, or with ``full`` every
    position stored (a vector given as a NumPy array)."""
    nrows, ncols = shapes[:, 0], shapes[:, 1]
    sizes = nrows * ncols
    # Every block's positions at once, row by row: its case, then its row and column in it.
    case = np.repeat(np.arange(len(shapes)), sizes)
    local = np.arange(sizes.sum()) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    row, col = np.divmod(local, np.maximum(ncols, 1)[case])
    rows, cols = row + row_offsets[case], col + col_offsets[case]
    if not full:
        density = rng.choice(DENSITIES, len(shapes))[case]

        def emptied(index, offsets):
            """Whether a position is in one of the rows (columns) left empty."""
            if not offsets.any():
                # A vector's side of length 1, shared by every case: never emptied.
                return np.zeros(len(index), dtype=bool)
            return (rng.random(int(offsets[-1])) < 0.2)[index]

        stored = rng.random(len(case)) < density
        stored &= ~emptied(rows, row_offsets) & ~emptied(cols, col_offsets)
        rows, cols, case = rows[stored], cols[stored], case[stored]
    large = None
    if dtype.kind in "iu":
        large = rng.choice(LARGE_FRACTIONS, len(shapes))[case]
    values = random_values(rng, len(rows), dtype, large)
    return rows.astype(np.int64), cols.astype(np.int64), values


class Problem:
    """One combination's cases as the blocks of one product ``left ⊕.⊗ right`` of shape
    ``nrows × ncols``: for mxm, left is A and right is B; for mxv, left is A and right is u as
    a column (the result, mask and C columns too); for vxm, left is u as a row and right is A
    (the result, mask and C rows). Each operand is held as its entries (rows, cols, values)
    and its shape."""

    def __init__(self, op, dtype, mask_mode, rng):
        self.op = op
        # Each case's (p, q, r): left is p × q, right q × r. A vector's side of length 1 is
        # shared by every case rather than stacked.
        dims = rng.integers(0, MAX_DIM + 1, (CASES, 3))
        shared = {"mxv": 2, "vxm": 0}.get(op)
        if shared is not None:
            dims[:, shared] = 1
        self.dims = dims
        self.offsets = [
            np.zeros(CASES + 1, dtype=np.int64)
            if axis == shared
            else np.concatenate([[0], np.cumsum(dims[:, axis])])
            for axis in range(3)
        ]
        p, q, r = (1 if axis == shared else int(o[-1]) for axis, o in enumerate(self.offsets))
        self.nrows, self.ncols = p, r
        # The vectors given to hetsparse as NumPy arrays: every position stored, zeros too. Not
        # a structural mask: it would admit every position of every case (none, complemented).
        self.full = set()
        if op != "mxm":
            roles = ["right" if op == "mxv" else "left", "out"]
            if mask_mode is not None and not mask_mode[0]:
                roles.append("mask")
            self.full = {role for role in roles if rng.random() < 0.15}
        self.has_out = rng.random() < 0.9

        def blocks(row_axis, col_axis, role):
            return random_blocks(
                rng,
                dims[:, [row_axis, col_axis]],
                self.offsets[row_axis],
                self.offsets[col_axis],
                dtype,
                role in self.full,
            )

        self.left = blocks(0, 1, "left"), (p, q)
        self.right = blocks(1, 2, "right"), (q, r)
        self.mask = blocks(0, 2, "mask"), (p, r)
        self.out = blocks(0, 2, "out"), (p, r)

    def case_of(self, i, j):
        """The case a position of the result belongs to, and the position within it."""
        if self.op == "vxm":
            case = int(np.searchsorted(self.offsets[2], j, side="right")) - 1
        else:
            case = int(np.searchsorted(self.offsets[0], i, side="right")) - 1
        return case, (i - int(self.offsets[0][case]), j - int(self.offsets[2][case]))

    def describe(self, case):
        p, q, r = self.dims[case]
        return f"case {case} of {CASES} (left {p} × {q}, right {q} × {r})"

    def vector_entries(self, operand):
        """A vector operand's (indices, values, length): mxv's are columns, vxm's rows."""
        (rows, cols, values), (nrows, ncols) = operand
        if self.op == "mxv":
            return rows, values, nrows
        return cols, values, ncols

    def admits(self, mask_mode, i, j):
        """Whether the mask, in ``mask_mode``, admits position (i, j) of the result."""
        if mask_mode is None:
            return True
        structural, complement, _ = mask_mode
        (rows, cols, values), _ = self.mask
        at = (rows == i) & (cols == j)
        if not structural:
            at &= values != 0
        return bool(at.any()) != complement


def as_scipy(operand, dtype):
    (rows, cols, values), shape = operand
    return sp.csr_matrix((values, (rows, cols)), shape=shape, dtype=dtype)


def as_vector(problem, role, dtype, column):
    """A vector operand as hetsparse takes it: a NumPy array when stored full, else a sparse
    ``1 × n`` row or ``n × 1`` column (both are accepted)."""
    index, values, length = problem.vector_entries(getattr(problem, role))
    if role in problem.full:
        v = np.zeros(length, dtype=dtype)
        v[index] = values
        return v
    row = sp.csr_matrix((values, (np.zeros_like(index), index)), shape=(1, length), dtype=dtype)
    return row.T if column else row


def run_hetsparse(problem, semiring, dtype, mask_mode, accum, device, columns):
    """hetsparse's result as entries (rows, cols, values) in the problem's coordinates;
    ``columns`` says, for the mask, C and u, whether a sparse vector goes as a column."""
    kwargs = {"accum": accum, "device": device}
    if mask_mode is not None:
        structural, complement, replace = mask_mode
        kwargs.update(structural=structural, complement=complement, replace=replace)
    op = problem.op
    if op == "mxm":
        if mask_mode is not None:
            kwargs["mask"] = as_scipy(problem.mask, dtype)
        if problem.has_out:
            kwargs["out"] = as_scipy(problem.out, dtype)
        a, b = as_scipy(problem.left, dtype), as_scipy(problem.right, dtype)
        got = hetsparse.mxm(a, b, semiring, **kwargs)
    else:
        if mask_mode is not None:
            kwargs["mask"] = as_vector(problem, "mask", dtype, columns[0])
        if problem.has_out:
            kwargs["out"] = as_vector(problem, "out", dtype, columns[1])
        if op == "mxv":
            u = as_vector(problem, "right", dtype, columns[2])
            got = hetsparse.mxv(as_scipy(problem.left, dtype), u, semiring, **kwargs)
        else:
            u = as_vector(problem, "left", dtype, columns[2])
            got = hetsparse.vxm(u, as_scipy(problem.right, dtype), semiring, **kwargs)
    assert got.shape == (problem.nrows, problem.ncols)
    assert got.dtype == dtype
    got = got.tocoo()
    order = np.lexsort((got.col, got.row))
    return got.row[order].astype(np.int64), got.col[order].astype(np.int64), got.data[order]


def run_graphblas(problem, semiring, dtype, mask_mode, accum):
    """python-graphblas's ``C(mask, accum, replace) << left.mxm(right, semiring)`` (``mxv``,
    ``vxm`` for vectors) as entries (rows, cols, values) in the problem's coordinates.

    GraphBLAS defines ``lor_land`` over BOOL only; hetsparse defines it over floats as ``or``
    of ``and`` of "is not zero" (0 or 1), which is GraphBLAS's over BOOL copies of the operands
    (a stored zero is a stored ``False``). That BOOL product, and ``any_secondi``'s INT64 one,
    are cast to C's type as GraphBLAS casts any product into C (SuiteSparse has
    ``any_secondi`` over INT32 and INT64 only: python-graphblas types it INT64 for the unsigned
    types, whose indices, all small, cast exactly). Over bool, the semiring is GraphBLAS's of
    the renamed operators (``BOOL_SEMIRINGS``).

    A valued mask admits where its value cast to bool is true (the C API spec), which -0.0 is
    not; SuiteSparse tests a mask value's bits instead of casting it (its ``GB_mcast``, for
    speed), so it admits -0.0. The mask python-graphblas gets has +0.0 for every -0.0, which
    the spec treats alike; hetsparse gets the -0.0.
    """
    op = problem.op
    operand_type = bool if semiring == "lor_land" else dtype

    def matrix(operand):
        (rows, cols, values), (nrows, ncols) = operand
        return gb.Matrix.from_coo(rows, cols, values, dtype=dtype, nrows=nrows, ncols=ncols)

    def vector(operand):
        index, values, length = problem.vector_entries(operand)
        return gb.Vector.from_coo(index, values, dtype=dtype, size=length)

    def positive_zeros(operand):
        (rows, cols, values), shape = operand
        return (rows, cols, np.where(values == 0, np.zeros_like(values), values)), shape

    make_left = vector if op == "vxm" else matrix
    make_right = vector if op == "mxv" else matrix
    left = make_left(problem.left).dup(dtype=operand_type)
    right = make_right(problem.right).dup(dtype=operand_type)
    product = getattr(left, op)(right, graphblas_semiring(semiring, dtype))
    make = matrix if op == "mxm" else vector
    if problem.has_out:
        c = make(problem.out)
    elif op == "mxm":
        c = gb.Matrix(dtype, problem.nrows, problem.ncols)
    else:
        c = gb.Vector(dtype, problem.nrows if op == "mxv" else problem.ncols)
    call = {}
    if accum is not None:
        call["accum"] = getattr(gb.binary, accum)[c.dtype]
    if mask_mode is not None:
        structural, complement, replace = mask_mode
        m = make(positive_zeros(problem.mask))
        m = m.S if structural else m.V
        call["mask"] = ~m if complement else m
        call["replace"] = replace
    c(**call) << product
    if op == "mxm":
        rows, cols, values = c.to_coo()
    else:
        index, values = c.to_coo()
        zeros = np.zeros_like(index)
        rows, cols = (index, zeros) if op == "mxv" else (zeros, index)
    return rows.astype(np.int64), cols.astype(np.int64), values.astype(dtype)


def any_secondi_allows(problem, i, j, value, mask_mode, accum):
    """Whether ``value`` at (i, j) is what another choice of "any" gives: the mask admits the
    position and the product has an entry there (some k with left(i, k) and right(k, j)
    stored), and ``value`` is such a k, or ``accum(c, k)`` where C holds an entry ``c``."""
    if not problem.admits(mask_mode, i, j):
        return False
    (lrows, lcols, _), _ = problem.left
    (rrows, rcols, _), _ = problem.right
    ks = np.intersect1d(lcols[lrows == i], rrows[rcols == j]).astype(value.dtype)
    (orows, ocols, ovalues), _ = problem.out
    old = ovalues[(orows == i) & (ocols == j)] if problem.has_out else ovalues[:0]
    if len(old) == 0 or accum is None:
        return value in ks
    combine = {
        "plus": np.add,
        "times": np.multiply,
        "min": np.minimum,
        "max": np.maximum,
        "second": lambda c, t: t,
    }[accum]
    return value in combine(old[0], ks)


def compare(problem, got, want, semiring, mask_mode, accum, where):
    """Pattern exactly and values exactly (see the module's docstring); for ``any_secondi``,
    a value that differs from python-graphblas's must be another valid choice."""
    (grow, gcol, gval), (wrow, wcol, wval) = got, want
    ncols = max(problem.ncols, 1)
    got_keys, want_keys = grow * ncols + gcol, wrow * ncols + wcol
    if not np.array_equal(got_keys, want_keys):
        extra = np.setdiff1d(got_keys, want_keys)
        missing = np.setdiff1d(want_keys, got_keys)
        key = int(min(np.concatenate([extra, missing])))
        case, pos = problem.case_of(key // ncols, key % ncols)
        if key in extra:
            kind = "an entry python-graphblas has not"
        else:
            kind = "no entry where python-graphblas has one"
        pytest.fail(
            f"{where}: {problem.describe(case)}: hetsparse has {kind} at {pos} "
            f"({len(extra)} extra, {len(missing)} missing in all)"
        )
    for n in np.nonzero(gval != wval)[0]:
        i, j = int(grow[n]), int(gcol[n])
        value = gval[n]
        if semiring == "any_secondi" and any_secondi_allows(problem, i, j, value, mask_mode, accum):
            continue
        case, pos = problem.case_of(i, j)
        pytest.fail(
            f"{where}: {problem.describe(case)}: at {pos} hetsparse has {value}, "
            f"python-graphblas {wval[n]}"
        )


@pytest.mark.parametrize("op, semiring, dtype, mask_mode, accum", list(_combinations()))
def test_against_graphblas(op, semiring, dtype, mask_mode, accum, request):
    # One generator per combination, seeded by its name: a failure names both.
    seed = zlib.crc32(request.node.callspec.id.encode())
    rng = np.random.default_rng(seed)
    problem = Problem(op, dtype, mask_mode, rng)
    columns = tuple(bool(c) for c in rng.integers(0, 2, 3))
    want = run_graphblas(problem, semiring, dtype, mask_mode, accum)
    for device in DEVICES:
        backend = device.split(":")[0]
        if op != "mxm" and backend not in VECTOR_PRODUCT_DEVICES:
            # Refused, never answered otherwise (a backend that gains them belongs above).
            with pytest.raises(TypeError, match=f"does not support sparse-vector {op}"):
                run_hetsparse(problem, semiring, dtype, mask_mode, accum, device, columns)
            continue
        if dtype.kind in "biu" and dtype.name not in EXACT_DTYPE_DEVICES.get(backend, ()):
            # Likewise refused where the device's kernels are not written for the dtype.
            with pytest.raises(TypeError, match=EXACT_REFUSAL):
                run_hetsparse(problem, semiring, dtype, mask_mode, accum, device, columns)
            continue
        got = run_hetsparse(problem, semiring, dtype, mask_mode, accum, device, columns)
        compare(problem, got, want, semiring, mask_mode, accum, f"{device}, seed {seed}")


def test_bool_renaming_agrees_with_graphblas():
    """BOOL_SEMIRINGS names what python-graphblas itself gives over BOOL, where it gives a BOOL
    semiring of that name; plus_pair is its only other one, counting in INT64."""
    checked = set()
    for name, renamed in BOOL_SEMIRINGS.items():
        try:
            typed = getattr(gb.semiring, name)[gb.dtypes.BOOL]
        except KeyError:
            continue
        if typed.return_type != gb.dtypes.BOOL:
            assert (name, typed.return_type) == ("plus_pair", gb.dtypes.INT64)
            continue
        assert typed.name == renamed, name
        checked.add(name)
    assert checked == {"any_pair", "min_first", "min_second", "lor_land"}


@pytest.mark.parametrize("op", ["mxm", "mxv", "vxm"])
def test_bool_any_secondi_is_refused(op):
    """any_secondi gives an index, which no bool holds: refused over bool on every device."""
    a = sp.csr_matrix(np.array([[True, False], [True, True]]))
    u = np.array([True, False])
    for device in DEVICES:
        with pytest.raises(TypeError, match=r"for bool\b"):
            if op == "mxm":
                hetsparse.mxm(a, a, "any_secondi", device=device)
            elif op == "mxv":
                hetsparse.mxv(a, u, "any_secondi", device=device)
            else:
                hetsparse.vxm(u, a, "any_secondi", device=device)
