"""mxm, mxv and vxm over semirings with masks and accumulators, against scipy (plus_times) and
against a brute-force loop over the entries that spells out GraphBLAS's definitions."""

import numpy as np
import pytest
import scipy.sparse as sp

import hetsparse

# Semirings run where the device claims them; the CPU claims every one.
DEVICE = "cpu"

# (add, multiply(a, b, k)) of each semiring over stored entries; "any" semirings are checked
# for validity, not value (any product may be kept).
SEMIRINGS = {
    "plus_times": (lambda x, y: x + y, lambda a, b, k: a * b),
    "plus_pair": (lambda x, y: x + y, lambda a, b, k: 1.0),
    "plus_first": (lambda x, y: x + y, lambda a, b, k: a),
    "plus_second": (lambda x, y: x + y, lambda a, b, k: b),
    "min_plus": (min, lambda a, b, k: a + b),
    "max_plus": (max, lambda a, b, k: a + b),
    "min_first": (min, lambda a, b, k: a),
    "min_second": (min, lambda a, b, k: b),
    "max_times": (max, lambda a, b, k: a * b),
    "max_min": (max, lambda a, b, k: min(a, b)),
    "lor_land": (
        lambda x, y: float(bool(x) or bool(y)),
        lambda a, b, k: float(bool(a) and bool(b)),
    ),
    "any_pair": (lambda x, y: y, lambda a, b, k: 1.0),
    "any_secondi": (lambda x, y: y, lambda a, b, k: float(k)),
}
ANY = ("any_pair", "any_secondi")


def entries(m):
    """A sparse matrix's stored entries as {(i, j): value}, explicit zeros included."""
    m = sp.coo_matrix(m)
    return {(int(i), int(j)): float(v) for i, j, v in zip(m.row, m.col, m.data)}


def brute_mxm(a, b, semiring):
    """{(i, j): value} of A ⊕.⊗ B, an entry wherever a product lands."""
    add, mul = SEMIRINGS[semiring]
    rows = {}
    for (k, j), bv in sorted(entries(b).items()):
        rows.setdefault(k, []).append((j, bv))
    out = {}
    for (i, k), av in sorted(entries(a).items()):
        for j, bv in rows.get(k, []):
            p = mul(av, bv, k)
            out[(i, j)] = add(out[(i, j)], p) if (i, j) in out else p
    return out


def brute_write_back(old, t, admits, accum, replace):
    """GraphBLAS's C⟨M, replace⟩ = accum(C, T) over {(i, j): value} dicts."""
    ops = {
        None: None,
        "plus": lambda x, y: x + y,
        "times": lambda x, y: x * y,
        "min": min,
        "max": max,
        "second": lambda x, y: y,
    }
    op = ops[accum]
    out = {}
    for pos in set(old) | set(t):
        if admits(pos):
            if op is None:
                if pos in t:
                    out[pos] = t[pos]
            elif pos in old and pos in t:
                out[pos] = op(old[pos], t[pos])
            else:
                out[pos] = old.get(pos, t.get(pos))
        elif not replace and pos in old:
            out[pos] = old[pos]
    return out


def random_matrix(rng, nrows, ncols, density, zeros=True):
    m = sp.random(nrows, ncols, density=density, format="csr", random_state=rng)
    m.data = np.round(rng.uniform(-4, 4, m.nnz), 1)
    if zeros and m.nnz:
        m.data[::5] = 0.0
    return m


def admits_of(mask, structural, complement):
    if mask is None:
        return lambda pos: True
    stored = entries(mask)
    allowed = set(stored) if structural else {p for p, v in stored.items() if v != 0}
    return lambda pos: (pos in allowed) != complement


def check_result(got, want, semiring, a, b):
    got = entries(got)
    assert set(got) == set(want), "pattern"
    ea, eb = entries(a), entries(b)
    for (i, j), v in got.items():
        if semiring == "any_pair":
            assert v == 1.0
        elif semiring == "any_secondi":
            assert (i, int(v)) in ea and (int(v), j) in eb, f"k = {v} for ({i}, {j})"
        else:
            assert v == pytest.approx(want[(i, j)], rel=1e-12, abs=1e-12), (i, j)


