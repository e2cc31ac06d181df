"""DLPack both ways: memory shared with PyTorch and NumPy, the versioned and
legacy capsules, and capsules dlrt must refuse without crashing or leaking."""

import ctypes
import random
import warnings

import numpy as np
import pytest
import torch
import torch.utils.dlpack

import dlrt
from dlrt import dlpack as D
from dlrt._lib import lib
from conftest import live_allocations

api = ctypes.pythonapi
TORCH = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16,
         "i32": torch.int32, "u8": torch.uint8}


def host_ptr(t):
    return lib.dlrt_buffer_host_ptr(t.buffer)


def managed_of(capsule):
    """(the managed tensor, versioned) a capsule holds."""
    versioned = api.PyCapsule_IsValid(ctypes.py_object(capsule), b"dltensor_versioned") == 1
    name = b"dltensor_versioned" if versioned else b"dltensor"
    ptr = D._api.PyCapsule_GetPointer(capsule, name)
    kind = D.DLManagedTensorVersioned if versioned else D.DLManagedTensor
    return kind.from_address(ptr), versioned


def test_torch_shares_memory_both_ways():
    t = dlrt.zeros((4, 5), device="cpu")
    x = torch.from_dlpack(t)
    assert x.data_ptr() == host_ptr(t) and x.shape == (4, 5) and x.dtype == torch.float32
    x[1, 2] = 3.0  # a write through PyTorch ...
    assert t.numpy()[1, 2] == 3.0  # ... is seen through dlrt
    t.fill_(7.0)  # and one through dlrt is seen through PyTorch
    assert bool((x == 7.0).all())


def test_torch_tensor_outlives_the_dlrt_tensor(cpu):
    base = live_allocations(cpu)
    t = dlrt.full(1000, 2.0, device=cpu)
    x = torch.from_dlpack(t)
    del t
    assert live_allocations(cpu) == base + 1  # the export holds the buffer
    assert float(x.sum()) == 2000.0
    del x
    assert live_allocations(cpu) == base


def test_from_torch_is_zero_copy():
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    u = dlrt.from_dlpack(x)
    assert host_ptr(u) == x.data_ptr() and u.shape == (3, 4) and not u.copied
    x[0, 0] = -1.0
    assert u.numpy()[0, 0] == -1.0
    u.fill_(2.0)
    assert bool((x == 2.0).all())
    del x  # the storage stays alive while u holds it
    assert (u.numpy() == 2.0).all()


def test_numpy_shares_memory_both_ways():
    t = dlrt.zeros(6, "i32", device="cpu")
    a = np.from_dlpack(t)  # NumPy 1.x makes these read-only
    assert a.ctypes.data == host_ptr(t)
    t.fill_(5)
    assert a.tolist() == [5] * 6
    b = np.arange(6, dtype=np.float32).reshape(2, 3)
    u = dlrt.from_dlpack(b)
    assert host_ptr(u) == b.ctypes.data
    b[1, 2] = 42.0
    assert u.numpy()[1, 2] == 42.0
    u.fill_(1.5)
    assert (b == 1.5).all()


@pytest.mark.parametrize("dtype", sorted(TORCH))
def test_torch_dtypes(dtype):
    x = torch.from_dlpack(dlrt.full((2, 3), 1, dtype, device="cpu"))
    assert x.dtype == TORCH[dtype] and bool((x == 1).all())
    back = dlrt.from_dlpack(x)
    assert back.dtype == dtype and back.shape == (2, 3)


def test_versioned_capsule_when_asked_legacy_otherwise():
    t = dlrt.zeros((2, 3), "f16", device="cpu")
    cap = t.__dlpack__(max_version=(1, 0))
    assert api.PyCapsule_IsValid(ctypes.py_object(cap), b"dltensor_versioned") == 1
    m, versioned = managed_of(cap)
    assert versioned and (m.version.major, m.version.minor) == (1, 0) and m.flags == 0
    dt = m.dl_tensor
    assert (dt.device.device_type, dt.device.device_id, dt.ndim) == (1, 0, 2)
    assert (dt.dtype.code, dt.dtype.bits, dt.dtype.lanes) == (2, 16, 1)
    assert [dt.shape[i] for i in range(2)] == [2, 3] and [dt.strides[i] for i in range(2)] == [3, 1]
    assert dt.data == host_ptr(t) and dt.byte_offset == 0
    legacy = t.__dlpack__()
    assert api.PyCapsule_IsValid(ctypes.py_object(legacy), b"dltensor") == 1
    assert t.__dlpack__(max_version=(0, 8)) is not None  # older than 1.0: legacy
    own = dlrt.from_dlpack(t)  # dlrt as its own consumer takes the versioned one
    assert host_ptr(own) == host_ptr(t) and own.dtype == "f16"


