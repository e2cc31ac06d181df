"""The ctypes mirrors against the C compiler's layout (tests/python-abi)."""

import ctypes

import pytest

import dlrt
from dlrt import _structs as S
from dlrt import dlpack as D


@pytest.mark.parametrize("c_name", sorted(S.C_NAMES))
def test_struct_layout(python_abi, c_name):
    mirror, c = S.C_NAMES[c_name], python_abi[c_name]
    assert ctypes.sizeof(mirror) == c["size"], "%s: ctypes %d bytes, C %d" % (
        c_name, ctypes.sizeof(mirror), c["size"])
    names = [name for name, _ in mirror._fields_]
    assert names == list(c["fields"]), "%s: fields differ from C's" % c_name
    for name in names:
        assert getattr(mirror, name).offset == c["fields"][name], "%s.%s" % (c_name, name)


def test_every_c_struct_mirrored(python_abi):
    assert sorted(python_abi) == sorted(S.C_NAMES)


def test_dlpack_layout():
    # DLPack 1.0's ABI, as lib/mem/dlpack.c asserts it for its own structs.
    assert ctypes.sizeof(D.DLTensor) == 48
    assert ctypes.sizeof(D.DLManagedTensor) == 64
    assert ctypes.sizeof(D.DLManagedTensorVersioned) == 80
    assert D.DLManagedTensorVersioned.dl_tensor.offset == 32
    assert D.DLManagedTensorVersioned.flags.offset == 24


def test_round_trip_through_c():
    """Offsets seen through calls: the library fills and reads the mirrors."""
    cfg = S.GptConfig()
    assert dlrt._lib.lib.dlrt_gpt_preset(b"gpt2", ctypes.byref(cfg)) == 0
    assert (cfg.layers, cfg.heads, cfg.embd, cfg.context, cfg.vocab) == (12, 12, 768, 1024,
                                                                        50257)
    assert dlrt._lib.lib.dlrt_gpt_params(ctypes.byref(cfg)) == 124439808
    # dlrt_lr_at reads the schedule's fields out of a dlrt_trainer_config.
    tc = S.TrainerConfig(schedule=1, step_size=10, gamma=0.5, warmup_steps=0)
    tc.opt.lr = 0.5
    lr = dlrt._lib.lib.dlrt_lr_at
    assert [lr(ctypes.byref(tc), s) for s in (0, 9, 10, 25)] == [0.5, 0.5, 0.25, 0.125]
    opt = dlrt._lib.lib.dlrt_optimizer_defaults(2)  # AdamW, returned by value
    assert (opt.kind, round(opt.lr, 6), round(opt.weight_decay, 6)) == (2, 0.001, 0.01)
    assert round(opt.beta2, 6) == 0.999 and opt.eps > 0
