"""A toy model for the trainer's tests: a batched logistic model (one per seed) with its hand-written
backward, its data, and a short run of the trainer on it (``tests/training/test_train.py`` and the run-safety
tests use it)."""

import numpy as np

from refattn.core.backend import array_module
from refattn.training.optim import Adam
from refattn.training.train import batch_iterator, train


class ToyModel:
    """p(y=1|x) = sigmoid(x . w + b) with a tanh feature, one model per seed."""

    def __init__(self, dim=3):
        self.dim = dim

    def init_params(self, seeds, dtype=np.float64):
        ws = [np.random.default_rng(s).standard_normal(self.dim) for s in seeds]
        return {"w": np.stack(ws).astype(dtype), "b": np.zeros((len(seeds), 1), dtype)}

    def loss(self, params, batch):
        xp = array_module(params["w"], params["b"])
        x, y = batch["x"], batch["y"]  # (S, B, dim), (S, B)
        a = xp.sum(xp.tanh(x) * params["w"][:, None, :], axis=-1) + params["b"]  # (S, B)
        L = y * xp.logaddexp(0.0, -a) + (1 - y) * xp.logaddexp(0.0, a)
        return xp.mean(L, axis=-1)  # (S,)

    def loss_and_grad(self, params, batch):
        x, y = batch["x"], batch["y"]
        f = np.tanh(x)
        a = np.sum(f * params["w"][:, None, :], axis=-1) + params["b"]
        p = 1 / (1 + np.exp(-a))
        loss = np.mean(y * np.logaddexp(0, -a) + (1 - y) * np.logaddexp(0, a), axis=-1)
        da = (p - y) / y.shape[-1]  # d mean BCE / d a
        return loss, {"w": np.sum(da[..., None] * f, axis=1), "b": np.sum(da, axis=1, keepdims=True)}, {}


SEEDS = (3, 1, 4)
DATA = np.random.default_rng(0)
X = DATA.standard_normal((60, 3))
Y = (X @ np.array([1.0, -2.0, 0.5]) + 0.3 * DATA.standard_normal(60) > 0).astype(float)


def batches(seeds, batch_size=16):
    def make(epoch):
        return [{"x": X[idx], "y": Y[idx]} for idx in batch_iterator(60, batch_size, seeds=seeds, epoch=epoch)]
    return make


def run(seeds=SEEDS, epochs=5, grad="analytic", opt=Adam, **kw):
    model = ToyModel()
    params = model.init_params(seeds)
    optimizer = opt(params, lr=0.05)
    out = train(model, params, optimizer, batches(seeds), epochs=epochs, grad=grad,
                callbacks=[lambda e, p: {"w_norm": np.linalg.norm(p["w"], axis=-1)}], **kw)
    return params, out
