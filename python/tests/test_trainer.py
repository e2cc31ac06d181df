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
    assert first["kind"] == "progress" and first["epoch"] == 1 and first["step"] == 1
    rest = list(it)
    progress = [first] + [e for e in rest if e["kind"] == "progress"]
    epochs = [e for e in rest if e["kind"] == "epoch"]
    assert [e["epoch"] for e in epochs] == [1, 2] and t.done == 2
    # Every update is reported, with its own loss and learning rate.
    steps = 2048 // 64
    assert [e["step"] for e in progress] == list(range(1, steps + 1)) * 2
    for e in progress:
        assert 0 < e["step"] <= e["steps"] == steps and math.isfinite(e["loss"])
        assert math.isfinite(e["step_loss"]) and f32(e["lr"]) == f32(1e-3)
    # The running mean is the mean of the updates' losses so far.
    first_epoch = progress[:steps]
    for k in (1, 7, steps):
        mean = sum(float(f32(e["step_loss"])) for e in first_epoch[:k]) / k
        assert abs(first_epoch[k - 1]["loss"] - mean) <= 1e-6 * abs(mean)
    assert epochs[1]["loss"] < epochs[0]["loss"]


def test_progress_every_twentieth_as_dltrain():
    t = dlrt.Trainer(**RUN)
    progress = [e for e in t.fit(epochs=1, every=0) if e["kind"] == "progress"]
    # The library's own cadence: every twentieth of an epoch (each step when
    # it has fewer than 40), and its last step.
    steps = 2048 // 64
    every = max(steps // 20, 1)
    assert [e["step"] for e in progress] == [s for s in range(1, steps + 1)
                                             if s % every == 0 or s == steps]
    progress = [e for e in t.fit(epochs=1, every=5) if e["kind"] == "progress"]
    assert [e["step"] for e in progress] == [5, 10, 15, 20, 25, 30, 32]
    with pytest.raises(ValueError, match="every"):
        t.fit(every=-1)


def test_steps_in_parts_train_as_one_epoch(dltrain):
    """fit(steps=N) that ends inside an epoch: the next fit() takes the epoch
    up at the next batch, so the parts train as one uninterrupted run."""
    whole = dlrt.Trainer(**RUN)
    events = list(whole.fit(epochs=2, evaluate=False))
    whole_steps = [e["step_loss"] for e in events if e["kind"] == "progress"]
    parts = dlrt.Trainer(**RUN)
    got = []
    for n in (10, 30, 24):  # 64 updates: 10 | 22 + 8 | 24 of two 32-update epochs
        got += list(parts.fit(steps=n, evaluate=False))
    kinds = [e["kind"] for e in got if e["kind"] != "progress"]
    assert kinds == ["part", "epoch", "part", "epoch"] and parts.done == 2
    assert [e["step"] for e in got if e["kind"] != "progress"] == [10, 32, 8, 32]
    assert [f32(x) for x in (e["step_loss"] for e in got if e["kind"] == "progress")] == \
        [f32(x) for x in whole_steps]
    assert f32(parts.evaluate()["loss"]) == f32(whole.evaluate()["loss"])
    # The epoch's loss over its parts, to rounding (a mean of two means).
    assert abs(parts.epoch_losses[0] - whole.epoch_losses[0]) <= 1e-6
    theirs = dltrain(*ARGS, "--epochs", "2")
    assert f32(parts.evaluate()["loss"]) == f32(theirs["test_loss"])


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
    assert events[-1]["kind"] == "part" and events[-1]["steps"] == 10
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
