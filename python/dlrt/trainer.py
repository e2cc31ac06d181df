"""dlrt.Trainer: the trainer of the C library (dlrt_trainer_*), driven as
dltrain drives it, so that the same options give the same run bit for bit.

    t = dlrt.Trainer(model="mlp", data="generated", limit=4096, threads=2)
    for m in t.fit(epochs=1):      # each update's figures, then the epoch's
        print(m["kind"], m["step"], m["step_loss"], m["loss"])
    t.evaluate(); t.save("mlp.safetensors")

fit() yields a "progress" dict after every update (its loss, learning rate,
and the epoch's running figures; fit(every=K): every K updates, every=0:
every twentieth of an epoch, as dltrain prints); each epoch (a GPT: each
round of eval_every steps) ends with its figures and the evaluation dltrain
prints for it.
"""

import ctypes
import math
import queue
import threading
import weakref

from . import _config as C
from . import _structs as S
from . import data as _data
from ._lib import lib, PROGRESS_FN, text
from .device import device as _open_device, set_cpu_threads
from .errors import check, error_for

LN2 = 0.6931471805599453


def _stats(s):
    """dlrt_epoch_stats as a dict (NaN where a figure is not measured)."""
    return {name: getattr(s, name) for name, _ in S.EpochStats._fields_}


