"""hetsparse's products against scipy's own, on every device under test (see conftest.py)."""

import numpy as np
import pytest
import scipy.sparse as sp

import hetsparse as hs

CLASSES = ["stencil3d", "banded", "powerlaw", "uniform", "road", "skewed", "lp", "dense"]
DTYPES = [np.float32, np.float64, np.complex64, np.complex128]
FORMATS = ["csr", "csc", "coo"]


def tolerance(dtype):
    return 1e-4 if np.dtype(dtype) in (np.dtype(np.float32), np.dtype(np.complex64)) else 1e-11


def random_sparse(m, n, density, dtype, seed, fmt="csr", array=False):
    rng = np.random.default_rng(seed)
    a = sp.random(m, n, density=density, format="coo", random_state=rng, dtype=np.float64)
    data = a.data.astype(dtype)
    if np.issubdtype(np.dtype(dtype), np.complexfloating):
        data = data + 1j * rng.standard_normal(a.nnz).astype(data.real.dtype)
    ctor = sp.coo_array if array else sp.coo_matrix
    return ctor((data, (a.row, a.col)), shape=(m, n)).asformat(fmt)


def check_sparse(c, reference, bound):
    """``c`` is what scipy's product ``reference`` is: same class, shape, dtype, values."""
    assert type(c) is type(reference)
    assert c.shape == reference.shape
    assert c.dtype == reference.dtype
    c.check_format(full_check=True)
    # Sorted indices, as the result says it has.
    resorted = c.copy()
    resorted.has_sorted_indices = False
    resorted.sort_indices()
    np.testing.assert_array_equal(resorted.indices, c.indices)
    diff = abs(c - reference)
    err = diff.max() if diff.nnz else 0.0
    assert err <= bound, f"max error {err} above {bound}"


def bound_for(a, b, dtype):
    scale = (abs(a) @ abs(b)).max() if min(a.shape + b.shape) > 0 else 0.0
    return tolerance(dtype) * max(1.0, float(scale))


@pytest.mark.parametrize("cls", CLASSES)
def test_spgemm_matches_scipy_on_every_generator_class(device, cls):
    a, b = hs.generate(cls, 3000, seed=7)
    if b.shape == a.shape and (b != a).nnz == 0:
        b = a
    c = hs.spgemm(a, b, device=device)
    check_sparse(c, a @ b, bound_for(a, b, np.float64))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("array", [False, True], ids=["matrix", "array"])
def test_spgemm_every_dtype(device, dtype, array):
    a = random_sparse(120, 90, 0.05, dtype, 1, array=array)
    b = random_sparse(90, 70, 0.08, dtype, 2, array=array)
    c = hs.spgemm(a, b, device=device)
    check_sparse(c, a @ b, bound_for(a, b, dtype))


@pytest.mark.parametrize("fa", FORMATS)
@pytest.mark.parametrize("fb", FORMATS)
@pytest.mark.parametrize("array", [False, True], ids=["matrix", "array"])
def test_spgemm_formats_give_scipys_kind(device, fa, fb, array):
    a = random_sparse(60, 50, 0.1, np.float64, 3, fmt=fa, array=array)
    b = random_sparse(50, 40, 0.1, np.float64, 4, fmt=fb, array=array)
    check_sparse(hs.spgemm(a, b, device=device), a @ b, bound_for(a, b, np.float64))


@pytest.mark.parametrize("ia", [np.int32, np.int64])
@pytest.mark.parametrize("ib", [np.int32, np.int64])
def test_spgemm_index_dtypes(device, ia, ib):
    a = random_sparse(80, 60, 0.1, np.float64, 5)
    b = random_sparse(60, 70, 0.1, np.float64, 6)
    reference = a @ b
    # scipy's constructor narrows int64 indices that fit int32: set them afterwards.
    a.indices, a.indptr = a.indices.astype(ia), a.indptr.astype(ia)
    b.indices, b.indptr = b.indices.astype(ib), b.indptr.astype(ib)
    assert a.indices.dtype == ia and b.indices.dtype == ib
    check_sparse(hs.spgemm(a, b, device=device), reference, bound_for(a, b, np.float64))