def test_unconsumed_capsules_free_their_tensor(cpu):
    base = live_allocations(cpu)
    t = dlrt.zeros(100, device=cpu)
    caps = [t.__dlpack__(), t.__dlpack__(max_version=(1, 0))]
    del t
    assert live_allocations(cpu) == base + 1
    del caps  # never consumed: the capsules' destructor frees them
    assert live_allocations(cpu) == base


def test_a_refusing_consumer_keeps_its_exception(cpu):
    base = live_allocations(cpu)
    with pytest.raises(RuntimeError, match="Unsupported dtype"):
        np.from_dlpack(dlrt.zeros(3, "bf16", device=cpu))  # NumPy has no bfloat16
    assert live_allocations(cpu) == base


def test_consumed_capsule_is_refused():
    t = dlrt.zeros(4, device="cpu")
    cap = t.__dlpack__()
    torch.utils.dlpack.from_dlpack(cap)
    with pytest.raises(BufferError, match="already consumed"):
        dlrt.from_dlpack(cap)


# Corruptions of a real export's fields, each a capsule dlrt must refuse.
def _strides(m, values):
    m._keep = (ctypes.c_int64 * len(values))(*values)
    m.dl_tensor.strides = m._keep


def _dtype(m, code, bits):
    m.dl_tensor.dtype.code, m.dl_tensor.dtype.bits = code, bits


BAD = {
    "float64": lambda m: _dtype(m, 2, 64),
    "int64": lambda m: _dtype(m, 0, 64),
    "bool": lambda m: _dtype(m, 6, 8),
    "complex": lambda m: setattr(m.dl_tensor.dtype, "code", 5),
    "two lanes": lambda m: setattr(m.dl_tensor.dtype, "lanes", 2),
    "transposed strides": lambda m: _strides(m, [1, 4]),
    "sliced strides": lambda m: _strides(m, [8, 2]),
    "a CUDA device": lambda m: setattr(m.dl_tensor.device, "device_type", 2),
    "an OpenCL device": lambda m: setattr(m.dl_tensor.device, "device_type", 4),
    "an unknown device": lambda m: setattr(m.dl_tensor.device, "device_type", 99),
    "nine dimensions": lambda m: setattr(m.dl_tensor, "ndim", 9),
    "negative dimensions": lambda m: setattr(m.dl_tensor, "ndim", -1),
    "a negative size": lambda m: m.dl_tensor.shape.__setitem__(0, -3),
    "no element": lambda m: m.dl_tensor.shape.__setitem__(1, 0),
    "NULL data": lambda m: setattr(m.dl_tensor, "data", None),
    "misaligned data": lambda m: setattr(m.dl_tensor, "byte_offset", 1),
}


@pytest.mark.parametrize("versioned", [0, 1])
@pytest.mark.parametrize("defect", sorted(BAD))
def test_bad_capsules_raise_and_free(cpu, defect, versioned):
    base = live_allocations(cpu)
    t = dlrt.zeros((3, 4), device=cpu)
    cap = t.__dlpack__(max_version=(1, 0) if versioned else None)
    m, _ = managed_of(cap)
    BAD[defect](m)
    with pytest.raises(BufferError):
        dlrt.from_dlpack(cap)
    assert api.PyCapsule_IsValid(ctypes.py_object(cap), b"dltensor_versioned" if versioned
                                 else b"dltensor") == 1  # refused: left to its producer
    del t, cap, m
    assert live_allocations(cpu) == base


def test_versions_and_foreign_objects(cpu):
    cap = dlrt.zeros(4, device=cpu).__dlpack__(max_version=(1, 0))
    managed_of(cap)[0].version.major = 2
    with pytest.raises(BufferError, match="major version"):
        dlrt.from_dlpack(cap)
    keep = ctypes.c_int()
    other = D._api.PyCapsule_New(ctypes.addressof(keep), b"not_dlpack", None)
    with pytest.raises(BufferError, match="not a DLPack capsule"):
        dlrt.from_dlpack(other)

    class Liar:
        def __dlpack__(self, **kwargs):
            return 42
    with pytest.raises(BufferError, match="not a PyCapsule"):
        dlrt.from_dlpack(Liar())
    with pytest.raises(TypeError, match="no __dlpack__"):
        dlrt.from_dlpack([1, 2, 3])