class Trainer:
    """A model trained on a device: model ("mlp", "cnn", a model file or a GPT
    preset), data ("fashion-mnist", a folder or file, "generated"; a GPT's
    tokens: a text file, folder or llm.c file, fortunes by default), device
    (a spec; default $DLRT_DEVICE, else auto), and dltrain's other options
    with its defaults: batch, optimizer, lr, momentum, weight_decay, seed,
    threads, limit, workers, prefetch, accum, precision, checkpoint,
    mem_limit, schedule, warmup, clip_norm, label_smoothing, augment, epochs
    (for a cosine schedule's length), steps / eval_every / eval_batches and
    the GPT sizes (layers, heads, embd, context, vocab, dropout, attn_dropout)."""

    def __init__(self, model="mlp", data=None, device=None, **options):
        o = C.options(dict(options, model=model, data=data, device=device))
        self.options = o
        self.device = _open_device(o["device"])
        if o["threads"] is not None:
            set_cpu_threads(o["threads"])
        total = self.device.total_memory
        if o["gpt_model"]:
            self.splits = _data.tokens(o["data"], o["gpt_resolved"].context, o["batch"],
                                       o["eval_every"], o["eval_batches"], o["accum"])
        else:
            self.splits = _data.images(o["data"], o["seed"], o["limit"], o["mmap"])
        train = self.splits.train
        self._cfg = C.trainer_config(o, train, total)
        handle = ctypes.c_void_p()
        check(lib.dlrt_trainer_create(self.device._handle, ctypes.byref(self._cfg), train.height,
                                      train.width, train.classes, ctypes.byref(handle)))
        self._t = handle
        self._finalizer = weakref.finalize(self, lib.dlrt_trainer_destroy, handle.value)
        self.is_gpt = o["gpt_model"]
        self.done = 0  # epochs (a GPT: steps) trained, counting a loaded checkpoint's
        # A classifier's epoch left part way by fit(steps=N): its updates run
        # and their loss sum; the next fit() goes on from there.
        self.epoch_step, self._part_loss = 0, 0.0
        self.epoch_losses = []  # the training loss of each epoch fit() ran

    # ------------------------------------------------------------ figures

    def info(self):
        """Planned and measured peaks, parameter bytes, steps (dlrt_exec_info)."""
        info = S.ExecInfo()
        check(lib.dlrt_trainer_info(self._t, ctypes.byref(info)))
        return info.as_dict()

    @property
    def params(self):
        return self.info()["params"]

    def loss_scale(self):
        s = S.LossScaleState()
        check(lib.dlrt_trainer_loss_scale(self._t, ctypes.byref(s)))
        return s.as_dict()

    def data(self):
        """The training and test (validation) splits' sizes and sources."""
        return {"train": self.splits.describe(0), "test": self.splits.describe(1)}

    # ------------------------------------------------------------ running

    def _epoch(self, epoch, first_step, max_steps, every, extra):
        """Runs one (part of an) epoch in a thread from update first_step,
        yielding its progress every `every` updates; the part's stats are
        left in extra["stats"]."""
        check(lib.dlrt_trainer_set_progress_every(self._t, int(every)))
        events = queue.Queue()
        out = S.EpochStats()
        done = object()

        def progress(_user, step, steps, so_far):
            s = _stats(so_far.contents)
            # A GPT's rounds count their steps from the run's first.
            s.update(extra, kind="progress", step=extra.get("first_step", 0) + step,
                     steps=steps)
            events.put(s)

        callback = PROGRESS_FN(progress)  # alive until the thread has ended

        def run():
            try:
                rc = lib.dlrt_trainer_epoch_from(self._t, ctypes.byref(self.splits._d[0]),
                                                 epoch, first_step, max_steps, callback, None,
                                                 ctypes.byref(out))
                # dlrt_last_error is the training thread's: read it here.
                events.put(error_for(rc) if rc < 0 else done)
            except BaseException as e:  # pragma: no cover - ctypes' own failures
                events.put(e)

        worker = threading.Thread(target=run, name="dlrt-epoch-%d" % epoch, daemon=True)
        worker.start()
        try:
            while True:
                item = events.get()
                if item is done:
                    break
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            worker.join()  # an abandoned iteration still waits for the epoch to end
        extra["stats"] = _stats(out)

    def fit(self, epochs=None, steps=None, evaluate=True, every=1):
        """Trains, yielding dicts as it goes: kind "progress" after every
        `every` updates (0: every twentieth of an epoch) with the update's
        step_loss and lr and the epoch's running figures (loss: its mean so
        far, images_per_s, ...), and after each epoch kind "epoch" with the
        epoch's figures and, with evaluate, its test loss and accuracy.
        fit(steps=N) trains N more updates: a classifier's epoch that ends
        part way is taken up where it stopped by the next fit() (the same
        batches, so the run is the uninterrupted one's bit for bit), the
        part yielding kind "part" (and its evaluation). A GPT trains by steps
        (default: up to its `steps` option, counting a loaded checkpoint's)
        in rounds of eval_every, each ending with kind "eval": val_loss,
        val_perplexity, val_bpb (bits per byte, byte tokens only)."""
        if int(every) < 0:
            raise ValueError("every=%r: give updates between progress reports (0: a "
                             "twentieth of an epoch)" % (every,))
        if self.is_gpt:
            if epochs is not None:
                raise ValueError("a GPT trains by steps: fit(steps=N)")
            return self._fit_steps(steps, evaluate, every)
        if steps is not None and epochs is not None:
            raise ValueError("give epochs or steps, not both")
        return self._fit_epochs(1 if epochs is None and steps is None else epochs, steps,
                                evaluate, every)

    def _fit_epochs(self, epochs, steps, evaluate, every):
        remaining = steps
        end = self.done + epochs if epochs is not None else None
        per_epoch = lib.dlrt_trainer_epoch_updates(self._t, ctypes.byref(self.splits._d[0]))
        check(per_epoch)
        while (end is None or self.done < end) and (remaining is None or remaining > 0):
            extra = {"epoch": self.done + 1}
            first = self.epoch_step
            yield from self._epoch(self.done, first, remaining or 0, every, extra)
            s = extra.pop("stats")
            if remaining is not None:
                remaining -= s["steps"]
            self.epoch_step += s["steps"]
            self._part_loss += s["loss"] * s["steps"]
            s.update(extra, step=self.epoch_step)
            if self.epoch_step < per_epoch:
                s["kind"] = "part"  # the epoch goes on at the next fit()
            else:
                s["kind"] = "epoch"
                if first > 0:  # an epoch run in parts: its loss over all of them
                    s["loss"] = self._part_loss / per_epoch
                    s["steps"] = per_epoch
                self.done += 1
                self.epoch_losses.append(s["loss"])
                self.epoch_step, self._part_loss = 0, 0.0
            if evaluate:
                e = self.evaluate()
                s["test_loss"], s["test_accuracy"] = e["loss"], e["accuracy"]
            yield s

    def _fit_steps(self, steps, evaluate, every):
        total = self.options["steps"] if steps is None else self.done + int(steps)
        every = int(self.options["eval_every"])
        while self.done < total:
            round_, in_round = divmod(self.done, every)
            round_steps = min(every - in_round, total - self.done)
            extra = {"round": round_ + 1, "first_step": self.done}
            yield from self._epoch(round_, 0, round_steps, every, extra)
            s = extra.pop("stats")
            self.done += s["steps"]
            s.update(extra, kind="eval" if evaluate else "round", step=self.done)
            self.epoch_losses.append(s["loss"])
            if evaluate:
                e = self.evaluate()
                s["val_loss"] = e["loss"]
                s["val_perplexity"] = math.exp(e["loss"]) if e["loss"] < 700 else math.inf
                s["val_bpb"] = e["loss"] / LN2 if self.splits.byte_tokens else math.nan
            yield s

    def evaluate(self):
        """Loss and accuracy over the test split (a GPT: validation windows)."""
        out = S.EpochStats()
        check(lib.dlrt_trainer_evaluate(self._t, ctypes.byref(self.splits._d[1]),
                                        ctypes.byref(out)))
        return _stats(out)

    # ------------------------------------------------------------ checkpoints

    def save(self, path, done=None):
        """A checkpoint (safetensors, replaced atomically) of the parameters,
        optimizer state and metadata; `done` epochs (a GPT: steps), default
        those trained. A checkpoint records whole epochs: one saved inside an
        epoch (after fit(steps=N)) resumes at that epoch's start."""
        path = str(path).encode()
        check(lib.dlrt_save_path_check(path))
        check(lib.dlrt_trainer_save(self._t, path, int(self.done if done is None else done)))

    def load(self, path):
        """Restores a checkpoint of the same model; returns its epochs (steps) done."""
        done = ctypes.c_int()
        check(lib.dlrt_trainer_load(self._t, str(path).encode(), ctypes.byref(done)))
        self.done = done.value
        self.epoch_step, self._part_loss = 0, 0.0
        return self.done

    def close(self):
        """Frees the trainer now (else when it is collected)."""
        self._finalizer()
