"""Errors as exceptions, devices, the GIL, Ctrl-C."""

import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import scipy.sparse as sp

import hetsparse as hs


def small(dtype=np.float64):
    return sp.csr_matrix(np.array([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]], dtype=dtype))


def test_shape_mismatch_is_a_value_error(device):
    with pytest.raises(ValueError, match="dimension mismatch"):
        hs.spgemm(small(), small(), device=device)
    with pytest.raises(ValueError, match="dimension mismatch"):
        hs.spmv(small(), np.ones(2), device=device)
    with pytest.raises(ValueError, match="dimension mismatch"):
        hs.spmm(small(), np.ones((2, 2)), device=device)
    with pytest.raises(ValueError, match="one-dimensional"):
        hs.spmv(small(), np.ones((3, 1)), device=device)


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.bool_, np.longdouble])
def test_unsupported_dtype_is_a_type_error(device, dtype):
    a = small(dtype)
    with pytest.raises(TypeError, match="float32, float64, complex64"):
        hs.spgemm(a, a.T.tocsr(), device=device)
    with pytest.raises(TypeError):
        hs.spmv(a, np.ones(3, dtype=dtype), device=device)


def test_not_sparse_is_a_type_error():
    with pytest.raises(TypeError, match="scipy.sparse"):
        hs.spgemm(np.eye(2), sp.eye(2))


def malformed(indptr, indices, data, shape):
    """A csr_matrix with arrays scipy would reject, installed after construction."""
    m = sp.csr_matrix(shape)
    m.indptr = np.asarray(indptr, dtype=np.int32)
    m.indices = np.asarray(indices, dtype=np.int32)
    m.data = np.asarray(data, dtype=np.float64)
    return m


@pytest.mark.parametrize(
    "indptr,indices,data,message",
    [
        ([0, 2, 1], [0, 1], [1.0, 2.0], "decreases"),
        ([0, 1, 3], [0, 1], [1.0, 2.0], "run from 0 to"),
        ([0, 1, 2], [0, 5], [1.0, 2.0], "out of bounds"),
        ([0, 1, 2], [0, -1], [1.0, 2.0], "out of bounds"),
        ([0, 1], [0], [1.0], "indptr has length"),
        ([0, 1, 2], [0, 1], [1.0], "lengths"),
    ],
)
def test_malformed_operands_are_value_errors(device, indptr, indices, data, message):
    a = malformed(indptr, indices, data, (2, 3))
    b = sp.identity(3, format="csr")
    with pytest.raises(ValueError, match=message):
        hs.spgemm(a, b, device=device)
    with pytest.raises(ValueError, match=message):
        hs.spmv(a, np.ones(3), device=device)


def test_malformed_coo_is_a_value_error(device):
    a = sp.coo_matrix((np.array([1.0]), (np.array([0]), np.array([0]))), shape=(2, 2))
    a.col = np.array([7], dtype=np.int32)
    with pytest.raises(ValueError, match="out of bounds"):
        hs.spgemm(a, sp.identity(2, format="csr"), device=device)


def test_bad_device_names():
    a = small()
    with pytest.raises(ValueError, match="not a device"):
        hs.spgemm(a, a.T, device="tpu")
    with pytest.raises(ValueError, match="numbered"):
        hs.spgemm(a, a.T, device="cuda:x")


def test_missing_cuda_is_a_device_error():
    a = small()
    if "cuda" in hs.FEATURES:
        with pytest.raises(hs.DeviceError):
            hs.spgemm(a, a.T, device="cuda:99")
    else:
        with pytest.raises(hs.DeviceError, match="without CUDA"):
            hs.spgemm(a, a.T, device="cuda")


def test_devices_lists_the_cpu():
    listed = hs.devices()
    assert any(d["id"] == "cpu" and d["used"] for d in listed), listed
    cpu = next(d for d in listed if d["id"] == "cpu")
    assert cpu["kind"] == "cpu" and cpu["compute_units"] >= 1
    assert {"float32", "float64", "complex64", "complex128"} <= set(cpu["dtypes"])
    for d in listed:
        assert d["used"] or d["reason"], d