def test_fuzzed_capsules_raise_or_import(cpu):
    """Random corruptions of every field: BufferError or a good import, never
    a crash; nothing is left allocated afterwards."""
    rng = random.Random(23)
    base = live_allocations(cpu)
    imported = refused = 0
    for _ in range(400):
        t = dlrt.zeros((2, 3, 4), rng.choice(["f32", "f16", "i32", "u8"]), device=cpu)
        cap = t.__dlpack__(max_version=(1, 0) if rng.random() < 0.5 else None)
        m, versioned = managed_of(cap)
        dt = m.dl_tensor
        for _ in range(rng.randint(0, 3)):
            field = rng.choice(["code", "bits", "lanes", "ndim", "shape", "strides", "device",
                                "offset", "version"])
            if field in ("code", "bits", "lanes"):
                setattr(dt.dtype, field, rng.choice([0, 1, 2, 4, 5, 6, 8, 16, 32, 64, 255]))
            elif field == "ndim":
                dt.ndim = rng.randint(-2, 12)
            elif field == "shape":
                dt.shape[rng.randint(0, 2)] = rng.randint(-1, 2)  # never past the buffer
            elif field == "strides":
                _strides(m, [rng.randint(-2, 13) for _ in range(8)]) if rng.random() < 0.8 \
                    else setattr(dt, "strides", None)
            elif field == "device":
                dt.device.device_type = rng.choice([1, 2, 3, 4, 7, 13, 99])
            elif field == "offset":
                dt.byte_offset = rng.choice([0, 1, 2, 3, 4, 8])
            elif versioned:
                m.version.major = rng.choice([0, 1, 2])
        try:
            u = dlrt.from_dlpack(cap)
            imported += 1
            # A producer may lie about its size: dlrt reads nothing here.
            assert u.dtype in ("f32", "f16", "bf16", "i32", "u8") and u.numel >= 1
            del u
        except BufferError:
            refused += 1
        del t, cap, m, dt
    assert imported > 0 and refused > 0
    assert live_allocations(cpu) == base


def opencl():
    return [d for d in dlrt.devices() if d.backend == "opencl"][:1]


@pytest.mark.parametrize("dev", opencl(), ids=lambda d: d.spec)
def test_opencl_memory_goes_as_a_copy_and_says_so(dev):
    t = dlrt.full((2, 2), 3.0, device=dev)
    assert t.__dlpack_device__() == (1, 0)  # where a consumer finds the (copied) data
    with pytest.warns(dlrt.CopyWarning):
        x = torch.from_dlpack(t)
    assert bool((x == 3.0).all())
    with pytest.warns(dlrt.CopyWarning):
        cap = t.__dlpack__(max_version=(1, 0))
    assert managed_of(cap)[0].flags & D.FLAG_IS_COPIED
    with pytest.raises(BufferError, match="copy=False"):
        t.__dlpack__(max_version=(1, 0), copy=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        own = t.__dlpack__(max_version=(1, 0), dl_device=(4, dev.index))  # the cl_mem itself
    m, _ = managed_of(own)
    assert m.dl_tensor.device.device_type == 4 and not m.flags & D.FLAG_IS_COPIED
    with pytest.warns(dlrt.CopyWarning):
        back = dlrt.from_dlpack(t)
    assert back.copied and back.device.spec == "cpu:0" and (back.numpy() == 3.0).all()


@pytest.mark.parametrize("dev", opencl(), ids=lambda d: d.spec)
def test_from_dlpack_onto_another_device(dev):
    a = np.arange(8, dtype=np.float32)
    with pytest.warns(dlrt.CopyWarning):
        t = dlrt.from_dlpack(a, device=dev)
    assert t.copied and t.device == dev and (t.numpy() == a).all()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert dlrt.from_dlpack(a, device=dev, copy=True).copied
    with pytest.raises(BufferError, match="copy=False"):
        dlrt.from_dlpack(a, device=dev, copy=False)


def test_read_only_tensors():
    t = dlrt.zeros(4, device="cpu")
    cap = t.__dlpack__(max_version=(1, 0))
    managed_of(cap)[0].flags |= D.FLAG_READ_ONLY
    u = dlrt.from_dlpack(cap)
    assert u.readonly
    with pytest.raises(ValueError, match="read-only"):
        u.fill_(1.0)
    with pytest.raises(BufferError, match="read-only"):
        u.__dlpack__()
    again = u.__dlpack__(max_version=(1, 0))  # held: its tensor lives as long
    assert managed_of(again)[0].flags & D.FLAG_READ_ONLY


REFUSED = {
    "a transposed torch tensor": lambda: torch.arange(12.0).reshape(3, 4).t(),
    "a sliced torch tensor": lambda: torch.arange(12.0)[::3],
    "torch float64": lambda: torch.zeros(3, dtype=torch.float64),
    "torch complex": lambda: torch.zeros(3, dtype=torch.complex64),
    "torch int64": lambda: torch.zeros(3, dtype=torch.int64),
    "a sliced numpy array": lambda: np.arange(12, dtype=np.float32).reshape(3, 4)[:, 1:],
    "numpy complex": lambda: np.zeros(3, dtype=np.complex64),
    "an empty numpy array": lambda: np.zeros((0, 3), dtype=np.float32),
}


@pytest.mark.parametrize("what", sorted(REFUSED))
def test_real_producers_refused(what):
    with pytest.raises(BufferError):
        dlrt.from_dlpack(REFUSED[what]())
