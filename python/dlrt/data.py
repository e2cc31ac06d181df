"""The training and test splits a run uses, loaded as dltrain loads them
(tools/dltrain.c, tools/dltrain-lm.c): images from Fashion-MNIST, a folder
or record file, or generated; token windows from a text file, a folder or an
llm.c token file (Debian's fortunes by default)."""

import ctypes
import warnings
import weakref

from . import _structs as S
from ._lib import lib, text
from .errors import NotFound, check

FASHION_MNIST = "fashion-mnist"
DEFAULT_CORPUS = "/usr/share/games/fortunes"
GEN_TRAIN, GEN_TEST, GEN_CLASSES = 60000, 10000, 10  # Fashion-MNIST's sizes
DATASET_MMAP = 1


def _free(datasets, streams):
    # The datasets borrow the streams: they go first.
    for d in datasets:
        lib.dlrt_dataset_free(ctypes.byref(d))
    for s in streams:
        lib.dlrt_tokens_free(ctypes.byref(s))


class Splits:
    """train and test (a GPT's validation) dlrt_dataset, and what they borrow."""

    def __init__(self):
        self._d = (S.Dataset * 2)()
        self._streams = (S.Tokens * 3)()
        self.generated = False
        self.byte_tokens = False
        self._finalizer = weakref.finalize(self, _free, self._d, self._streams)

    train = property(lambda self: self._d[0])
    test = property(lambda self: self._d[1])

    def describe(self, split=0):
        d = self._d[split]
        return {"count": d.count, "channels": d.channels, "height": d.height,
                "width": d.width, "classes": d.classes, "source": text(d.source)}


def images(data=FASHION_MNIST, seed=1, limit=0, mmap=False):
    """Both image splits. A missing Fashion-MNIST package falls back to
    generated data (with a warning), as dltrain does; a folder or file named
    explicitly must load. limit: the first N training and N/6 test images."""
    s = Splits()
    data = FASHION_MNIST if data is None else str(data)
    s.generated = data == "generated"
    if not s.generated:
        try:
            check(lib.dlrt_dataset_load_splits(data.encode(), DATASET_MMAP if mmap else 0, s._d))
        except NotFound as e:
            if data != FASHION_MNIST:
                raise
            warnings.warn("Fashion-MNIST not found (%s); training on generated data instead"
                          % e.message, RuntimeWarning, stacklevel=3)
            s.generated = True
    if s.generated:
        # Different seeds for the two splits: the same class patterns, other samples.
        check(lib.dlrt_dataset_generate(GEN_TRAIN, GEN_CLASSES, seed, ctypes.byref(s._d[0])))
        check(lib.dlrt_dataset_generate(GEN_TEST, GEN_CLASSES, ~seed & (2**64 - 1),
                                        ctypes.byref(s._d[1])))
    if limit and limit > 0:  # the arrays stay as they are; only the counts shrink
        test = max(limit // 6, 1)
        s._d[0].count = min(s._d[0].count, limit)
        s._d[1].count = min(s._d[1].count, test)
    return s


def plan_windows(gpt, batch):
    """What planning a GPT reads in place of data: windows of its context."""
    s = Splits()
    for d in s._d:
        d.count, d.channels, d.height = batch, 1, 1
        d.width, d.classes, d.image_dtype = gpt.context, gpt.vocab, 3  # DLRT_I32
        d.source = b"windows of %d tokens (--plan)" % gpt.context
    return s


def tokens(data, context, batch, eval_every, eval_batches, accum=1):
    """A GPT's training and validation windows of `data` (a file or folder;
    None: Debian's fortunes), split 9:1; an epoch is one round of
    eval_every updates, the validation the first eval_batches batches."""
    s = Splits()
    path = DEFAULT_CORPUS if data in (None, FASHION_MNIST) else str(data)
    try:
        check(lib.dlrt_tokens_load(path.encode(), ctypes.byref(s._streams[0])))
    except NotFound as e:
        if path == DEFAULT_CORPUS:
            raise NotFound(e.status, "the default corpus %s is missing: install Debian's "
                           "fortunes package (apt-get install fortunes) or give data=FILE|DIR"
                           % DEFAULT_CORPUS) from e
        raise
    all_, train, val = (ctypes.byref(x) for x in s._streams)
    check(lib.dlrt_tokens_split(all_, 0, train))
    check(lib.dlrt_tokens_split(all_, 1, val))
    check(lib.dlrt_dataset_from_tokens(train, context, ctypes.byref(s._d[0])))
    check(lib.dlrt_dataset_from_tokens(val, context, ctypes.byref(s._d[1])))
    vocab = s._streams[0].vocab
    s._d[0].classes = s._d[1].classes = vocab
    s.byte_tokens = vocab == 256
    s._d[0].count = eval_every * batch * max(accum, 1)
    s._d[1].count = min(s._d[1].count, eval_batches * batch)
    return s
