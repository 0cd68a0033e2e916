"""``hetsparse.Matrix``: a matrix converted once and used by ``mxm``, ``mxv`` and ``vxm`` (and
the plain ``spgemm``, ``spmv`` and ``spmm``) in place of a scipy operand. Its results must be the scipy operand's, on every device under test
(a device that refuses a product must refuse it the same way), and a loop over it must not
convert it again."""

import pickle

import numpy as np
import pytest
import scipy.sparse as sp

import hetsparse
from hetsparse import _hetsparse

ANY = ("any_pair", "any_secondi")
COMPLEX_SEMIRINGS = ("plus_times", "plus_pair", "plus_first", "plus_second", "any_pair")


def random(rows, cols, density, dtype, seed, fmt="csr"):
    """A random sparse matrix of small integer values (exact in every dtype), explicit zeros
    included where the dtype allows them."""
    rng = np.random.default_rng(seed)
    m = sp.random(rows, cols, density=density, format="coo", random_state=rng)
    values = rng.integers(0, 4, m.nnz)
    if np.dtype(dtype).kind == "c":
        m.data = (values + 1j * rng.integers(0, 3, m.nnz)).astype(dtype)
    else:
        m.data = values.astype(dtype)
    return m.asformat(fmt)


def outcome(fn):
    """What ``fn()`` gives: ``("ok", result)`` or ``("raises", type, message)``."""
    try:
        return ("ok", fn())
    except (TypeError, ValueError) as e:
        return ("raises", type(e), str(e))


def assert_same(got, want, semiring):
    """Two outcomes agree: the same exception, or equal results (for the ``any`` semirings,
    whose value may be any product, the same structure)."""
    assert got[0] == want[0], (got, want)
    if got[0] == "raises":
        assert got[1:] == want[1:]
        return
    g, w = got[1], want[1]
    assert type(g) is type(w)
    assert g.shape == w.shape and g.dtype == w.dtype
    g, w = sp.csr_matrix(g), sp.csr_matrix(w)
    assert np.array_equal(g.indptr, w.indptr) and np.array_equal(g.indices, w.indices)
    if semiring not in ANY:
        if g.dtype.kind in "fc":
            np.testing.assert_allclose(g.data, w.data, rtol=1e-6)
        else:
            assert np.array_equal(g.data, w.data)


def semirings_for(dtype):
    if np.dtype(dtype).kind == "c":
        return COMPLEX_SEMIRINGS
    if np.dtype(dtype) == np.bool_:
        return ("plus_times", "any_pair", "lor_land", "min_first")
    return ("plus_times", "min_plus", "max_times", "any_secondi", "plus_pair")