def test_plus_times_is_scipys_product():
    rng = np.random.default_rng(1)
    a, b = random_matrix(rng, 40, 30, 0.2), random_matrix(rng, 30, 50, 0.2)
    c = hetsparse.mxm(a, b, device=DEVICE)
    assert isinstance(c, sp.csr_matrix)
    np.testing.assert_allclose(c.toarray(), (a @ b).toarray(), rtol=1e-12, atol=1e-12)
    y = hetsparse.mxv(a, np.arange(30.0), device=DEVICE)
    np.testing.assert_allclose(y.toarray().ravel(), a @ np.arange(30.0), rtol=1e-12, atol=1e-12)
    z = hetsparse.vxm(np.arange(40.0), a, device=DEVICE)
    np.testing.assert_allclose(z.toarray().ravel(), np.arange(40.0) @ a.toarray(), rtol=1e-12)
    arr = hetsparse.mxm(sp.csr_array(a), b, device=DEVICE)
    assert isinstance(arr, sp.csr_array)


@pytest.mark.parametrize("semiring", sorted(SEMIRINGS))
def test_every_semiring_against_a_loop(semiring):
    rng = np.random.default_rng(abs(hash(semiring)) % 2**32)
    a, b = random_matrix(rng, 25, 20, 0.25), random_matrix(rng, 20, 30, 0.25)
    c = hetsparse.mxm(a, b, semiring, device=DEVICE)
    check_result(c, brute_mxm(a, b, semiring), semiring, a, b)


@pytest.mark.parametrize("structural", [True, False])
@pytest.mark.parametrize("complement", [False, True])
@pytest.mark.parametrize("replace", [False, True])
@pytest.mark.parametrize("accum", [None, "plus", "min", "second"])
def test_masks_and_accumulators(structural, complement, replace, accum):
    rng = np.random.default_rng(7)
    a, b = random_matrix(rng, 20, 15, 0.3), random_matrix(rng, 15, 18, 0.3)
    mask = random_matrix(rng, 20, 18, 0.4)
    old = random_matrix(rng, 20, 18, 0.3, zeros=False)
    for semiring in ("min_plus", "plus_times"):
        got = hetsparse.mxm(
            a,
            b,
            semiring,
            mask=mask,
            structural=structural,
            complement=complement,
            replace=replace,
            accum=accum,
            out=old,
            device=DEVICE,
        )
        admits = admits_of(mask, structural, complement)
        t = {p: v for p, v in brute_mxm(a, b, semiring).items() if admits(p)}
        want = brute_write_back(entries(old), t, admits, accum, replace)
        got = entries(got)
        assert set(got) == set(want)
        for p, v in got.items():
            assert v == pytest.approx(want[p], rel=1e-12, abs=1e-12), p


@pytest.mark.parametrize("semiring", ["plus_times", "min_plus", "max_min", "any_secondi"])
@pytest.mark.parametrize("density", [0.0, 0.1, 1.0])
def test_mxv_and_vxm_against_a_loop(semiring, density):
    rng = np.random.default_rng(11)
    a = random_matrix(rng, 60, 45, 0.1)
    for complement in (False, True):
        # mxv: w = A u, a column; u given as a column, the mask as a row.
        u = random_matrix(rng, 45, 1, density)
        mask = random_matrix(rng, 1, 60, 0.5)
        got = hetsparse.mxv(a, u, semiring, mask=mask, complement=complement, device=DEVICE)
        assert got.shape == (60, 1)
        admits = admits_of(mask, True, complement)
        want = {p: v for p, v in brute_mxm(a, u, semiring).items() if admits((0, p[0]))}
        check_result(got, want, semiring, a, u)
        # vxm: wᵀ = uᵀ A, a row.
        u = random_matrix(rng, 1, 60, density)
        mask = random_matrix(rng, 1, 45, 0.5)
        got = hetsparse.vxm(u, a, semiring, mask=mask, complement=complement, device=DEVICE)
        assert got.shape == (1, 45)
        admits = admits_of(mask, True, complement)
        want = {p: v for p, v in brute_mxm(u, a, semiring).items() if admits(p)}
        check_result(got, want, semiring, u, a)


def test_a_bfs_step_gives_parents():
    # Edges 0 → 1, 0 → 2, 1 → 3, 2 → 3; vertices 0 and 1 visited, frontier {1}.
    a = sp.csr_matrix(([1.0] * 4, ([0, 0, 1, 2], [1, 2, 3, 3])), shape=(4, 4))
    frontier = sp.csr_matrix(([1.0], ([0], [1])), shape=(1, 4))
    visited = sp.csr_matrix(([1.0, 1.0], ([0, 0], [0, 1])), shape=(1, 4))
    w = hetsparse.vxm(
        frontier, a, "any_secondi", mask=visited, complement=True, replace=True, device=DEVICE
    )
    assert entries(w) == {(0, 3): 1.0}


