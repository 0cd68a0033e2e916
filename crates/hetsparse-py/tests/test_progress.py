"""spgemm's progress callback and memory limit."""

import time

import numpy as np
import pytest
import scipy.sparse as sp

import hetsparse as hs


def products(a, b):
    """Intermediate products of ``a @ b``: for each entry ``a[i, k]``, the entries of row k of b."""
    a, b = sp.csr_matrix(a), sp.csr_matrix(b)
    return int(np.diff(b.indptr)[a.indices].sum())


def dense_operand(n, seed=0):
    rng = np.random.default_rng(seed)
    return sp.csr_matrix(rng.random((n, n)))


class Calls:
    """Records what a progress callback was given."""

    def __init__(self):
        self.seen = []

    def __call__(self, done, planned):
        assert isinstance(done, int) and isinstance(planned, int)
        self.seen.append((done, planned))

    def check(self):
        """Every call sane, the last one the whole product; returns the planned products."""
        assert self.seen, "progress was never called"
        dones = [d for d, _ in self.seen]
        assert dones == sorted(dones), self.seen
        assert all(0 <= d <= p for d, p in self.seen), self.seen
        assert len(set(self.seen)) == len(self.seen), "a call repeated the one before"
        done, planned = self.seen[-1]
        assert done == planned > 0, self.seen
        return planned


def test_progress_ends_with_the_whole_product(device):
    a = sp.random(3000, 3000, density=0.004, format="csr", random_state=3)
    calls = Calls()
    c = hs.spgemm(a, a, device=device, progress=calls)
    assert abs(c - a @ a).max() <= 1e-12 * abs(a @ a).max()
    calls.check()


def test_progress_of_a_small_product_is_called_once_at_the_end():
    a = sp.csr_matrix(np.array([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]]))
    calls = Calls()
    hs.spgemm(a, a.T, device="cpu", progress=calls)
    assert calls.seen == [(3, 3)] == [(products(a, a.T),) * 2]


def test_progress_moves_while_the_cpu_computes():
    # Larger operands until the product takes several of the callback's 50 ms periods
    # (machines differ).
    for n in (700, 1400, 2800):
        a = dense_operand(n)
        calls = Calls()
        start = time.perf_counter()
        c = hs.spgemm(a, a, device="cpu", progress=calls)
        elapsed = time.perf_counter() - start
        if elapsed >= 0.3:
            break
    assert elapsed >= 0.3, "the product was too quick to tell"
    dense = a.toarray()
    np.testing.assert_allclose(c.toarray(), dense @ dense, rtol=1e-10)
    assert calls.check() == products(a, a)
    assert any(0 < d < p for d, p in calls.seen), calls.seen


def test_an_exception_from_progress_cancels_the_product():
    class Enough(Exception):
        pass

    def stop(done, planned):
        raise Enough(f"{done} of {planned}")

    a = dense_operand(4000)  # 128 G products: many seconds on a few cores
    start = time.perf_counter()
    with pytest.raises(Enough):
        hs.spgemm(a, a, device="cpu", progress=stop)
    elapsed = time.perf_counter() - start
    assert elapsed < 5.0, f"cancellation took {elapsed:.1f} s"


def test_progress_must_be_callable():
    a = dense_operand(3)
    with pytest.raises(TypeError, match="progress"):
        hs.spgemm(a, a, progress=5)


def test_memory_limit_refuses_a_result_that_cannot_fit(device):
    a = sp.csr_matrix(np.array([[1.0, 0.0, 2.0]]))
    # C has at least an entry of 12 bytes (a column index and a float64).
    with pytest.raises(MemoryError, match="host memory"):
        hs.spgemm(a, a.T, device=device, memory_limit=10)
    c = hs.spgemm(a, a.T, device=device, memory_limit=1000)
    np.testing.assert_allclose(c.toarray(), (a @ a.T).toarray())


def test_memory_limit_must_be_bytes():
    a = dense_operand(3)
    with pytest.raises(ValueError, match="memory_limit"):
        hs.spgemm(a, a, memory_limit=-1)
    with pytest.raises(TypeError):
        hs.spgemm(a, a, memory_limit=1.5)


def test_cpu_product_that_might_not_fit_runs_in_chunks_held_to_the_limit():
    a = dense_operand(700)  # 343 M products, 490 000 entries in C (5.9 MB)
    calls = Calls()
    # An entry per product (4.1 GB) does not fit in 100 MB, C does: computed in chunks.
    c = hs.spgemm(a, a, device="cpu", progress=calls, memory_limit=100_000_000)
    np.testing.assert_allclose(c.toarray(), (a @ a).toarray(), rtol=1e-12)
    # The whole product is planned before the first chunk, not chunk by chunk.
    assert {p for _, p in calls.seen} == {products(a, a)}
    assert calls.check() == products(a, a)
    # C fits in 8 MB, C and its chunks beside it while it is assembled do not.
    with pytest.raises(MemoryError, match="chunks"):
        hs.spgemm(a, a, device="cpu", memory_limit=8_000_000)
