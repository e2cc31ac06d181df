"""dlrt.Tensor: a device buffer with a shape and a dtype, shared with NumPy and
PyTorch through DLPack.

    t = dlrt.zeros((2, 3), "f32", device="cpu")
    a = numpy.from_dlpack(t)       # the same memory: a write shows in both
    u = dlrt.from_dlpack(a)        # and back, still without a copy
    g = dlrt.tensor(a, device="opencl:0")   # a copy onto another device

Memory other frameworks cannot address (OpenCL's) is handed over as a copy
in host memory, and the copy is said: a dlrt.CopyWarning, the DLPack
IS_COPIED flag, and .copied on a dlrt.Tensor made that way.
"""

import ctypes
import warnings
import weakref

from . import dlpack as D
from ._lib import lib
from .device import device as _open_device
from .errors import check

DTYPES = {"f32": 0, "f16": 1, "bf16": 2, "i32": 3, "u8": 4}  # dlrt_dtype
_ALIASES = {"float32": "f32", "fp32": "f32", "float16": "f16", "fp16": "f16", "half": "f16",
            "bfloat16": "bf16", "int32": "i32", "uint8": "u8"}
ITEMSIZE = {name: lib.dlrt_dtype_size(code) for name, code in DTYPES.items()}
_NUMPY = {"f32": "float32", "f16": "float16", "i32": "int32", "u8": "uint8"}


class CopyWarning(UserWarning):
    """Data went through a copy where zero-copy sharing was asked for."""


def dtype_name(dtype):
    """"f32", "f16", "bf16", "i32" or "u8" for any of their spellings
    (numpy and torch dtypes included)."""
    text = dtype.__name__ if isinstance(dtype, type) else str(dtype).replace("torch.", "")
    text = _ALIASES.get(text, text)
    if text not in DTYPES:
        raise ValueError("dtype %r: dlrt holds f32, f16, bf16, i32 and u8" % (dtype,))
    return text


def _release(buf, imported):
    """The finalizer of a Tensor: the handle first, then the producer's memory."""
    lib.dlrt_buffer_free(buf)
    if imported is not None:
        imported.release()


