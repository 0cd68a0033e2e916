"""Canonical CSR and CSC operands are read in place (NumPy's memory, no copy) where the dtypes
allow it; the rest is converted as before. ``_hetsparse._conversions()`` (internal, for these
tests) counts how operands were read."""

import sys

import numpy as np
import pytest
import scipy.sparse as sp

import hetsparse as hs
from hetsparse import _hetsparse

from test_products import DTYPES, bound_for, check_sparse, random_sparse


def conversions_during(fn):
    """``fn()``'s result and how many operands it read in place (offsets, indices, values) or
    converted."""
    before = np.array(_hetsparse._conversions())
    out = fn()
    return out, tuple(int(d) for d in np.array(_hetsparse._conversions()) - before)


def with_index_dtype(m, dtype):
    # scipy's constructor narrows int64 indices that fit int32: set them afterwards.
    m.indices, m.indptr = m.indices.astype(dtype), m.indptr.astype(dtype)
    assert m.indices.dtype == dtype and m.indptr.dtype == dtype
    return m


def snapshot(m):
    """The arrays of ``m`` (copies), their data pointers, and their reference counts."""
    arrays = (m.indptr, m.indices, m.data)
    return (
        [a.copy() for a in arrays],
        [a.ctypes.data for a in arrays],
        [sys.getrefcount(a) for a in arrays],
    )


def assert_untouched(m, snap):
    copies, pointers, refcounts = snap
    arrays = (m.indptr, m.indices, m.data)
    for array, copy in zip(arrays, copies):
        np.testing.assert_array_equal(array, copy)
        assert array.flags.writeable
    del array  # the loop's name holds a reference
    assert [a.ctypes.data for a in arrays] == pointers
    # Every reference taken during the call was given back.
    assert [sys.getrefcount(a) for a in arrays] == refcounts


@pytest.mark.parametrize("index", [np.int32, np.int64])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fmt", ["csr", "csc"])
def test_canonical_operands_are_read_in_place(device, index, dtype, fmt):
    a = with_index_dtype(random_sparse(120, 90, 0.05, dtype, 21, fmt=fmt), index)
    b = with_index_dtype(random_sparse(90, 70, 0.08, dtype, 22, fmt=fmt), index)
    assert a.has_canonical_format and b.has_canonical_format
    reference = a @ b
    snaps = snapshot(a), snapshot(b)
    c, (offsets, indices, values, converted) = conversions_during(
        lambda: hs.spgemm(a, b, device=device)
    )
    check_sparse(c, reference, bound_for(a, b, dtype))
    # int64 offsets are read in place (int32 ones are widened: one per row); int32 indices
    # are read in place (int64 ones are narrowed); values always.
    assert (offsets, indices, values, converted) == (
        2 if index == np.int64 else 0,
        2 if index == np.int32 else 0,
        2,
        0,
    )
    assert_untouched(a, snaps[0])
    assert_untouched(b, snaps[1])
    # The result's arrays are its own, not an operand's.
    for m in (a, b):
        assert not np.shares_memory(c.data, m.data)


def test_one_operand_twice_is_read_once(device):
    a = random_sparse(200, 200, 0.03, np.float64, 23)
    snap = snapshot(a)
    c, counts = conversions_during(lambda: hs.spgemm(a, a, device=device))
    check_sparse(c, a @ a, bound_for(a, a, np.float64))
    assert counts == (0, 1, 1, 0)
    assert_untouched(a, snap)


def test_larger_operands_are_read_in_place_off_the_calling_thread(device):
    # Enough entries that the product runs on a worker thread without the GIL, where the
    # matrices reading NumPy's memory are dropped.
    a, b = hs.generate("banded", 20000, seed=3)
    a = with_index_dtype(a, np.int64)
    snap = snapshot(a)
    c, counts = conversions_during(lambda: hs.spgemm(a, b, device=device))
    check_sparse(c, a @ b, bound_for(a, b, np.float64))
    assert counts == (1, 1, 2, 0)
    assert_untouched(a, snap)


