"""dlrt.plan against dltrain --plan --json: the same dict for the same options."""

import pytest

import dlrt

CASES = [
    # (dlrt.plan's options, dltrain's)
    (dict(model="gpt3-175b", batch=1, precision="bf16", device_memory="40G"),
     ["--model", "gpt3-175b", "--batch", "1", "--precision", "bf16", "--device-memory", "40G"]),
    (dict(model="gpt2", batch=4, context=256, checkpoint="blocks", device_memory="24G"),
     ["--model", "gpt2", "--batch", "4", "--context", "256", "--checkpoint", "blocks",
      "--device-memory", "24G"]),
    (dict(model="mlp", data="generated", batch=128, device_memory="1G", what_if="7B"),
     ["--model", "mlp", "--data", "generated", "--batch", "128", "--device-memory", "1G",
      "--what-if", "7B"]),
    (dict(model="cnn", data="generated", accum=4, precision="fp16", optimizer="sgd",
          device="cpu"),
     ["--model", "cnn", "--data", "generated", "--accum", "4", "--precision", "fp16",
      "--optimizer", "sgd", "--device", "cpu"]),
]


@pytest.mark.parametrize("mine,theirs", CASES, ids=[c[0]["model"] for c in CASES])
def test_plan_equals_dltrain(dltrain, mine, theirs):
    assert dlrt.plan(**mine) == dltrain("--plan", "--json", *theirs)


def test_plan_of_gpt3_175b():
    p = dlrt.plan(model="gpt3-175b", batch=1, precision="bf16", device_memory="40G")
    assert p["plan"]["params"] == 174604259328 and p["precision"] == "bf16"
    assert p["max_batch"]["plain"] == 0  # 2.5 TiB at the peak: nothing fits 40 GB
    rows = {r["strategy"]: r for r in p["what_if"]}
    assert rows["fp16 weights alone (inference)"]["devices"] == 9
    assert p["transformer"]["context"] == 2048


def test_plan_errors():
    with pytest.raises(dlrt.InvalidArgument, match="heads"):
        dlrt.plan(model="gpt2", heads=5)  # 768 is no multiple of 5
    with pytest.raises(ValueError):
        dlrt.plan(model="mlp", device_memory="lots")
    with pytest.raises(TypeError, match="unknown option"):
        dlrt.plan(model="mlp", bacth=3)
    assert "gpt3-175b" in dlrt.gpt_presets() and "gpt-mini" in dlrt.gpt_presets()


SIMULATE = [
    (dict(model="gpt3-175b", batch=1, precision="bf16", offload="optimizer",
          simulate="h200-pcie5"),
     ["--model", "gpt3-175b", "--batch", "1", "--precision", "bf16", "--offload", "optimizer",
      "--simulate", "h200-pcie5"]),
    (dict(model="gpt2", batch=4, context=64, simulate="a100-pcie4"),
     ["--model", "gpt2", "--batch", "4", "--context", "64", "--simulate", "a100-pcie4"]),
    (dict(model="mlp", data="generated", batch=64, mem_limit="5M", offload="optimizer",
          device="cpu", simulate="h200-pcie5"),
     ["--model", "mlp", "--data", "generated", "--batch", "64", "--mem-limit", "5M",
      "--offload", "optimizer", "--device", "cpu", "--simulate", "h200-pcie5"]),
    # Streamed parameters, and the placement for a device of 8G beside it.
    (dict(model="gpt2-xl", batch=8, precision="bf16", offload="params", simulate="h200-pcie5",
          device_memory="8G"),
     ["--model", "gpt2-xl", "--batch", "8", "--precision", "bf16", "--offload", "params",
      "--simulate", "h200-pcie5", "--device-memory", "8G"]),
]


@pytest.mark.parametrize("mine,theirs", SIMULATE, ids=[c[0]["model"] for c in SIMULATE])
def test_simulate_equals_dltrain(dltrain, mine, theirs):
    assert dlrt.plan(**mine) == dltrain("--plan", "--json", *theirs)


def test_simulate_figures_and_errors(tmp_path):
    s = dlrt.plan(model="gpt2", batch=8, context=1024, precision="bf16",
                  simulate="h200-pcie5")["simulate"]
    assert s["machine"] == "h200-pcie5" and s["step_s"] > 0 and 0 < s["mfu"] < 1
    assert s["tokens_per_s"] == pytest.approx(8 * 1024 / s["step_s"], rel=1e-6)
    assert s["compute_s"] == pytest.approx(s["forward_s"] + s["backward_s"] + s["update_s"],
                                           rel=1e-6)
    # A file of figures: twice the GEMM rate of the preset it starts from.
    fast = tmp_path / "fast.machine"
    fast.write_text("base = h200-pcie5\nname = fast\nmatmul_bf16 = %r\n"
                    % (2 * s["figures"]["matmul_bf16"]))
    f = dlrt.plan(model="gpt2", batch=8, context=1024, precision="bf16",
                  simulate=str(fast))["simulate"]
    assert f["machine"] == "fast" and f["step_s"] < s["step_s"]
    with pytest.raises(dlrt.InvalidArgument, match="h200-pcie5"):
        dlrt.plan(model="gpt2", simulate="h300-pcie9")  # the message lists the presets
    bad = tmp_path / "bad.machine"
    bad.write_text("matmul_fp32 = fast\n")
    with pytest.raises(dlrt.Error, match="bad.machine"):
        dlrt.plan(model="mlp", simulate=str(bad))