class Tensor:
    """shape, dtype ("f32", "f16", "bf16", "i32", "u8") and device; its
    contents start undefined (dlrt.zeros, dlrt.tensor fill them)."""

    def __init__(self, shape, dtype="f32", device=None):
        shape = (int(shape),) if isinstance(shape, int) else tuple(int(n) for n in shape)
        self._setup(shape, dtype_name(dtype), _open_device(device))
        buf = ctypes.c_void_p()
        check(lib.dlrt_buffer_alloc(self.device._handle, self.nbytes, None, ctypes.byref(buf)))
        self._own(buf.value, None)

    def _setup(self, shape, dtype, dev):
        if len(shape) > 8 or any(n < 0 for n in shape):
            raise ValueError("shape %s: 0 to 8 dimensions of sizes >= 0" % (shape,))
        numel = 1
        for n in shape:
            numel *= n
        if numel == 0:
            raise ValueError("shape %s holds no element: a dlrt.Tensor holds one or more"
                             % (shape,))
        self.shape, self.dtype, self.device = shape, dtype, dev
        self.numel, self.nbytes = numel, numel * ITEMSIZE[dtype]
        self.readonly = False
        self.copied = False  # made by copying data that was asked for without one

    def _own(self, buf, imported):
        self._buf = buf
        self._finalizer = weakref.finalize(self, _release, buf, imported)

    @classmethod
    def _wrap(cls, imported, dev):
        """A Tensor over memory taken from a DLPack producer (no copy)."""
        t = cls.__new__(cls)
        t._setup(imported.shape, imported.dtype, dev)
        buf = ctypes.c_void_p()
        try:
            check(lib.dlrt_buffer_wrap_host(dev._handle, imported.data, t.nbytes,
                                            ctypes.byref(buf)))
        except BaseException:
            imported.release()
            raise
        t._own(buf.value, imported)
        t.readonly, t.copied = imported.readonly, imported.copied
        return t

    ndim = property(lambda self: len(self.shape))
    buffer = property(lambda self: self._buf, doc="the dlrt_buffer_t pointer (an int)")

    def __repr__(self):
        return "dlrt.Tensor(shape=%s, dtype=%r, device=%r)" % (self.shape, self.dtype,
                                                               self.device.spec)

    def __len__(self):
        return self.shape[0] if self.shape else 1

    # ------------------------------------------------------------ contents

    def _writable(self):
        if self.readonly:
            raise ValueError("this dlrt.Tensor is read-only (its DLPack producer said so)")

    def copy_(self, src):
        """Copies host data in: a NumPy array (converted to this dtype), or any
        C-contiguous buffer of exactly nbytes bytes. Returns self."""
        self._writable()
        try:
            import numpy as np
        except ImportError:
            np = None
        if np is not None and not isinstance(src, (bytes, bytearray, memoryview)):
            if self.dtype == "bf16":
                raise TypeError("NumPy has no bfloat16: give the bytes (uint16 bit patterns)")
            arr = np.ascontiguousarray(src, dtype=_NUMPY[self.dtype])
            if arr.size != self.numel:
                raise ValueError("%d elements into a tensor of %d" % (arr.size, self.numel))
            check(lib.dlrt_copy_h2d(self._buf, 0, arr.ctypes.data, self.nbytes, None))
            return self
        view = memoryview(src).cast("B")
        if view.nbytes != self.nbytes:
            raise ValueError("%d bytes into a tensor of %d" % (view.nbytes, self.nbytes))
        staged = (ctypes.c_char * self.nbytes).from_buffer_copy(view)
        check(lib.dlrt_copy_h2d(self._buf, 0, staged, self.nbytes, None))
        return self

    def tobytes(self):
        """The contents, copied to the host."""
        out = ctypes.create_string_buffer(self.nbytes)
        check(lib.dlrt_copy_d2h(out, self._buf, 0, self.nbytes, None))
        return out.raw

    def numpy(self):
        """A NumPy copy (bf16 widened to float32); numpy.from_dlpack shares instead."""
        import numpy as np
        raw = np.frombuffer(self.tobytes(), dtype="uint16" if self.dtype == "bf16"
                            else _NUMPY[self.dtype])
        if self.dtype == "bf16":
            raw = (raw.astype("uint32") << 16).view("float32")
        return raw.reshape(self.shape)

    def fill_(self, value):
        """Every element set to `value` (floats through the fill kernel). Returns self."""
        self._writable()
        if self.dtype in ("f32", "f16", "bf16"):
            stream = lib.dlrt_device_default_stream(self.device._handle)
            check(lib.dlrt_elementwise(stream, 0, DTYPES[self.dtype], self.numel, float(value),
                                       self._buf, 0, None, 0, None, 0))  # DLRT_EW_FILL
            check(lib.dlrt_stream_synchronize(stream))
        elif value == 0:
            check(lib.dlrt_memset(self._buf, 0, 0, self.nbytes, None))
        else:
            import numpy as np
            self.copy_(np.full(self.shape, value, dtype=_NUMPY[self.dtype]))
        return self

    def to(self, device):
        """A copy on `device` (a spec or a Device): any backend to any other."""
        dev = _open_device(device)
        out = Tensor(self.shape, self.dtype, dev)
        check(lib.dlrt_copy_d2d(out._buf, 0, self._buf, 0, self.nbytes, None))
        return out

    def clone(self):
        """A copy on the same device."""
        return self.to(self.device)

    def cpu(self):
        """A copy on the cpu device (self when it is there already)."""
        return self if self.device.backend == "cpu" else self.to("cpu")

    # ------------------------------------------------------------ DLPack

    def __dlpack_device__(self):
        """Where a consumer finds the data: the device's own DLPack device, but
        the CPU's (1, 0) for OpenCL memory, which no consumer addresses: its
        capsule holds a host copy (dl_device=(4, i) asks for the cl_mem)."""
        kind, index = self.device.dlpack_device()
        return (D.CPU, 0) if kind == D.OPENCL else (kind, index)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """A DLPack capsule of this tensor: "dltensor_versioned" (DLPack 1.0)
        when the consumer gives max_version >= (1, 0), else the legacy
        "dltensor". Host memory is shared, never copied unless copy=True.
        Memory that is not the host's goes to dl_device (1, 0) (the default
        for OpenCL, see __dlpack_device__) as a host copy, which copy=False
        refuses and copy=None warns of (CopyWarning); the versioned capsule
        says it in its IS_COPIED flag."""
        versioned = max_version is not None and tuple(max_version)[0] >= 1
        own = self.device.dlpack_device()
        want = tuple(dl_device) if dl_device is not None else self.__dlpack_device__()
        if stream is not None and own[0] != D.CUDA:
            raise BufferError("stream=%r: a %s tensor takes stream=None" % (stream, self.device))
        src, flags = self, 0
        if want != own:
            if want != (D.CPU, 0):
                raise BufferError("dl_device %s: a tensor on %s goes to %s or, copied, to the "
                                  "CPU (1, 0)" % (want, self.device.spec, own))
            if copy is False:
                raise BufferError("%s memory is not host memory: the CPU gets it through a "
                                  "copy only, and copy=False forbids one" % self.device.spec)
            if copy is None:
                warnings.warn("%s memory is not host memory: handing over a host copy"
                              % self.device.spec, CopyWarning, stacklevel=2)
            src, flags = self.to("cpu"), D.FLAG_IS_COPIED
        elif copy:
            src, flags = self.clone(), D.FLAG_IS_COPIED
        if src.readonly:
            if not versioned:
                raise BufferError("a read-only tensor: the legacy DLPack capsule cannot say so "
                                  "(ask with max_version=(1, 0))")
            flags |= D.FLAG_READ_ONLY
        src.device.synchronize()  # queued work done before another framework reads it
        return D.export(src._buf, 0, DTYPES[src.dtype], src.shape, versioned,
                        flags if versioned else 0)


