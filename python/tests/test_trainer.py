"""dlrt.Trainer against dltrain: the same losses bit for bit."""

import math

import numpy as np
import pytest

import dlrt

# A quick run of dltrain's defaults otherwise: mlp, Adam, batch 64, seed 1,
# two loader workers, prefetch 2, on the cpu with two threads.
RUN = dict(model="mlp", data="generated", limit=2048, device="cpu", threads=2)
ARGS = ["--model", "mlp", "--data", "generated", "--limit", "2048", "--device", "cpu",
        "--deterministic", "--threads", "2", "--json", "--quiet"]


def f32(x):
    return np.float32(x)


def test_one_epoch_bit_for_bit(dltrain):
    theirs = dltrain(*ARGS, "--epochs", "1")
    t = dlrt.Trainer(**RUN)
    events = list(t.fit(epochs=1))
    epoch = events[-1]
    assert epoch["kind"] == "epoch" and epoch["epoch"] == 1
    assert [f32(x) for x in t.epoch_losses] == [f32(x) for x in theirs["epoch_losses"]]
    assert f32(epoch["loss"]) == f32(theirs["final_loss"])
    assert f32(epoch["test_loss"]) == f32(theirs["test_loss"])
    assert f32(epoch["test_accuracy"]) == f32(theirs["test_accuracy"])
    assert t.params == theirs["params"]
    assert t.info()["planned_peak_bytes"] == theirs["planned_peak_bytes"]


def test_progress_is_an_iterator():
    t = dlrt.Trainer(**RUN)
    it = t.fit(epochs=2)
    first = next(it)
    assert first["kind"] == "progress" and first["epoch"] == 1 and first["step"] >= 1
    rest = list(it)
    progress = [first] + [e for e in rest if e["kind"] == "progress"]
    epochs = [e for e in rest if e["kind"] == "epoch"]
    assert [e["epoch"] for e in epochs] == [1, 2] and t.done == 2
    # The trainer reports every twentieth of an epoch (each step when it has
    # fewer than 40), and its last step.
    steps = 2048 // 64
    every = max(steps // 20, 1)
    reported = [s for s in range(1, steps + 1) if s % every == 0 or s == steps]
    assert [e["step"] for e in progress] == reported * 2
    for e in progress:
        assert 0 < e["step"] <= e["steps"] == steps and math.isfinite(e["loss"])
    assert epochs[1]["loss"] < epochs[0]["loss"]


def test_abandoned_iteration_finishes_its_epoch():
    t = dlrt.Trainer(**RUN)
    it = t.fit(epochs=1)
    next(it)
    it.close()  # waits for the epoch's thread
    assert t.info()["steps"] == 2048 // 64


def test_save_and_load_go_on_as_one_run(tmp_path, dltrain):
    path = tmp_path / "mlp.safetensors"
    a = dlrt.Trainer(**RUN)
    list(a.fit(epochs=1))
    a.save(path)
    b = dlrt.Trainer(**RUN)
    assert b.load(path) == 1
    list(b.fit(epochs=1))
    theirs = dltrain(*ARGS, "--epochs", "2")
    assert f32(b.epoch_losses[0]) == f32(theirs["epoch_losses"][1])
    assert f32(b.evaluate()["loss"]) == f32(theirs["test_loss"])


def test_steps_and_options(dltrain):
    t = dlrt.Trainer(**dict(RUN, optimizer="sgd", lr=0.05, momentum=0.9, batch=32))
    events = list(t.fit(steps=10, evaluate=False))
    assert events[-1]["kind"] == "epoch" and events[-1]["steps"] == 10
    with pytest.raises(ValueError):
        dlrt.Trainer(**dict(RUN, momentum=0.9))  # momentum is SGD's


def test_gpt_by_steps_as_dltrain(dltrain, tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_bytes(bytes(range(32, 127)) * 200)
    sizes = dict(layers=1, context=32, batch=4, steps=4, eval_every=2, eval_batches=2)
    theirs = dltrain("--model", "gpt-mini", "--data", str(corpus), "--device", "cpu",
                     "--deterministic", "--threads", "2", "--json", "--quiet", "--layers", "1",
                     "--context", "32", "--batch", "4", "--steps", "4", "--eval-every", "2",
                     "--eval-batches", "2")
    t = dlrt.Trainer(model="gpt-mini", data=str(corpus), device="cpu", threads=2, **sizes)
    rounds = [e for e in t.fit() if e["kind"] == "eval"]
    assert [r["step"] for r in rounds] == [2, 4] and t.done == 4
    # dltrain's JSON for a GPT gives the last evaluation's figures.
    assert f32(rounds[-1]["val_loss"]) == f32(theirs["val_loss"])
    assert f32(rounds[-1]["val_bpb"]) == f32(theirs["val_bpb"])
    with pytest.raises(ValueError, match="steps"):
        t.fit(epochs=1)