def test_spgemm_mixed_dtypes_promote_like_scipy(device):
    a = random_sparse(40, 30, 0.2, np.float32, 7)
    b = random_sparse(30, 20, 0.2, np.complex128, 8)
    c = hs.spgemm(a, b, device=device)
    assert c.dtype == np.complex128
    check_sparse(c, a @ b, bound_for(a, b, np.float32))


@pytest.mark.parametrize(
    "m,k,n", [(0, 0, 0), (0, 5, 3), (3, 0, 4), (4, 5, 0), (1, 1, 1), (1, 7, 1), (7, 1, 7), (3, 200, 2)]
)
def test_spgemm_edge_shapes(device, m, k, n):
    a = random_sparse(m, k, 0.5, np.float64, 9)
    b = random_sparse(k, n, 0.5, np.float64, 10)
    check_sparse(hs.spgemm(a, b, device=device), a @ b, bound_for(a, b, np.float64))


@pytest.mark.parametrize("fmt", ["csr", "csc"])
@pytest.mark.parametrize("array", [False, True], ids=["matrix", "array"])
@pytest.mark.parametrize("direct", [True, False], ids=["attributes set", "constructor"])
def test_spgemm_results_are_whole_scipy_objects(device, fmt, array, direct, monkeypatch):
    """The result, whether its attributes were set directly (where scipy's constructor would
    make the same object) or the constructor made it, holds what the constructor gives and
    works like any scipy matrix."""
    if not direct:
        monkeypatch.setattr(hs, "_RESULT_FIELDS", {})
    a = random_sparse(70, 50, 0.1, np.float64, 21, fmt=fmt, array=array)
    b = random_sparse(50, 60, 0.1, np.float64, 22, fmt=fmt, array=array)
    c = hs.spgemm(a, b, device=device)
    made = type(c)((c.data, c.indices, c.indptr), shape=c.shape)
    assert made.has_sorted_indices and made.has_canonical_format
    assert set(vars(c)) == set(vars(made))
    assert c.shape == made.shape and all(type(d) is int for d in c.shape)
    assert c.maxprint == made.maxprint
    assert c.indptr.dtype == made.indptr.dtype and c.indices.dtype == made.indices.dtype
    check_sparse(c, a @ b, bound_for(a, b, np.float64))
    # Operations that read the attributes.
    reference = a @ b
    gram = c.T @ c
    assert type(gram) is type(reference.T @ reference)
    assert abs(gram - reference.T @ reference).max() <= 1e-9 * max(1.0, abs(gram).max())
    np.testing.assert_allclose((c[3:9] @ np.ones(60)), (a @ b)[3:9] @ np.ones(60))
    assert repr(c) and str(c) is not None


def test_spgemm_empty_operands(device):
    a = sp.csr_matrix((50, 40))
    b = random_sparse(40, 30, 0.2, np.float64, 11)
    c = hs.spgemm(a, b, device=device)
    check_sparse(c, a @ b, 0.0)
    assert c.nnz == 0


def test_spgemm_keeps_explicit_zeros_meaningful(device):
    # Stored zeros in the operands and values that cancel: scipy drops both from its result,
    # hetsparse keeps the structure; the values agree.
    a = sp.csr_matrix(
        (np.array([1.0, 0.0, 2.0, -2.0]), np.array([0, 1, 0, 1]), np.array([0, 2, 4])), shape=(2, 2)
    )
    b = sp.csr_matrix(
        (np.array([1.0, 1.0, 0.0]), np.array([0, 0, 1]), np.array([0, 1, 3])), shape=(2, 2)
    )
    c = hs.spgemm(a, b, device=device)
    np.testing.assert_allclose(c.toarray(), (a @ b).toarray())
    assert c.nnz >= (a @ b).nnz