DTYPES = [np.float64, np.float32, np.complex128, np.bool_, np.int64, np.int32, np.uint32]
MASK_MODES = [
    # (mask?, structural, complement, replace, accum, out?)
    (False, True, False, False, None, False),
    (True, True, False, False, None, False),
    (True, False, True, False, None, False),
    (True, True, True, True, None, True),
    (True, False, False, False, "plus", True),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("mode", range(len(MASK_MODES)))
def test_mxm_with_matrices_is_mxm_with_scipy(device, dtype, mode):
    has_mask, structural, complement, replace, accum, has_out = MASK_MODES[mode]
    a = random(20, 15, 0.2, dtype, 1)
    b = random(15, 25, 0.2, dtype, 2, fmt="csc")
    mask = random(20, 25, 0.3, dtype, 3) if has_mask else None
    out = random(20, 25, 0.2, dtype, 4) if has_out else None
    ma, mb = hetsparse.Matrix(a), hetsparse.Matrix(b)
    mm = hetsparse.Matrix(mask) if has_mask else None
    mo = hetsparse.Matrix(out) if has_out else None
    for semiring in semirings_for(dtype):
        kwargs = dict(
            structural=structural,
            complement=complement,
            replace=replace,
            accum=accum,
            device=device,
        )
        want = outcome(lambda: hetsparse.mxm(a, b, semiring, mask=mask, out=out, **kwargs))
        # Every mix of Matrix and scipy operands gives the same.
        for args in [(ma, mb, mm, mo), (ma, b, mask, mo), (a, mb, mm, out)]:
            x, y, m, o = args
            got = outcome(lambda: hetsparse.mxm(x, y, semiring, mask=m, out=o, **kwargs))
            assert_same(got, want, semiring)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("kind", ["mxv", "vxm"])
@pytest.mark.parametrize("mode", range(len(MASK_MODES)))
def test_vector_products_with_a_matrix_are_those_with_scipy(device, dtype, kind, mode):
    has_mask, structural, complement, replace, accum, has_out = MASK_MODES[mode]
    a = random(30, 20, 0.15, dtype, 5)
    ma = hetsparse.Matrix(a)
    u_len, w_len = (20, 30) if kind == "mxv" else (30, 20)
    u = random(1, u_len, 0.4, dtype, 6)
    mask = random(1, w_len, 0.5, dtype, 7) if has_mask else None
    out = random(1, w_len, 0.3, dtype, 8) if has_out else None
    product = getattr(hetsparse, kind)
    for semiring in semirings_for(dtype):
        kwargs = dict(
            mask=mask,
            structural=structural,
            complement=complement,
            replace=replace,
            accum=accum,
            out=out,
            device=device,
        )

        def run(matrix, vector):
            if kind == "mxv":
                return product(matrix, vector, semiring, **kwargs)
            return product(vector, matrix, semiring, **kwargs)

        want = outcome(lambda: run(a, u))
        assert_same(outcome(lambda: run(ma, u)), want, semiring)
        # A dense vector too.
        dense = u.toarray().ravel()
        assert_same(outcome(lambda: run(ma, dense)), outcome(lambda: run(a, dense)), semiring)


def bfs(a, source, device):
    """Levels of a push BFS: ``q⟨¬visited, replace⟩ = q any.secondi A``, one vxm a level."""
    n = a.shape[0]
    level = np.full(n, -1, dtype=np.int64)
    level[source] = 0
    seen = np.zeros(n, dtype=np.int64)
    seen[source] = 1
    q = sp.csr_matrix(([source], ([0], [source])), shape=(1, n), dtype=np.int64)
    depth = 0
    while q.nnz:
        depth += 1
        visited = sp.csr_matrix(seen.reshape(1, n))
        q = hetsparse.vxm(
            q, a, "any_secondi", mask=visited, complement=True, replace=True, device=device
        )
        level[q.indices] = depth
        seen[q.indices] = 1
    return level


def test_a_bfs_over_a_matrix_is_the_bfs_over_scipy(device):
    rng = np.random.default_rng(9)
    n = 200
    g = sp.random(n, n, density=0.02, format="csr", random_state=rng)
    g = ((g + g.T) > 0).astype(np.int64).tocsr()
    want = outcome(lambda: bfs(g, 0, device))
    got = outcome(lambda: bfs(hetsparse.Matrix(g), 0, device))
    assert got[0] == want[0]
    if got[0] == "ok":
        assert np.array_equal(got[1], want[1])
        assert (got[1] >= 0).sum() > 1
    else:
        assert got[1:] == want[1:]


def plain_outcome(fn):
    """``outcome`` of a plain product, whose dense results compare as arrays."""
    got = outcome(fn)
    if got[0] == "ok" and isinstance(got[1], np.ndarray):
        return ("ok", sp.csr_matrix(got[1]))
    return got


# The dtypes of the plain products, and exact ones, which they refuse as they refuse scipy's.
PLAIN_DTYPES = [np.float64, np.float32, np.complex128, np.complex64, np.bool_, np.int64]


@pytest.mark.parametrize("dtype", PLAIN_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("array", [False, True], ids=["matrix", "array"])
def test_plain_products_with_matrices_are_those_with_scipy(device, dtype, array):
    kind = sp.csr_array if array else sp.csr_matrix
    a = kind(random(20, 15, 0.2, dtype, 30))
    b = random(15, 25, 0.2, dtype, 31, fmt="csc")
    a_csc = random(20, 15, 0.2, dtype, 32, fmt="csc")
    ma, mb = hetsparse.Matrix(a), hetsparse.Matrix(b)
    # spgemm: every mix of Matrix and scipy operands gives what the scipy operands give, of
    # the same class (CSC from a CSC A, with a Matrix B too).
    for x, y, wx, wy in [(ma, mb, a, b), (ma, b, a, b), (a, mb, a, b), (a_csc, mb, a_csc, b)]:
        want = outcome(lambda: hetsparse.spgemm(wx, wy, device=device))
        got = outcome(lambda: hetsparse.spgemm(x, y, device=device))
        assert_same(got, want, "plus_times")
        if want[0] == "ok":
            assert got[1].format == want[1].format and got[1].has_sorted_indices
    # One Matrix as both operands.
    square = kind(random(15, 15, 0.3, dtype, 33))
    ms = hetsparse.Matrix(square)
    assert_same(
        outcome(lambda: hetsparse.spgemm(ms, ms, device=device)),
        outcome(lambda: hetsparse.spgemm(square, square, device=device)),
        "plus_times",
    )
    # spmv and spmm with a Matrix A; X in both orders.
    x = np.arange(15).astype(dtype)
    assert_same(
        plain_outcome(lambda: hetsparse.spmv(ma, x, device=device)),
        plain_outcome(lambda: hetsparse.spmv(a, x, device=device)),
        "plus_times",
    )
    for order in "CF":
        X = np.asarray(np.arange(45).reshape(15, 3), order=order).astype(dtype, order=order)
        got = plain_outcome(lambda: hetsparse.spmm(ma, X, device=device))
        assert_same(got, plain_outcome(lambda: hetsparse.spmm(a, X, device=device)), "plus_times")
    if np.dtype(dtype) in hetsparse.DTYPES:
        # Known answers, besides agreeing with the scipy operands'.
        np.testing.assert_allclose(
            hetsparse.spgemm(ma, mb, device=device).toarray(), a.toarray() @ b.toarray(), rtol=1e-5
        )
        np.testing.assert_allclose(
            hetsparse.spmv(ma, x, device=device), a.toarray() @ x, rtol=1e-5
        )
    else:
        assert got[0] == "raises" and got[1] is TypeError


def test_plain_products_convert_a_matrix_of_another_dtype(device):
    a = random(10, 12, 0.3, np.int64, 34)
    b = random(12, 7, 0.3, np.float64, 35)
    m = hetsparse.Matrix(a)  # int64; the products compute in float64
    got = hetsparse.spgemm(m, b, device=device)
    assert got.dtype == np.float64
    assert_same(("ok", got), ("ok", hetsparse.spgemm(a.astype(np.float64), b)), "plus_times")
    got = hetsparse.spgemm(b.T.tocsr(), hetsparse.Matrix(a.T), device=device)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got.toarray(), b.toarray().T @ a.toarray().T)
    y = hetsparse.spmv(m, np.ones(12), device=device)
    assert y.dtype == np.float64
    np.testing.assert_allclose(y, a.toarray() @ np.ones(12))
    Y = hetsparse.spmm(m, np.ones((12, 2), dtype=np.float32), device=device)
    assert Y.dtype == np.float64
    np.testing.assert_allclose(Y, a.toarray() @ np.ones((12, 2)))


def test_plain_products_over_a_matrix_do_not_convert_it_again():
    g = random(300, 300, 0.02, np.float64, 36)
    m = hetsparse.Matrix(g)
    x = np.ones(300)
    X = np.ones((300, 4))
    before = (_hetsparse._operands_read(), _hetsparse._conversions())
    for _ in range(5):
        hetsparse.spgemm(m, m, device="cpu")
        hetsparse.spmv(m, x, device="cpu")
        hetsparse.spmm(m, X, device="cpu")
    assert _hetsparse._operands_read() == before[0]
    assert _hetsparse._conversions() == before[1]
    # With scipy's A, each call reads it (spgemm of A with itself once).
    before = _hetsparse._operands_read()
    hetsparse.spgemm(g, g, device="cpu")
    hetsparse.spmv(g, x, device="cpu")
    assert _hetsparse._operands_read() == before + 2


def test_plain_products_refuse_what_they_refuse_with_scipy():
    a = random(5, 6, 0.5, np.float64, 37)
    m = hetsparse.Matrix(a)
    with pytest.raises(ValueError, match="dimension mismatch"):
        hetsparse.spgemm(m, m)
    with pytest.raises(ValueError, match="dimension mismatch"):
        hetsparse.spgemm(a, m)
    with pytest.raises(ValueError, match="dimension mismatch"):
        hetsparse.spmv(m, np.ones(5))
    with pytest.raises(ValueError, match="dimension mismatch"):
        hetsparse.spmm(m, np.ones((5, 2)))
    with pytest.raises(TypeError, match="scipy.sparse"):
        hetsparse.spgemm(m, a.T.toarray())
    # The native half refuses a stored matrix of a dtype the plain products do not compute
    # in, and one of another dtype than A's.
    mb = hetsparse.Matrix(a.T.tocsr(), dtype=bool)
    with pytest.raises(TypeError, match="dtype bool"):
        _hetsparse.spgemm(mb._native, m._native, "cpu")
    with pytest.raises(TypeError, match="dtype bool"):
        _hetsparse.spmv(mb._native, np.ones(5, dtype=bool), "cpu")
    with pytest.raises(TypeError, match="dtype float32"):
        _hetsparse.spgemm(m._native, hetsparse.Matrix(a.T, dtype=np.float32)._native, "cpu")


def test_a_loop_over_a_matrix_does_not_convert_it_again():
    g = random(500, 500, 0.01, np.int64, 10)
    g = (g + g.T).tocsr()
    m = hetsparse.Matrix(g)
    u = sp.csr_matrix(([3], ([0], [7])), shape=(1, 500), dtype=np.int64)
    seen = sp.csr_matrix(([1, 1], ([0, 0], [7, 9])), shape=(1, 500), dtype=np.int64)

    def operands_read(a, calls=10):
        before = (_hetsparse._operands_read(), _hetsparse._conversions())
        for _ in range(calls):
            hetsparse.vxm(
                u, a, "any_secondi", mask=seen, complement=True, replace=True, device="cpu"
            )
        after = (_hetsparse._operands_read(), _hetsparse._conversions())
        return after[0] - before[0], np.subtract(after[1], before[1])

    # With scipy's A, each call reads three operands: u, the mask and A.
    read, _ = operands_read(g)
    assert read == 30
    # With the Matrix, u and the mask only.
    read, _ = operands_read(m)
    assert read == 20
    # No operand at all is read or converted where every one is a Matrix (mxm).
    before = (_hetsparse._operands_read(), _hetsparse._conversions())
    for _ in range(5):
        hetsparse.mxm(m, m, "plus_pair", mask=m, out=m, device="cpu")
    assert _hetsparse._operands_read() == before[0]
    assert _hetsparse._conversions() == before[1]


def test_making_a_matrix_reads_its_operand_once():
    a = random(50, 40, 0.1, np.float64, 11)
    before = _hetsparse._operands_read()
    m = hetsparse.Matrix(a)
    assert _hetsparse._operands_read() == before + 1
    assert (m.shape, m.nnz, m.dtype) == ((50, 40), a.nnz, np.dtype(np.float64))


@pytest.mark.parametrize(
    "dtype",
    DTYPES + [np.complex64, np.uint64],
    ids=lambda d: np.dtype(d).name,
)
@pytest.mark.parametrize("fmt", ["csr", "csc", "coo", "lil"])
def test_to_scipy_round_trips(dtype, fmt):
    a = random(13, 17, 0.3, dtype, 12, fmt=fmt)
    m = hetsparse.Matrix(a)
    back = m.to_scipy()
    assert isinstance(back, sp.csr_matrix)
    assert back.dtype == np.dtype(dtype) and back.shape == (13, 17)
    assert back.has_sorted_indices
    want = sp.csr_matrix(a)
    want.sort_indices()
    assert np.array_equal(back.indptr, want.indptr)
    assert np.array_equal(back.indices, want.indices)
    assert np.array_equal(back.data, want.data)
    # A copy: writing it changes neither the Matrix nor a later copy.
    back.data[:] = 0
    assert np.array_equal(m.to_scipy().data, want.data)


def test_a_matrix_is_a_copy_and_read_only():
    a = random(10, 10, 0.3, np.float64, 13)
    want = a.toarray()
    m = hetsparse.Matrix(a)
    a.data[:] = 99.0  # the Matrix read a's arrays in place while making itself, then copied
    assert np.array_equal(m.to_scipy().toarray(), want)
    for name, value in [("shape", (1, 1)), ("nnz", 0), ("dtype", np.int32), ("other", 1)]:
        with pytest.raises(AttributeError):
            setattr(m, name, value)


def test_unsorted_indices_and_repeats_are_made_canonical():
    # Row 0 holds column 2 twice (summed) and its columns out of order.
    a = sp.csr_matrix(
        (np.array([1.0, 2.0, 3.0, 4.0]), np.array([2, 0, 2, 1]), np.array([0, 3, 4])),
        shape=(2, 3),
    )
    m = hetsparse.Matrix(a)
    assert m.nnz == 3
    assert np.array_equal(m.to_scipy().toarray(), a.toarray())
    assert np.array_equal(
        hetsparse.mxm(m, m.to_scipy().T.tocsr()).toarray(), hetsparse.mxm(a, a.T.tocsr()).toarray()
    )


def test_arrays_give_arrays_and_matrices_give_matrices():
    a = random(6, 6, 0.5, np.float64, 14)
    ma, mm = hetsparse.Matrix(sp.csr_array(a)), hetsparse.Matrix(a)
    assert isinstance(ma.to_scipy(), sp.csr_array)
    assert isinstance(mm.to_scipy(), sp.csr_matrix)
    assert isinstance(hetsparse.mxm(ma, a, device="cpu"), sp.csr_array)
    assert isinstance(hetsparse.mxm(mm, sp.csr_array(a), device="cpu"), sp.csr_matrix)
    assert isinstance(hetsparse.vxm(np.ones(6), ma, device="cpu"), sp.csr_array)


def test_dtype_conversion_and_the_widened_integers():
    a = random(8, 9, 0.4, np.int8, 15)
    assert hetsparse.Matrix(a).dtype == np.int32
    assert hetsparse.Matrix(a.astype(np.uint16)).dtype == np.uint32
    m = hetsparse.Matrix(a, dtype=np.float32)
    assert m.dtype == np.float32
    assert np.array_equal(m.to_scipy().toarray(), a.toarray().astype(np.float32))
    assert hetsparse.Matrix(m, dtype=bool).dtype == np.bool_
    assert hetsparse.Matrix(m).dtype == np.float32


def test_a_matrix_of_another_dtype_is_converted_for_the_call(device):
    a = random(10, 12, 0.3, np.int64, 16)
    b = random(12, 7, 0.3, np.float64, 17)
    m = hetsparse.Matrix(a)  # int64; the product computes in float64
    got = hetsparse.mxm(m, b, "plus_times", device=device)
    want = hetsparse.mxm(a, b, "plus_times", device=device)
    assert got.dtype == np.float64
    assert_same(("ok", got), ("ok", want), "plus_times")
    w = hetsparse.mxv(hetsparse.Matrix(a), np.ones(12), device="cpu")
    assert w.dtype == np.float64
    np.testing.assert_allclose(w.toarray().ravel(), a.toarray() @ np.ones(12))
    # A mask is used in its own dtype: 0.5 is non-zero, as GraphBLAS casts it to bool.
    mask = hetsparse.Matrix(sp.csr_matrix(np.full((10, 7), 0.5)))
    got = hetsparse.mxm(a, random(12, 7, 0.5, np.int64, 18), mask=mask, structural=False,
                        device="cpu")
    want = hetsparse.mxm(a, random(12, 7, 0.5, np.int64, 18), device="cpu")
    assert_same(("ok", got), ("ok", want), "plus_times")


def test_errors():
    a = random(5, 6, 0.5, np.float64, 19)
    m = hetsparse.Matrix(a)
    # Not a sparse matrix.
    for bad in (a.toarray(), [[1.0]], "A", None):
        with pytest.raises(TypeError, match="scipy.sparse"):
            hetsparse.Matrix(bad)
    # Dtypes hetsparse does not store.
    with pytest.raises(TypeError):
        hetsparse.Matrix(a.astype(np.longdouble))
    with pytest.raises(TypeError, match="int8"):
        hetsparse.Matrix(a, dtype=np.int8)
    with pytest.raises(TypeError):
        hetsparse.Matrix(a, dtype=object)
    # Shapes that do not match.
    with pytest.raises(ValueError, match="dimension mismatch"):
        hetsparse.mxm(m, m)
    with pytest.raises(ValueError, match="dimension mismatch"):
        hetsparse.mxm(a, m)
    with pytest.raises(ValueError, match="mask has shape"):
        hetsparse.mxm(m, m.to_scipy().T, mask=m)
    with pytest.raises(ValueError, match="out has shape"):
        hetsparse.mxm(m, m.to_scipy().T, out=m)
    with pytest.raises(ValueError, match="length"):
        hetsparse.mxv(m, np.ones(5))
    with pytest.raises(ValueError, match="length"):
        hetsparse.vxm(np.ones(6), m)
    # Malformed arrays are ValueErrors, as for the products.
    broken = sp.csr_matrix((3, 3))
    broken.indptr = np.array([0, 1, 0, 0], dtype=np.int32)
    with pytest.raises(ValueError):
        hetsparse.Matrix(broken)
    # A semiring not over the dtype: TypeError, as with scipy operands.
    c = hetsparse.Matrix(a.astype(np.complex128))
    with pytest.raises(TypeError):
        hetsparse.mxm(c, c.to_scipy().T, "min_plus", device="cpu")
    # The native half refuses a stored matrix of another dtype than the product's.
    with pytest.raises(TypeError, match="dtype float64"):
        _hetsparse.mxm(
            hetsparse.Matrix(a.astype(np.int64))._native,
            m._native,
            None,
            None,
            "plus_times",
            True,
            False,
            False,
            None,
            "cpu",
        )


def test_repr_and_attributes():
    m = hetsparse.Matrix(random(3, 4, 0.5, np.float32, 20))
    assert repr(m) == f"<hetsparse.Matrix 3×4, {m.nnz} stored entries of dtype float32>"
    assert m.ndim == 2
    assert isinstance(m.shape, tuple) and m.shape == (3, 4)
    assert isinstance(m.dtype, np.dtype)


def test_pickles_as_its_contents():
    a = random(7, 5, 0.4, np.uint64, 21)
    m = pickle.loads(pickle.dumps(hetsparse.Matrix(sp.csr_array(a))))
    assert isinstance(m, hetsparse.Matrix) and m.dtype == np.uint64
    assert isinstance(m.to_scipy(), sp.csr_array)
    assert np.array_equal(m.to_scipy().toarray(), a.toarray())


def test_empty_matrices():
    m = hetsparse.Matrix(sp.csr_matrix((0, 4)))
    assert m.shape == (0, 4) and m.nnz == 0
    z = hetsparse.Matrix(sp.csr_matrix((4, 3), dtype=np.int32))
    c = hetsparse.mxm(z, sp.csr_matrix((3, 2), dtype=np.int32), device="cpu")
    assert c.shape == (4, 2) and c.nnz == 0


@pytest.mark.parametrize("dtype", [np.float64, np.int64, np.bool_], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("mode", [0, 1, 2, 4])
def test_matrices_kept_on_the_device_give_what_host_matrices_give(device, dtype, mode):
    # Made with device=, a Matrix is copied into that device's memory (none for the CPU) and
    # read there by the products on that device, named or followed from "auto"; every result
    # is the host Matrix's, and a mask kept on the device is read again on later calls.
    has_mask, structural, complement, replace, accum, has_out = MASK_MODES[mode]
    a = random(20, 15, 0.2, dtype, 40)
    b = random(15, 25, 0.2, dtype, 41)
    mask = random(20, 25, 0.3, dtype, 42) if has_mask else None
    out = random(20, 25, 0.2, dtype, 43) if has_out else None
    ka, kb = hetsparse.Matrix(a, device=device), hetsparse.Matrix(b, device=device)
    km = hetsparse.Matrix(mask, device=device) if has_mask else None
    assert (ka.device is None) == (device == "cpu")
    assert ka.device is None or ka.device.startswith(device)
    ha, hb = hetsparse.Matrix(a), hetsparse.Matrix(b)
    hm = hetsparse.Matrix(mask) if has_mask else None
    for semiring in semirings_for(dtype):
        kwargs = dict(structural=structural, complement=complement, replace=replace, accum=accum)
        want = outcome(lambda: hetsparse.mxm(ha, hb, semiring, mask=hm, out=out, device=device, **kwargs))
        for on in (device, "auto"):
            for x, y in [(ka, kb), (ka, b), (a, kb)]:
                for _ in range(2):
                    got = outcome(lambda: hetsparse.mxm(x, y, semiring, mask=km, out=out, device=on, **kwargs))
                    assert_same(got, want, semiring)


def test_plain_products_read_a_matrix_kept_on_the_device(device):
    a = random(30, 20, 0.2, np.float64, 44)
    b = random(20, 25, 0.2, np.float64, 45)
    ka, kb = hetsparse.Matrix(a, device=device), hetsparse.Matrix(b, device=device)
    for on in (device, "auto"):
        np.testing.assert_allclose(
            hetsparse.spgemm(ka, kb, device=on).toarray(), a.toarray() @ b.toarray()
        )
        np.testing.assert_allclose(
            hetsparse.spgemm(ka, b, device=on).toarray(), a.toarray() @ b.toarray()
        )
        x = np.arange(20, dtype=np.float64)
        np.testing.assert_allclose(hetsparse.spmv(ka, x, device=on), a.toarray() @ x)
        X = np.arange(60, dtype=np.float64).reshape(20, 3)
        np.testing.assert_allclose(hetsparse.spmm(ka, X, device=on), a.toarray() @ X)
    # A product on another device reads the host copy.
    np.testing.assert_allclose(
        hetsparse.spgemm(ka, kb, device="cpu").toarray(), a.toarray() @ b.toarray()
    )
    # Another dtype is converted for the call, from the host copy.
    got = hetsparse.spgemm(hetsparse.Matrix(a.astype(np.float32), device=device), b, device=device)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got.toarray(), a.toarray() @ b.toarray(), rtol=1e-6)


def random_graph(n, density, seed):
    """An undirected graph of `n` vertices without self-loops: int64 ones, CSR."""
    g = random(n, n, density, np.int64, seed)
    g = (g + g.T).tocsr()
    g.setdiag(0)
    g.eliminate_zeros()
    g.data[:] = 1
    return g


def test_triangles_counted_on_a_graph_kept_on_the_device(device):
    g = random_graph(400, 0.03, 46)
    lower = sp.tril(g, k=-1).tocsr()
    dense = lower.toarray()
    want = int(((dense @ dense) * dense).sum())
    assert want > 0
    kl = hetsparse.Matrix(lower, device=device)
    for _ in range(3):
        c = hetsparse.mxm(kl, kl, "plus_pair", mask=kl)
        assert int(c.sum()) == want


def test_vector_products_read_a_graph_kept_on_the_device(device):
    # A BFS's levels (vxm any_secondi, the visited vertices' complement as the mask) and an
    # mxv on a Matrix kept on the device: what the host graph gives, and a graph that lives
    # only in the device's memory (a kept product) is read there, never downloaded.
    g = random_graph(300, 0.02, 49)
    dense = g.toarray()
    source = int(np.argmax(np.diff(g.indptr)))
    identity = hetsparse.Matrix(sp.identity(300, dtype=np.int64, format="csr"), device=device)
    kept = hetsparse.mxm(identity, hetsparse.Matrix(g, device=device), "plus_times",
                         device=device, keep=True)
    assert kept._native.in_host_memory == (not kept_on(device))

    def levels(a, on):
        level = np.full(300, -1)
        visited = np.zeros(300, dtype=bool)
        visited[source], level[source] = True, 0
        frontier = sp.csr_matrix(([source], ([0], [source])), shape=(1, 300), dtype=np.int64)
        depth = 0
        while frontier.nnz:
            depth += 1
            frontier = hetsparse.vxm(frontier, a, "any_secondi", mask=visited, structural=False,
                                     complement=True, device=on)
            assert np.all(dense[frontier.data, frontier.indices] == 1), "a parent with an edge"
            visited[frontier.indices] = True
            level[frontier.indices] = depth
        return level

    want = levels(g, "cpu")
    assert want.max() > 2
    for a in (hetsparse.Matrix(g, device=device), kept):
        for on in (device, "auto"):
            assert np.array_equal(levels(a, on), want)
    x = sp.csr_matrix(np.arange(300, dtype=np.int64).reshape(300, 1))
    got = hetsparse.mxv(kept, x, "plus_times", device=device)
    np.testing.assert_array_equal(got.toarray().ravel(), g @ np.arange(300))
    assert kept._native.in_host_memory == (not kept_on(device)), "read where it lies"


def test_a_device_copy_is_asked_for_by_name():
    a = random(5, 5, 0.5, np.float64, 47)
    with pytest.raises(ValueError, match="not a device"):
        hetsparse.Matrix(a, device="gpu")
    with pytest.raises(TypeError, match="device"):
        hetsparse.Matrix(a, device=0)
    # Devices that compute in host memory keep no copy.
    assert hetsparse.Matrix(a, device="cpu").device is None
    assert hetsparse.Matrix(a, device="auto").device is None
    assert hetsparse.Matrix(a).device is None


def test_a_pickled_device_matrix_comes_back_in_host_memory(device):
    a = random(8, 9, 0.4, np.float64, 48)
    m = pickle.loads(pickle.dumps(hetsparse.Matrix(a, device=device)))
    assert m.device is None
    assert_same(("ok", m.to_scipy()), ("ok", sp.csr_matrix(a)), "plus_times")


def kept_on(device):
    """Whether a result kept on ``device`` stays in its memory (no host copy)."""
    return device not in ("cpu", "auto")


@pytest.mark.parametrize("dtype", [np.float64, np.int64, np.bool_, np.complex64], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("mode", range(len(MASK_MODES)))
def test_kept_results_are_the_returned_ones(device, dtype, mode):
    # keep=True gives the product as a Matrix left where it was computed: the same matrix the
    # call returns to scipy, for every semiring and mask mode; with out=, the merged result.
    has_mask, structural, complement, replace, accum, has_out = MASK_MODES[mode]
    a = random(20, 15, 0.2, dtype, 60)
    b = random(15, 25, 0.2, dtype, 61)
    mask = random(20, 25, 0.3, dtype, 62) if has_mask else None
    out = random(20, 25, 0.2, dtype, 63) if has_out else None
    ka = hetsparse.Matrix(a, device=device)
    km = hetsparse.Matrix(mask, device=device) if has_mask else None
    kwargs = dict(structural=structural, complement=complement, replace=replace, accum=accum)
    for semiring in semirings_for(dtype):
        want = outcome(lambda: hetsparse.mxm(a, b, semiring, mask=mask, out=out, device=device, **kwargs))
        for on in (device, "auto"):
            for x, m in [(ka, km), (a, mask)]:
                got = outcome(lambda: hetsparse.mxm(
                    x, b, semiring, mask=m, out=out, device=on, keep=True, **kwargs))
                if got[0] == "ok":
                    c = got[1]
                    assert isinstance(c, hetsparse.Matrix)
                    assert c.shape == (20, 25) and c.dtype == np.dtype(dtype)
                    computed_on = device if (on == device or x is ka) else on
                    assert (c.device is None) == (not kept_on(computed_on)), (c.device, on)
                    # No host copy where the device kept the product itself (not merged).
                    assert c._native.in_host_memory == (not kept_on(computed_on) or has_out)
                    assert c.nnz == (want[1].nnz if want[0] == "ok" else c.nnz)
                    got = ("ok", c.to_scipy())
                    assert c._native.in_host_memory
                assert_same(got, want, semiring)


def test_kept_results_chain_and_are_read_where_they_lie(device):
    # A product's kept result is an operand (and a mask) of the next product on its device,
    # read there; host-only operations (mxv, vxm, other devices, pickling) copy it over.
    a = random(30, 30, 0.15, np.float64, 64)
    p = random(30, 12, 0.2, np.float64, 65)
    r = sp.csr_matrix(p.T)
    ka, kp, kr = (hetsparse.Matrix(m, device=device) for m in (a, p, r))
    ap = hetsparse.spgemm(ka, kp, device=device, keep=True)
    assert isinstance(ap, hetsparse.Matrix)
    assert ap._native.in_host_memory == (not kept_on(device))
    rap = hetsparse.spgemm(kr, ap, device=device, keep=True)
    assert ap._native.in_host_memory == (not kept_on(device)), "read where it lies"
    want = (r @ (a @ p)).toarray()
    np.testing.assert_allclose(rap.to_scipy().toarray(), want, rtol=1e-12)
    # auto follows the kept operand; a scipy operand joins it.
    np.testing.assert_allclose(
        hetsparse.spgemm(r, ap).toarray(), want, rtol=1e-12)
    np.testing.assert_allclose(
        hetsparse.spgemm(r, ap, keep=True).to_scipy().toarray(), want, rtol=1e-12)
    # Plain products return scipy as before; spmv and spmm read the kept copy.
    x = np.arange(12, dtype=np.float64)
    np.testing.assert_allclose(hetsparse.spmv(ap, x), (a @ p) @ x, rtol=1e-12)
    X = np.arange(36, dtype=np.float64).reshape(12, 3)
    np.testing.assert_allclose(hetsparse.spmm(ap, X, device=device), (a @ p) @ X, rtol=1e-12)
    # As a mask, over a semiring, on another device, in mxv.
    m = hetsparse.mxm(ka, kp, "plus_pair", keep=True, device=device)
    got = hetsparse.mxm(a, p, "min_plus", mask=m, device=device)
    structure = hetsparse.mxm(a, p, "plus_pair", device="cpu")  # scipy's a @ p drops zeros
    assert_same(("ok", got), ("ok", hetsparse.mxm(a, p, "min_plus", mask=structure, device="cpu")),
                "min_plus")
    np.testing.assert_allclose(
        hetsparse.spgemm(ap, sp.csr_matrix(p.T), device="cpu").toarray(),
        ((a @ p) @ p.T).toarray(), rtol=1e-12)
    u = sp.csr_matrix(np.ones((1, 30)))
    np.testing.assert_allclose(
        hetsparse.vxm(u, ap, "plus_times").toarray(), (u @ (a @ p)).toarray(), rtol=1e-12)
    # A CSC left operand still gives a CSR Matrix.
    np.testing.assert_allclose(
        hetsparse.spgemm(a.tocsc(), p, device=device, keep=True).to_scipy().toarray(),
        (a @ p).toarray(), rtol=1e-12)
    # Made again, pickled, converted: the host copy.
    assert isinstance(hetsparse.spgemm(sp.csr_array(a), p, keep=True).to_scipy(), sp.csr_array)
    back = pickle.loads(pickle.dumps(rap))
    assert back.device is None
    np.testing.assert_allclose(back.to_scipy().toarray(), want, rtol=1e-12)
    assert repr(rap).startswith("<hetsparse.Matrix 12×12")


def test_triangles_counted_where_the_graph_lies(device):
    # LAGraph's count: C⟨L⟩ = L·L over plus_pair, kept, then summed; only C's values come
    # back from a device.
    g = random(400, 400, 0.03, np.int64, 66)
    g = (g + g.T).tocsr()
    g.setdiag(0)
    g.eliminate_zeros()
    g.data[:] = 1
    lower = sp.tril(g, k=-1).tocsr()
    dense = lower.toarray()
    want = int(((dense @ dense) * dense).sum())
    assert want > 0
    kl = hetsparse.Matrix(lower, device=device)
    for _ in range(2):
        c = hetsparse.mxm(kl, kl, "plus_pair", mask=kl, keep=True)
        assert c.reduce_scalar("plus") == want
        assert c._native.in_host_memory == (not kept_on(device))
        assert c.nnz == hetsparse.mxm(kl, kl, "plus_pair", mask=kl).nnz


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64, np.int32, np.uint32, np.bool_, np.complex128],
                         ids=lambda d: np.dtype(d).name)