@pytest.mark.parametrize("length", [45, 130])
def test_dense_masks_mask_as_their_sparse_equals(device, length):
    """A NumPy mask (packed into bits, or booleans read in place) admits what the same
    vector stored sparse admits: structurally every position, by value the non-zero ones;
    complemented or not, on a length that is and one that is not a multiple of 64; booleans
    strided (packed) and booleans whose bytes are not 0 or 1 (any non-zero byte is true)."""
    rng = np.random.default_rng(5)
    a = random_matrix(rng, 60, length, 0.1)
    u = random_matrix(rng, 1, 60, 0.3)
    values = rng.integers(0, 3, length).astype(np.float64)
    sparse_full = sp.csr_matrix(
        (values, np.arange(length), np.array([0, length])), shape=(1, length)
    )
    odd_bytes = (values.astype(np.uint8) * 2).view(np.bool_)
    strided = np.repeat(values != 0, 2)[::2]
    assert not strided.flags.c_contiguous
    for dense in (values, values != 0, odd_bytes, strided):
        for structural in (True, False):
            for complement in (False, True):
                kwargs = dict(structural=structural, complement=complement, device=device)
                got = hetsparse.vxm(u, a, "any_secondi", mask=dense, **kwargs)
                want = hetsparse.vxm(u, a, "any_secondi", mask=sparse_full, **kwargs)
                assert got.shape == want.shape == (1, length)
                np.testing.assert_array_equal(got.indices, want.indices)
                admits = admits_of(sparse_full, structural, complement)
                brute = {p for p in brute_mxm(u, a, "any_secondi") if admits(p)}
                assert {(0, int(j)) for j in got.indices} == brute
                got = hetsparse.mxv(a.T.tocsr(), u.T, "plus_times", mask=dense, **kwargs)
                want = hetsparse.mxv(a.T.tocsr(), u.T, "plus_times", mask=sparse_full, **kwargs)
                assert entries(got) == pytest.approx(entries(want))
    with pytest.raises(ValueError, match="length"):
        hetsparse.vxm(u, a, mask=np.ones(length + 1, dtype=bool), device=device)
    with pytest.raises(ValueError, match="one-dimensional"):
        hetsparse.vxm(u, a, mask=np.ones((1, length), dtype=bool), device=device)


def test_bad_names_and_types_are_exceptions():
    a = sp.random(5, 5, density=0.5, format="csr", random_state=1)
    with pytest.raises(ValueError, match="min_times"):
        hetsparse.mxm(a, a, "min_times", device=DEVICE)
    with pytest.raises(ValueError, match="accum"):
        hetsparse.mxm(a, a, accum="minus", device=DEVICE)
    with pytest.raises(TypeError):
        hetsparse.mxm(a, a, 3, device=DEVICE)
    with pytest.raises(ValueError, match="shape"):
        hetsparse.mxm(a, a, mask=sp.random(4, 5, density=0.5, format="csr"), device=DEVICE)
    with pytest.raises(ValueError):
        hetsparse.vxm(np.ones(4), a, device=DEVICE)
    c = a.astype(np.complex128)
    with pytest.raises(TypeError, match="min_plus"):
        hetsparse.mxm(c, c, "min_plus", device=DEVICE)
    with pytest.raises(TypeError, match="min_plus"):
        hetsparse.vxm(np.ones(5), c, "min_plus", device=DEVICE)
    # plus_one is plus_pair (a 1 per product of stored entries), in int64 as the operands:
    # (1, 1) has one product, A(1, 1)·A(1, 1), A(0, 1) not being stored.
    i = sp.csr_matrix(np.array([[1, 0], [2, 3]], dtype=np.int64))
    got = hetsparse.mxm(i, i, "plus_one", device=DEVICE)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got.toarray(), [[1, 0], [2, 1]])
    with pytest.raises(TypeError, match="any_secondi"):
        hetsparse.mxm(i.astype(bool), i.astype(bool), "any_secondi", device=DEVICE)


def integer_matrix(rng, nrows, ncols, density, dtype):
    """Small integers (never overflowing in these products), explicit zeros among them."""
    m = sp.random(nrows, ncols, density=density, format="csr", random_state=rng)
    low = 0 if np.dtype(dtype).kind == "u" else -4
    m.data = rng.integers(low, 5, m.nnz).astype(np.float64)
    return m.astype(dtype)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint32, np.uint64])