def test_named_device_is_used(device):
    listed = hs.devices(device)
    assert any(d["used"] for d in listed), listed


def test_auto_and_all_compute(device):
    a, _ = hs.generate("uniform", 500, seed=3)
    for choice in ("auto", "all"):
        c = hs.spgemm(a, a, device=choice)
        assert abs(c - a @ a).max() <= 1e-12 * abs(a @ a).max()


def dense_operand(n, seed=0):
    rng = np.random.default_rng(seed)
    return sp.csr_matrix(rng.random((n, n)))


def count_ticks_during_product(n):
    """How often this thread ran (1 ms sleeps) while another multiplied an n×n dense
    operand by itself, and how long that took."""
    a = dense_operand(n)
    done = threading.Event()

    def work():
        hs.spgemm(a, a, device="cpu")
        done.set()

    worker = threading.Thread(target=work)
    start = time.perf_counter()
    worker.start()
    ticks = 0
    while not done.is_set():
        ticks += 1
        time.sleep(0.001)
    worker.join()
    return ticks, time.perf_counter() - start


def test_gil_is_released_while_computing():
    # Larger operands until the product takes a tenth of a second (machines differ).
    for n in (1500, 2500, 4000):
        ticks, elapsed = count_ticks_during_product(n)
        if elapsed >= 0.1:
            break
    assert elapsed >= 0.1, "the product was too quick to tell"
    # Holding the GIL for the product would stall this loop for its whole duration.
    assert ticks >= 20, (ticks, elapsed)


@pytest.fixture
def ctrl_c_raises():
    """Python's own SIGINT handler for the test's duration: a test runner started in the
    background by a non-interactive shell inherits SIGINT ignored, and Python then installs
    no handler, so Ctrl-C would never reach the product."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.mark.skipif(os.name != "posix", reason="needs POSIX signals")
def test_ctrl_c_cancels_a_long_product(ctrl_c_raises):
    a = dense_operand(4000)  # 128 G products: many seconds on a few cores
    timer = threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT))
    start = time.perf_counter()
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        hs.spgemm(a, a, device="cpu")
    elapsed = time.perf_counter() - start
    timer.join()
    assert elapsed < 5.0, f"cancellation took {elapsed:.1f} s"
    # The interpreter and the context still work.
    b = small()
    np.testing.assert_allclose(hs.spgemm(b, b.T).toarray(), (b @ b.T).toarray())


def test_product_that_cannot_fit_is_a_memory_error(device):
    # An outer product of 300 000 entries each way: 9·10^10 entries, about a terabyte.
    n = 300_000
    col = sp.csr_matrix((np.ones(n), (np.arange(n), np.zeros(n, dtype=np.int64))), shape=(n, 1))
    row = col.T.tocsr()
    start = time.perf_counter()
    with pytest.raises(MemoryError, match="host memory"):
        hs.spgemm(col, row, device=device)
    assert time.perf_counter() - start < 5.0


def test_what_contexts_learned_is_saved_at_exit(tmp_path):
    """The package's contexts live until the interpreter exits; the `atexit` hook that saves
    what they learned runs there without an error, and directly it says how many wrote."""
    script = (
        "import numpy as np, scipy.sparse as sp, hetsparse as hs\n"
        "a = sp.random(300, 300, density=0.02, format='csr', random_state=1)\n"
        "for _ in range(3):\n"
        "    hs.spgemm(a, a)\n"
        "    hs.spmv(a, np.ones(300))\n"
        "from hetsparse import _hetsparse\n"
        "assert isinstance(_hetsparse._save_calibrations(), int)\n"
    )
    env = dict(os.environ, HETSPARSE_CACHE_DIR=str(tmp_path))
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert "Error in atexit" not in done.stderr, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