def test_reduce_scalar_is_graphblas_reduce(device, dtype):
    a = random(25, 20, 0.3, dtype, 67)
    a.data[::3] = a.data[::3] + 1  # fewer zeros, for times and land
    b = random(20, 18, 0.3, dtype, 68)
    kinds = [hetsparse.Matrix(a), hetsparse.Matrix(a, device=device)]
    c = hetsparse.mxm(a, b, "plus_times", device=device)
    kinds.append(hetsparse.mxm(a, b, "plus_times", device=device, keep=True))
    for m, values in [(kinds[0], sp.csr_matrix(a).data), (kinds[1], sp.csr_matrix(a).data),
                      (kinds[2], c.data)]:
        assert values.size > 0
        dt = np.dtype(dtype)
        for monoid in hetsparse.MONOIDS:
            if dt.kind == "c" and monoid in ("min", "max"):
                with pytest.raises(TypeError, match=monoid):
                    m.reduce_scalar(monoid)
                continue
            got = m.reduce_scalar(monoid)
            if monoid == "any":
                assert got in values
                continue
            if dt == np.bool_ and monoid in ("plus", "times"):
                monoid = "lor" if monoid == "plus" else "land"
            want = {
                "plus": lambda: values.sum(dtype=dt),
                "times": lambda: values.prod(dtype=dt),
                "min": lambda: values.min(),
                "max": lambda: values.max(),
                "lor": lambda: values.astype(bool).any(),
                "land": lambda: values.astype(bool).all(),
            }[monoid]()
            if dt.kind in "fc" and monoid in ("plus", "times"):
                np.testing.assert_allclose(got, want, rtol=1e-5)
            else:
                assert got == want, (monoid, got, want)
            assert np.asarray(got).dtype == (np.bool_ if monoid in ("lor", "land") else dt)
    # A kept result's values come alone: its structure stays on the device.
    assert kinds[2]._native.in_host_memory == (not kept_on(device))


