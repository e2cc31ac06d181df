"""dlrt's statuses as Python exceptions: the status name and the message."""

import pytest

import dlrt


def test_every_status_has_its_class():
    names = dlrt.statuses()
    assert names["DLRT_OK"] == 0 and names["DLRT_ERR_OOM"] == -2
    for name, code in names.items():
        if code:
            e = dlrt.errors.error_for(code, "m")
            assert e.name == name and e.status == code
            assert type(e) is not dlrt.Error, "%s has no class of its own" % name


def test_invalid_argument_carries_name_and_message():
    with pytest.raises(dlrt.InvalidArgument) as info:
        dlrt.parse_size("12 parsecs")
    e = info.value
    assert e.name == "DLRT_ERR_INVALID_ARG" and e.status == -1
    assert "12 parsecs" in e.message and e.name in str(e)
    assert isinstance(e, ValueError) and isinstance(e, dlrt.Error)


def test_bad_and_absent_devices():
    with pytest.raises(dlrt.BadSpec) as info:
        dlrt.device("cpu:zero")
    assert info.value.name == "DLRT_ERR_BAD_SPEC" and "cpu:zero" in info.value.message
    with pytest.raises(dlrt.NoDevice) as info:
        dlrt.device("cpu:7")
    assert "cpu:0" in info.value.message  # the message lists the devices there are


def test_model_file_error_names_the_line(tmp_path):
    model = tmp_path / "bad.model"
    model.write_text("linear 16\nconv9d 3\n")
    with pytest.raises(dlrt.InvalidArgument) as info:
        dlrt.Trainer(model=str(model), data="generated", limit=128, device="cpu")
    assert "bad.model:2" in info.value.message


def test_missing_checkpoint(tmp_path):
    t = dlrt.Trainer(model="mlp", data="generated", limit=128, device="cpu", batch=32)
    with pytest.raises(dlrt.Error) as info:
        t.load(tmp_path / "absent.safetensors")
    assert info.value.name in ("DLRT_ERR_NOT_FOUND", "DLRT_ERR_IO")
    assert "absent.safetensors" in info.value.message


def test_out_of_memory_under_a_budget(cpu):
    before = cpu.memory_stats()["num_ooms"]
    old = cpu.memory_limit
    cpu.set_memory_limit("64M")
    try:
        with pytest.raises(dlrt.OutOfMemory) as info:
            dlrt.empty((256, 1024, 1024), "u8", device=cpu)  # 256 MiB
        assert info.value.name == "DLRT_ERR_OOM" and isinstance(info.value, MemoryError)
    finally:
        cpu.set_memory_limit(old)
    assert cpu.memory_stats()["num_ooms"] == before + 1