@pytest.mark.parametrize("semiring", sorted(SEMIRINGS))
def test_integer_dtypes_compute_in_their_type(dtype, semiring):
    rng = np.random.default_rng(abs(hash((semiring, np.dtype(dtype).name))) % 2**32)
    a, b = integer_matrix(rng, 20, 15, 0.3, dtype), integer_matrix(rng, 15, 25, 0.3, dtype)
    c = hetsparse.mxm(a, b, semiring, device=DEVICE)
    assert c.dtype == dtype
    check_result(c, brute_mxm(a, b, semiring), semiring, a, b)
    u = rng.integers(0, 5, 15).astype(dtype)
    w = hetsparse.mxv(a, u, semiring, device=DEVICE)
    assert w.dtype == dtype
    # Every position of a dense u is stored, its zeros too.
    column = sp.csr_matrix((u, (np.arange(15), np.zeros(15, dtype=np.int64))), shape=(15, 1))
    check_result(w, brute_mxm(a, column, semiring), semiring, a, column)


def test_integers_wrap_and_bounds_are_the_identities():
    # GraphBLAS's integer arithmetic wraps: 2^31 - 1 + 1 is -2^31 in int32, 2 · (2^64 - 1) is
    # 2^64 - 2 in uint64.
    big = np.iinfo(np.int32).max
    a = sp.csr_matrix(np.array([[big, 1]], dtype=np.int32))
    b = sp.csr_matrix(np.array([[1], [1]], dtype=np.int32))
    assert hetsparse.mxm(a, b, device=DEVICE).toarray()[0, 0] == np.iinfo(np.int32).min
    top = np.iinfo(np.uint64).max
    a = sp.csr_matrix(np.array([[top]], dtype=np.uint64))
    two = sp.csr_matrix(np.array([[2]], dtype=np.uint64))
    assert hetsparse.mxm(a, two, device=DEVICE).toarray()[0, 0] == top - 1
    # min_plus over int64 where no product is smaller than the bound: the bound itself stays
    # out of the result, which holds only entries where products land.
    x = sp.csr_matrix(np.array([[5, 0], [0, 0]], dtype=np.int64))
    got = hetsparse.mxm(x, x, "min_plus", device=DEVICE)
    assert entries(got) == {(0, 0): 10.0}
    # int8 and uint16 operands compute in int32 and uint32.
    assert hetsparse.mxm(x.astype(np.int8), x.astype(np.int8), device=DEVICE).dtype == np.int32
    assert hetsparse.mxm(x.astype(np.uint16), x.astype(np.uint16), device=DEVICE).dtype == np.uint32


def test_bool_is_or_and():
    # Over bool, + is or and × is and (plus_times is lor_land), as GraphBLAS's bool semirings;
    # counting needs an integer dtype.
    a = sp.csr_matrix(np.array([[1, 1, 0], [0, 1, 1], [0, 0, 0]], dtype=bool))
    c = hetsparse.mxm(a, a, device=DEVICE)
    assert c.dtype == np.bool_
    np.testing.assert_array_equal(c.toarray(), (a.astype(np.int64) @ a.astype(np.int64)).toarray() > 0)
    counts = hetsparse.mxm(a.astype(np.int64), a.astype(np.int64), "plus_pair", device=DEVICE)
    assert counts.toarray()[0, 1] == 2
    # A NumPy u stores every position, its falses too: the pattern reaches row 1's columns as
    # well (python-graphblas gives the same); a sparse u holds only the true one.
    w = hetsparse.vxm(np.array([True, False, False]), a, "any_pair", device=DEVICE)
    assert w.dtype == np.bool_ and entries(w) == {(0, 0): 1.0, (0, 1): 1.0, (0, 2): 1.0}
    u = sp.csr_matrix(np.array([[True, False, False]]))
    w = hetsparse.vxm(u, a, "any_pair", device=DEVICE)
    assert w.dtype == np.bool_ and entries(w) == {(0, 0): 1.0, (0, 1): 1.0}


def test_every_listed_name_is_accepted():
    a = sp.random(6, 6, density=0.4, format="csr", random_state=2)
    assert set(hetsparse.SEMIRINGS) == set(SEMIRINGS)
    for name in hetsparse.SEMIRINGS:
        hetsparse.mxm(a, a, name, device=DEVICE)