@pytest.mark.parametrize("index", [np.int32, np.int64])
def test_non_canonical_operands_are_converted(device, index):
    # Row 0 unsorted, row 1 with a duplicate (scipy sums duplicates).
    data = np.array([3.0, 1.0, 2.0, 4.0, 5.0, 6.0])
    indices = np.array([2, 0, 1, 1, 1, 0], dtype=index)
    indptr = np.array([0, 3, 5, 6], dtype=index)
    a = sp.csr_matrix((data, indices, indptr), shape=(3, 3))
    a = with_index_dtype(a, index)
    assert not a.has_canonical_format
    b = random_sparse(3, 4, 0.5, np.float64, 24)
    snap = snapshot(a)
    c, (_, _, _, converted) = conversions_during(lambda: hs.spgemm(a, b, device=device))
    np.testing.assert_allclose(c.toarray(), a.toarray() @ b.toarray())
    assert converted == 1
    assert_untouched(a, snap)


def test_spmv_and_spmm_read_operands_in_place(device):
    a = random_sparse(150, 120, 0.05, np.float64, 25)
    x = np.linspace(-1.0, 1.0, 120)
    snap = snapshot(a)
    y, counts = conversions_during(lambda: hs.spmv(a, x, device=device))
    np.testing.assert_allclose(y, a @ x, rtol=0, atol=1e-12)
    assert counts == (0, 1, 1, 0)
    csc = a.tocsc()
    z, counts = conversions_during(lambda: hs.spmm(csc, np.ones((120, 3)), device=device))
    np.testing.assert_allclose(z, csc @ np.ones((120, 3)), rtol=0, atol=1e-12)
    assert counts == (0, 1, 1, 0)
    assert_untouched(a, snap)


def test_a_result_fed_back_is_read_in_place(device):
    # hetsparse's own results are canonical: chaining products reads them without copies.
    a = random_sparse(80, 80, 0.05, np.float64, 26)
    c = hs.spgemm(a, a, device=device)
    d, counts = conversions_during(lambda: hs.spgemm(c, c, device=device))
    check_sparse(d, c @ c, bound_for(c, c, np.float64))
    assert counts == (0, 1, 1, 0)


def test_malformed_int64_operands_are_still_value_errors(device):
    m = sp.csr_matrix((2, 3))
    m.indptr = np.array([0, 1, 2], dtype=np.int64)
    m.indices = np.array([0, -1], dtype=np.int64)
    m.data = np.array([1.0, 2.0])
    with pytest.raises(ValueError, match="out of bounds"):
        hs.spgemm(m, sp.identity(3, format="csr"), device=device)
    m.indices = np.array([0, 1], dtype=np.int64)
    m.indptr = np.array([0, -1, 2], dtype=np.int64)
    with pytest.raises(ValueError, match="decreases"):
        hs.spgemm(m, sp.identity(3, format="csr"), device=device)


def test_unaligned_arrays_are_copied_first(device):
    a = random_sparse(50, 40, 0.1, np.float64, 27)
    # The values at an odd address: NumPy allows it, hetsparse reads only aligned memory.
    raw = np.zeros(a.nnz * 8 + 1, dtype=np.uint8)
    unaligned = np.frombuffer(raw.data, dtype=np.float64, count=a.nnz, offset=1)
    assert not unaligned.flags.aligned
    unaligned[:] = a.data
    a.data = unaligned
    b = random_sparse(40, 30, 0.1, np.float64, 28)
    check_sparse(hs.spgemm(a, b, device=device), a @ b, bound_for(a, b, np.float64))
    x = np.frombuffer(np.zeros(40 * 8 + 1, dtype=np.uint8).data, dtype=np.float64, count=40, offset=1)
    np.testing.assert_allclose(hs.spmv(a, x, device=device), a @ x)