def test_spgemm_unsorted_and_duplicate_indices(device):
    # Row 0 unsorted, row 1 with a duplicate (scipy sums duplicates).
    data = np.array([3.0, 1.0, 2.0, 4.0, 5.0, 6.0])
    indices = np.array([2, 0, 1, 1, 1, 0], dtype=np.int32)
    indptr = np.array([0, 3, 5, 6], dtype=np.int32)
    a = sp.csr_matrix((data, indices, indptr), shape=(3, 3))
    assert not a.has_canonical_format
    dense = a.toarray()
    c = hs.spgemm(a, a, device=device)
    np.testing.assert_allclose(c.toarray(), dense @ dense)
    # The operand is left as it was (no in-place sorting).
    np.testing.assert_array_equal(a.indices, indices)


def test_spgemm_coo_with_duplicates(device):
    a = sp.coo_matrix((np.array([1.0, 2.0, 3.0]), (np.array([0, 0, 1]), np.array([1, 1, 0]))), shape=(2, 2))
    c = hs.spgemm(a, a, device=device)
    np.testing.assert_allclose(c.toarray(), a.toarray() @ a.toarray())


def test_spgemm_other_formats_are_converted(device):
    a = random_sparse(30, 30, 0.2, np.float64, 12).tobsr(blocksize=(3, 3))
    b = random_sparse(30, 30, 0.2, np.float64, 13).todia()
    c = hs.spgemm(a, b, device=device)
    np.testing.assert_allclose(c.toarray(), (a @ b).toarray(), atol=1e-12)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_spmv_matches_scipy(device, fmt, dtype):
    a = random_sparse(150, 120, 0.05, dtype, 14, fmt=fmt)
    x = np.linspace(-1.0, 1.0, 120).astype(dtype)
    y = hs.spmv(a, x, device=device)
    reference = a @ x
    assert isinstance(y, np.ndarray) and y.shape == reference.shape and y.dtype == reference.dtype
    scale = max(1.0, float((abs(a) @ abs(x)).max()))
    np.testing.assert_allclose(y, reference, rtol=0, atol=tolerance(dtype) * scale)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("order", ["C", "F"])
def test_spmm_matches_scipy(device, fmt, dtype, order):
    a = random_sparse(100, 80, 0.05, dtype, 15, fmt=fmt, array=True)
    x = np.asarray(np.arange(80 * 7).reshape(80, 7) % 13 - 6.0, dtype=dtype, order=order)
    y = hs.spmm(a, x, device=device)
    reference = a @ x
    assert isinstance(y, np.ndarray) and y.shape == reference.shape and y.dtype == reference.dtype
    scale = max(1.0, float((abs(a) @ abs(x)).max()))
    np.testing.assert_allclose(y, reference, rtol=0, atol=tolerance(dtype) * scale)


def test_spmm_strided_operand(device):
    a = random_sparse(40, 30, 0.2, np.float64, 16)
    x = np.arange(30 * 10, dtype=np.float64).reshape(30, 10)[:, ::2]
    np.testing.assert_allclose(hs.spmm(a, x, device=device), a @ x, rtol=1e-12)


def test_spmv_and_spmm_edge_shapes(device):
    a = sp.csr_matrix((0, 5))
    assert hs.spmv(a, np.ones(5), device=device).shape == (0,)
    b = sp.csr_matrix((4, 0))
    np.testing.assert_array_equal(hs.spmv(b, np.ones(0), device=device), np.zeros(4))
    np.testing.assert_array_equal(hs.spmm(b, np.ones((0, 3)), device=device), np.zeros((4, 3)))
    one = sp.csr_matrix(np.array([[2.5]]))
    np.testing.assert_array_equal(hs.spmv(one, np.array([2.0]), device=device), [5.0])