def empty(shape, dtype="f32", device=None):
    """A tensor whose contents are undefined."""
    return Tensor(shape, dtype, device)


def zeros(shape, dtype="f32", device=None):
    """A tensor of zeros."""
    t = Tensor(shape, dtype, device)
    check(lib.dlrt_memset(t._buf, 0, 0, t.nbytes, None))
    return t


def full(shape, value, dtype="f32", device=None):
    """A tensor of `value`."""
    return Tensor(shape, dtype, device).fill_(value)


def tensor(data, dtype=None, device=None):
    """A copy of array-like `data` (NumPy needed for lists) on `device`."""
    import numpy as np
    arr = np.asarray(data)
    name = dtype_name(dtype if dtype is not None else arr.dtype)
    if name == "bf16":
        raise TypeError("NumPy has no bfloat16: make an f32 tensor and cast it in a graph")
    arr = np.ascontiguousarray(arr, dtype=_NUMPY[name])
    return Tensor(arr.shape, name, device).copy_(arr)


def from_dlpack(obj, device=None, copy=None):
    """A dlrt.Tensor of a DLPack producer's data (a NumPy array, a PyTorch
    tensor, a dlrt.Tensor, or a capsule): host memory is used in place, on
    the cpu device, and never copied unless asked. device= another dlrt
    device (OpenCL, CUDA) copies it there; so does a producer whose memory
    is not the host's, asked for a host copy. The copies are said: .copied
    is True and, unless copy=True asked for one, a CopyWarning is issued.
    copy=False refuses any copy. BufferError for what dlrt cannot take (a
    dtype other than f32, f16, bf16, i32 and u8, strides that are not
    compact, a consumed capsule)."""
    cpu = _open_device("cpu")
    target = _open_device(device) if device is not None else None
    if copy is False and target is not None and target != cpu:
        raise BufferError("device=%s is not host memory: the data gets there through a copy "
                          "only, and copy=False forbids one" % target.spec)
    dl_device = None
    if hasattr(obj, "__dlpack_device__"):
        kind, _ = obj.__dlpack_device__()
        if kind not in (D.CPU, D.CUDA_HOST):
            if copy is False:
                raise BufferError("%s memory is not host memory and copy=False forbids a copy"
                                  % D.DEVICE_NAMES.get(kind, kind))
            dl_device = (D.CPU, 0)
    with warnings.catch_warnings():
        # The producer's own copy warning is ours to give, once, below.
        warnings.simplefilter("ignore", CopyWarning)
        capsule = D.request(obj, dl_device, copy if dl_device else None)
    t = Tensor._wrap(D.take(capsule, ITEMSIZE), cpu)
    if copy and not t.copied:
        t = t.clone()
        t.copied = True
    if target is not None and target != cpu:
        t = t.to(target)
        t.copied = True
    if t.copied and not copy:
        warnings.warn("the data was copied (%s): not shared with its producer"
                      % ("onto " + target.spec if target is not None and target != cpu
                         else "from device memory"), CopyWarning, stacklevel=2)
    return t
