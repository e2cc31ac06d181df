"""dlrt.Tensor's contents, copies between devices and dtypes."""

import numpy as np
import pytest

import dlrt

NUMPY = {"f32": np.float32, "f16": np.float16, "i32": np.int32, "u8": np.uint8}


def other_devices():
    return [d.spec for d in dlrt.devices() if d.backend != "cpu"]


@pytest.mark.parametrize("dtype", ["f32", "f16", "i32", "u8"])
def test_round_trip(dtype):
    a = (np.arange(24) % 200).astype(NUMPY[dtype]).reshape(2, 3, 4)
    t = dlrt.tensor(a, device="cpu")
    assert t.shape == (2, 3, 4) and t.dtype == dtype and t.nbytes == a.nbytes
    assert np.array_equal(t.numpy(), a)
    assert t.tobytes() == a.tobytes()


def test_bf16_widens_to_float32():
    t = dlrt.empty(3, "bf16", device="cpu")
    bits = np.array([0x3F80, 0xC040, 0x0000], dtype=np.uint16)  # 1, -3, 0
    t.copy_(bits.tobytes())
    assert t.numpy().tolist() == [1.0, -3.0, 0.0]


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16", "i32", "u8"])
def test_fill_and_zeros(dtype):
    t = dlrt.full((5, 7), 3, dtype, device="cpu")
    assert (t.numpy() == 3).all()
    assert (dlrt.zeros((5, 7), dtype).numpy() == 0).all()


@pytest.mark.parametrize("spec", other_devices())
def test_copies_between_devices(spec):
    a = np.random.default_rng(1).standard_normal((33, 17)).astype(np.float32)
    t = dlrt.tensor(a, device=spec)
    assert t.device.spec == spec and np.array_equal(t.numpy(), a)
    back = t.to("cpu")
    assert back.device.spec == "cpu:0" and np.array_equal(back.numpy(), a)
    assert np.array_equal(t.clone().numpy(), a)
    assert np.array_equal(dlrt.full(3, 2.5, device=spec).numpy(), [2.5, 2.5, 2.5])


def test_bad_shapes_and_dtypes():
    with pytest.raises(ValueError):
        dlrt.empty((0, 3))
    with pytest.raises(ValueError):
        dlrt.empty((2,) * 9)
    with pytest.raises(ValueError):
        dlrt.empty(3, "f64")
    with pytest.raises(ValueError):
        dlrt.tensor(np.zeros(3)).copy_(np.zeros(4))
    assert dlrt.empty(3, "float16").dtype == "f16" and dlrt.empty(3, np.int32).dtype == "i32"