def test_reduce_scalar_of_nothing_and_errors(device):
    empty = hetsparse.mxm(
        sp.csr_matrix((3, 4), dtype=np.int64), sp.csr_matrix((4, 5), dtype=np.int64),
        device=device, keep=True)
    assert empty.nnz == 0
    for monoid in hetsparse.MONOIDS:
        assert empty.reduce_scalar(monoid) is None
    assert empty.reduce_scalar("plus", allow_empty=False) == 0
    assert empty.reduce_scalar("times", allow_empty=False) == 1
    assert empty.reduce_scalar("min", allow_empty=False) == np.iinfo(np.int64).max
    assert empty.reduce_scalar("max", allow_empty=False) == np.iinfo(np.int64).min
    assert empty.reduce_scalar("lor", allow_empty=False) == False  # noqa: E712
    assert empty.reduce_scalar("land", allow_empty=False) == True  # noqa: E712
    f = hetsparse.Matrix(sp.csr_matrix((2, 2), dtype=np.float32))
    assert f.reduce_scalar("min", allow_empty=False) == np.inf
    with pytest.raises(ValueError, match="identity"):
        empty.reduce_scalar("any", allow_empty=False)
    with pytest.raises(ValueError, match="monoid"):
        empty.reduce_scalar("mean")
    with pytest.raises(ValueError, match="monoid"):
        empty.reduce_scalar(3)
