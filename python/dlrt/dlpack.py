"""DLPack (github.com/dmlc/dlpack): the structures, the capsules, and how a
dlrt.Tensor is handed to another framework and taken from one.

Export: dlrt_dlpack_export (C) makes the managed tensor, holding a reference
to the buffer that its C deleter drops; the capsule's destructor is C too
(dlrt_dlpack_capsule_destructor), so that a capsule a consumer refused is
freed without running Python code while the consumer's exception is pending.
Import: the producer's capsule is checked field by field (device, dtype,
strides, version) before anything is taken; only then is it renamed
"used_dltensor[_versioned]" and its memory wrapped as a cpu buffer
(dlrt_buffer_wrap_host), whose owner calls the producer's deleter once the
dlrt.Tensor is gone.
"""

import ctypes
from ctypes import (POINTER, c_char_p, c_int, c_int32, c_int64, c_uint8, c_uint16, c_uint32,
                    c_uint64, c_void_p, py_object)

from ._lib import lib, capsule_destructor, IS_VALID_FN, GET_POINTER_FN
from .errors import check


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", c_int32), ("device_id", c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", c_void_p), ("device", DLDevice), ("ndim", c_int32),
                ("dtype", DLDataType), ("shape", POINTER(c_int64)),
                ("strides", POINTER(c_int64)), ("byte_offset", c_uint64)]


class DLManagedTensor(ctypes.Structure):
    pass


DELETER = ctypes.CFUNCTYPE(None, c_void_p)
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", c_void_p),
                            ("deleter", c_void_p)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", c_uint32), ("minor", c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("version", DLPackVersion), ("manager_ctx", c_void_p), ("deleter", c_void_p),
                ("flags", c_uint64), ("dl_tensor", DLTensor)]


# DLDeviceType
CPU, CUDA, CUDA_HOST, OPENCL = 1, 2, 3, 4
DEVICE_NAMES = {1: "CPU", 2: "CUDA", 3: "CUDAHost", 4: "OpenCL", 7: "Vulkan", 8: "Metal",
                9: "VPI", 10: "ROCM", 11: "ROCMHost", 13: "CUDAManaged", 14: "OneAPI"}
# Flags of DLManagedTensorVersioned
FLAG_READ_ONLY, FLAG_IS_COPIED = 1, 2
VERSION = (1, 0)  # what dlrt makes

# dlrt dtype name -> (DLDataTypeCode, bits)
DTYPES = {"f32": (2, 32), "f16": (2, 16), "bf16": (4, 16), "i32": (0, 32), "u8": (1, 8)}
_BY_CODE = {v: k for k, v in DTYPES.items()}

# The C API of capsules. PyCapsule_New takes our C destructor's address.
_api = ctypes.pythonapi
_api.PyCapsule_New.restype = py_object
_api.PyCapsule_New.argtypes = [c_void_p, c_void_p, c_void_p]
_api.PyCapsule_IsValid.restype = c_int
_api.PyCapsule_IsValid.argtypes = [py_object, c_char_p]
_api.PyCapsule_GetPointer.restype = c_void_p
_api.PyCapsule_GetPointer.argtypes = [py_object, c_char_p]
_api.PyCapsule_GetName.restype = c_char_p
_api.PyCapsule_GetName.argtypes = [py_object]
_api.PyCapsule_SetName.restype = c_int
_api.PyCapsule_SetName.argtypes = [py_object, c_void_p]

# The destructor calls the two C functions directly (no ctypes thunk).
check(lib.dlrt_dlpack_capsule_calls(ctypes.cast(_api.PyCapsule_IsValid, IS_VALID_FN),
                                    ctypes.cast(_api.PyCapsule_GetPointer, GET_POINTER_FN)))

_NAMES = {0: lib.dlrt_dlpack_capsule_name(0), 1: lib.dlrt_dlpack_capsule_name(1)}
# The names a consumer renames a capsule to: C strings that are never freed,
# since the capsule may outlive this module.
_libc = ctypes.CDLL(None)
_libc.strdup.restype = c_void_p
_libc.strdup.argtypes = [c_char_p]
_USED = {0: _libc.strdup(b"used_dltensor"), 1: _libc.strdup(b"used_dltensor_versioned")}


def capsule_of(managed, versioned):
    """A capsule holding the managed tensor dlrt_dlpack_export made."""
    try:
        return _api.PyCapsule_New(managed, _NAMES[versioned], capsule_destructor)
    except BaseException:
        delete_managed(managed, versioned)
        raise


def delete_managed(managed, versioned):
    """Calls a managed tensor's own deleter (its producer's), if it has one."""
    kind = DLManagedTensorVersioned if versioned else DLManagedTensor
    m = kind.from_address(managed)
    if m.deleter:
        DELETER(m.deleter)(managed)


def export(buf, offset, dtype, shape, versioned, flags):
    """A capsule over `buf` (dlrt_dlpack_export), versioned or legacy."""
    shape_arr = (c_int64 * max(len(shape), 1))(*shape)
    managed = c_void_p()
    check(lib.dlrt_dlpack_export(buf, offset, dtype, len(shape), shape_arr, int(versioned),
                                 flags, ctypes.byref(managed)))
    return capsule_of(managed.value, int(versioned))


class Imported:
    """What a checked capsule holds: the host address, shape, dtype name, the
    flags, and the managed tensor to delete (taken: the capsule renamed)."""

    def __init__(self, data, shape, dtype, readonly, copied, managed, versioned):
        self.data, self.shape, self.dtype = data, shape, dtype
        self.readonly, self.copied = readonly, copied
        self.managed, self.versioned = managed, versioned

    def release(self):
        """The producer's deleter: call once dlrt no longer uses the memory."""
        if self.managed:
            managed, self.managed = self.managed, None
            delete_managed(managed, self.versioned)


def _is_capsule(obj):
    return type(obj).__name__ == "PyCapsule"


def _capsule_kind(capsule):
    """1 versioned, 0 legacy; BufferError for used or foreign capsules."""
    if _api.PyCapsule_IsValid(capsule, b"dltensor_versioned"):
        return 1
    if _api.PyCapsule_IsValid(capsule, b"dltensor"):
        return 0
    name = _api.PyCapsule_GetName(capsule)
    name = name.decode("utf-8", "replace") if name else None
    if name and name.startswith("used_dltensor"):
        raise BufferError("this DLPack capsule was already consumed (named %r): a capsule "
                          "is used once; ask its producer for a new one (__dlpack__())" % name)
    raise BufferError("not a DLPack capsule (its name is %r, not 'dltensor' or "
                      "'dltensor_versioned')" % name)


def _dtype_of(t):
    code, bits, lanes = t.dtype.code, t.dtype.bits, t.dtype.lanes
    name = _BY_CODE.get((code, bits))
    if name is None or lanes != 1:
        raise BufferError("DLPack dtype (code %d, %d bits, %d lanes) is not one dlrt holds: "
                          "f32, f16, bf16, i32 or u8, one lane" % (code, bits, lanes))
    return name


def _shape_of(t, itemsize):
    if not 0 <= t.ndim <= 8:
        raise BufferError("a DLPack tensor of %d dimensions: dlrt holds 0 to 8" % t.ndim)
    if t.ndim and not t.shape:
        raise BufferError("a DLPack tensor of %d dimensions without a shape" % t.ndim)
    shape = tuple(t.shape[i] for i in range(t.ndim))
    if any(n < 0 for n in shape):
        raise BufferError("a DLPack shape with a negative dimension: %s" % (shape,))
    numel = 1
    for n in shape:
        numel *= n
    if numel == 0:
        raise BufferError("an empty DLPack tensor %s: a dlrt.Tensor holds one element or "
                          "more" % (shape,))
    if t.strides:
        strides = tuple(t.strides[i] for i in range(t.ndim))
        expect = 1
        for i in range(t.ndim - 1, -1, -1):
            # A dimension of one may have any stride: it is never stepped.
            if shape[i] != 1 and strides[i] != expect:
                raise BufferError(
                    "DLPack strides %s (elements) of shape %s are not compact row-major: dlrt "
                    "takes contiguous tensors only (np.ascontiguousarray, .contiguous())"
                    % (strides, shape))
            expect *= shape[i]
    if not t.data:
        raise BufferError("a DLPack tensor of %s with a NULL data pointer" % (shape,))
    if (t.data + t.byte_offset) % itemsize:
        raise BufferError("DLPack data at %#x + %d is not aligned to its %d-byte elements"
                          % (t.data, t.byte_offset, itemsize))
    return shape, numel


def take(capsule, itemsizes):
    """Checks a capsule and takes it (renaming it as consumed): an Imported.
    BufferError, with the capsule untouched, for anything dlrt cannot use in
    place: the producer's destructor then frees it."""
    if not _is_capsule(capsule):
        raise BufferError("__dlpack__() returned %s, not a PyCapsule" % type(capsule).__name__)
    versioned = _capsule_kind(capsule)
    name = b"dltensor_versioned" if versioned else b"dltensor"
    managed = _api.PyCapsule_GetPointer(capsule, name)
    if not managed:
        raise BufferError("a DLPack capsule holding NULL")
    readonly = copied = False
    if versioned:
        m = DLManagedTensorVersioned.from_address(managed)
        if m.version.major != VERSION[0]:
            raise BufferError("a DLPack %d.%d tensor: dlrt reads major version %d"
                              % (m.version.major, m.version.minor, VERSION[0]))
        readonly = bool(m.flags & FLAG_READ_ONLY)
        copied = bool(m.flags & FLAG_IS_COPIED)
    else:
        m = DLManagedTensor.from_address(managed)
    t = m.dl_tensor
    if t.device.device_type not in (CPU, CUDA_HOST):
        kind = DEVICE_NAMES.get(t.device.device_type, str(t.device.device_type))
        raise BufferError("a DLPack tensor on %s:%d: dlrt uses host memory in place only; "
                          "move it to the CPU first" % (kind, t.device.device_id))
    dtype = _dtype_of(t)
    shape, _ = _shape_of(t, itemsizes[dtype])
    data = t.data + t.byte_offset
    if _api.PyCapsule_SetName(capsule, _USED[versioned]) != 0:
        raise BufferError("cannot mark the DLPack capsule as consumed")
    return Imported(data, shape, dtype, readonly, copied, managed, versioned)


def request(obj, dl_device=None, copy=None):
    """A capsule from a producer (or the capsule itself): versioned when the
    producer takes max_version, else legacy, as the DLPack protocol orders."""
    if _is_capsule(obj):
        if dl_device is not None:
            raise BufferError("a bare capsule cannot be asked for another device")
        return obj
    if not hasattr(obj, "__dlpack__"):
        raise TypeError("%s has no __dlpack__: dlrt.from_dlpack takes a DLPack producer "
                        "(a NumPy array, a PyTorch tensor, a dlrt.Tensor) or a capsule"
                        % type(obj).__name__)
    kwargs = {"max_version": VERSION}
    if dl_device is not None:
        kwargs.update(dl_device=dl_device, copy=copy)
    try:
        return obj.__dlpack__(**kwargs)
    except TypeError:
        if dl_device is not None:
            raise BufferError("%s.__dlpack__ cannot copy to another device (DLPack before "
                              "2023.12): move it to the CPU first" % type(obj).__name__)
        return obj.__dlpack__()  # a producer before max_version (NumPy < 2, PyTorch < 2.3)
