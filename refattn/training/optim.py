r"""Optimisers over a dict of arrays: SGD (with momentum), Adam, AdamW, Adadelta and Adagrad.

The parameters are a dict ``name -> array`` (NumPy or CuPy, floating point),
updated **in place**, so every holder of the same arrays sees the new values;
:meth:`Optimizer.step` takes gradients with the same keys and shapes (the
``dparams`` of :meth:`refattn.core.scores.Score.backward`). Each class writes
its update rule, for one parameter ``p`` with gradient ``g`` at step ``t = 1,
2, ...``, elementwise; none is a paper equation of the seeds, and each is
checked against its formula written out in ``tests/training/test_optim.py``
and ``test_optim_adaptive.py``. :meth:`Optimizer.state_dict` and
:meth:`Optimizer.load_state_dict` save and restore the step count, the
hyperparameters and the buffers, so a resumed run takes the same steps.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from ..core.backend import array_module

from ..core.checks import check_float_array

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "Adadelta", "Adagrad"]


def _rate(value, name, *, low_open=True, high=None):
    """A finite real number in ``(0, high)`` (or ``[0, high)``), else a clear error."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(
        value, (int, float, np.integer, np.floating)
    ):
        raise TypeError(f"{name}: expected a real number, got {type(value).__name__}")
    value = float(value)
    bad = not math.isfinite(value) or (value <= 0 if low_open else value < 0)
    if high is not None and value >= high:
        bad = True
    if bad:
        lo = "0 <" if low_open else "0 <="
        hi = f" < {high:g}" if high is not None else ""
        raise ValueError(f"{name}: expected a finite number with {lo} {name}{hi}, got {value!r}")
    return value


def _check_param_dict(params, name="params"):
    if not isinstance(params, Mapping):
        raise TypeError(f"{name}: expected a dict of arrays (name -> array), got {type(params).__name__}")
    if not params:
        raise ValueError(f"{name}: expected at least one parameter, got an empty dict")
    for key, p in params.items():
        check_float_array(p, f"{name}[{key!r}]", min_ndim=0)
        if isinstance(p, np.generic):
            raise TypeError(f"{name}[{key!r}]: a NumPy scalar cannot be updated in place; "
                            f"store it as a 0-d array (numpy.asarray)")
        if isinstance(p, np.ndarray) and not p.flags.writeable:
            raise ValueError(f"{name}[{key!r}]: the array is read-only; the optimiser updates in place")


class Optimizer:
    """Base class: holds the parameter dict and checks the gradients.

    Subclasses set ``buffer_names`` (the per-parameter state arrays) and
    ``hyper_names`` (the hyperparameters saved in :meth:`state_dict`) and
    implement :meth:`_update` for one parameter.
    """

    buffer_names: tuple = ()
    hyper_names: tuple = ("lr",)

    def __init__(self, params, lr):
        _check_param_dict(params)
        self.params = params
        self.lr = _rate(lr, "lr")
        self.t = 0  # number of steps taken
        self.state = {b: {k: array_module(p).zeros_like(p) for k, p in params.items()}
                      for b in self.buffer_names}

    def _check_grads(self, grads):
        if not isinstance(grads, Mapping):
            raise TypeError(f"grads: expected a dict of arrays with the keys of params, "
                            f"got {type(grads).__name__}")
        missing = [k for k in self.params if k not in grads]
        extra = [k for k in grads if k not in self.params]
        if missing or extra:
            raise ValueError(f"grads: keys must be those of params {tuple(self.params)}; "
                             f"missing {missing}, unexpected {extra}")
        for key, p in self.params.items():
            g = grads[key]
            check_float_array(g, f"grads[{key!r}]", min_ndim=0)
            if np.shape(g) != np.shape(p):
                raise ValueError(f"grads[{key!r}]: shape {np.shape(g)} does not match the "
                                 f"parameter's shape {np.shape(p)}")
            array_module(p, g)  # TypeError if CuPy and NumPy are mixed

    def step(self, grads):
        """Update every parameter in place from ``grads``, ``dL/dp`` with the parameters' keys and shapes."""
        self._check_grads(grads)
        self.t += 1
        for key, p in self.params.items():
            xp = array_module(p, grads[key])
            self._update(xp, key, p, grads[key])

    def _update(self, xp, key, p, g):
        raise NotImplementedError

    # --- saving and resuming ---------------------------------------------------
    def state_dict(self) -> dict:
        """A snapshot: ``{"type", "t", <hyperparameters>, "state": {buffer: {key: copy of the buffer}}}``."""
        out = {"type": type(self).__name__, "t": self.t}
        out.update({h: getattr(self, h) for h in self.hyper_names})
        out["state"] = {b: {k: v.copy() for k, v in bufs.items()} for b, bufs in self.state.items()}
        return out

    def load_state_dict(self, state):
        """Restore a snapshot of :meth:`state_dict` (not the parameters: the caller owns them); a state of
        another optimiser or of another model's parameters is refused, and nothing changes."""
        if state["type"] != type(self).__name__:
            raise ValueError(f"state: saved by {state['type']!r}, cannot load into {type(self).__name__!r}")
        want = {k: np.shape(p) for k, p in self.params.items()}
        for b in self.buffer_names:
            got = {k: np.shape(v) for k, v in state["state"][b].items()}
            if got != want:
                raise ValueError(f"state['state'][{b!r}]: buffers of shapes {got}, the parameters' are {want}")
        for h in self.hyper_names:  # a JSON list (a checkpoint's betas) back to the tuple it was
            setattr(self, h, tuple(state[h]) if isinstance(state[h], list) else state[h])
        self.t = int(state["t"])
        for b in self.buffer_names:
            for k, p in self.params.items():
                self.state[b][k] = array_module(p).array(state["state"][b][k], dtype=p.dtype, copy=True)

    def __repr__(self):
        hp = ", ".join(f"{h}={getattr(self, h)!r}" for h in self.hyper_names)
        return f"{type(self).__name__}({len(self.params)} parameters, {hp}, t={self.t})"


class SGD(Optimizer):
    """Stochastic gradient descent (Robbins & Monro 1951) with heavy-ball momentum (Polyak 1964).

    ``b <- mu b + g``, ``p <- p - lr b``, the buffer starting at 0 (PyTorch's
    form); ``momentum = mu`` in ``[0, 1)``, 0 for plain ``p <- p - lr g``.
    """

    buffer_names = ("momentum",)  # kept (at 0) even when mu = 0, so any saved state loads
    hyper_names = ("lr", "momentum")

    def __init__(self, params, lr, momentum=0.0):
        super().__init__(params, lr)
        self.momentum = _rate(momentum, "momentum", low_open=False, high=1.0)

    def _update(self, xp, key, p, g):
        if self.momentum:
            b = self.state["momentum"][key]
            b *= self.momentum
            b += g  # b <- mu b + g
            g = b
        p -= self.lr * g  # p <- p - lr b


class Adam(Optimizer):
    """Adam (Kingma & Ba 2015, Algorithm 1), with an L2 penalty ``weight_decay = wd``.

    ``g <- g + wd p``, ``m <- beta1 m + (1 - beta1) g``, ``v <- beta2 v + (1 -
    beta2) g^2``, ``p <- p - lr m_hat / (sqrt(v_hat) + eps)`` with ``m_hat = m /
    (1 - beta1^t)``, ``v_hat = v / (1 - beta2^t)``; each beta in ``[0, 1)``. The
    first step moves every coordinate by ``lr g / (|g| + eps)``, at most ``lr``.
    """

    buffer_names = ("m", "v")
    hyper_names = ("lr", "betas", "eps", "weight_decay")
    decoupled = False

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        super().__init__(params, lr)
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise TypeError(f"betas: expected a pair (beta1, beta2), got {betas!r}")
        self.betas = (_rate(betas[0], "beta1", low_open=False, high=1.0),
                      _rate(betas[1], "beta2", low_open=False, high=1.0))
        self.eps = _rate(eps, "eps")
        self.weight_decay = _rate(weight_decay, "weight_decay", low_open=False)

    def _update(self, xp, key, p, g):
        b1, b2 = self.betas
        wd = self.weight_decay
        if wd and not self.decoupled:
            g = g + wd * p  # L2 penalty: g <- g + wd p
        m, v = self.state["m"][key], self.state["v"][key]
        m *= b1
        m += (1.0 - b1) * g  # m <- beta1 m + (1 - beta1) g
        v *= b2
        v += (1.0 - b2) * (g * g)  # v <- beta2 v + (1 - beta2) g^2
        c1 = 1.0 - b1 ** self.t  # bias corrections
        c2 = 1.0 - b2 ** self.t
        if wd and self.decoupled:
            p -= (self.lr * wd) * p  # AdamW: p <- p - lr wd p
        p -= self.lr * (m / c1) / (xp.sqrt(v / c2) + self.eps)  # p <- p - lr m_hat / (sqrt(v_hat) + eps)


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter 2019): ``p <- p - lr wd p``, then
    :class:`Adam`'s step without ``wd p`` in the gradient."""

    decoupled = True


class Adadelta(Optimizer):
    """Adadelta (Zeiler 2012, Algorithm 1), the step multiplied by ``lr`` as in Keras and PyTorch.

    ``g <- c g`` (``c = loss_scale``: training on ``c`` times the loss),
    ``a <- rho a + (1 - rho) g^2``, ``delta = sqrt(d + eps) / sqrt(a + eps) g``,
    ``d <- rho d + (1 - rho) delta^2``, ``p <- p - lr delta``, both averages
    starting at 0 and ``rho`` in ``[0, 1)``. The first step moves a coordinate
    by ``lr sqrt(eps) g / sqrt((1 - rho) g^2 + eps)``, at most ``lr sqrt(eps /
    (1 - rho))``. TanhMax's public code trains with PyTorch's
    ``Adadelta(lr=0.05)`` on 100 times the mean BCE: ``Adadelta(params, 0.05,
    rho=0.9, eps=1e-6, loss_scale=100)`` (:data:`refattn.training.classifier.OPTIMISERS`'s
    ``"adadelta-code"``).
    """

    buffer_names = ("square_avg", "delta_avg")
    hyper_names = ("lr", "rho", "eps", "loss_scale")

    def __init__(self, params, lr=1.0, rho=0.95, eps=1e-7, loss_scale=1.0):
        super().__init__(params, lr)
        self.rho = _rate(rho, "rho", low_open=False, high=1.0)
        self.eps = _rate(eps, "eps")
        self.loss_scale = _rate(loss_scale, "loss_scale")

    def _update(self, xp, key, p, g):
        if self.loss_scale != 1.0:
            g = self.loss_scale * g  # the gradient of loss_scale * loss
        a, d = self.state["square_avg"][key], self.state["delta_avg"][key]
        a *= self.rho
        a += (1.0 - self.rho) * (g * g)  # a <- rho a + (1 - rho) g^2
        delta = xp.sqrt(d + self.eps) / xp.sqrt(a + self.eps) * g  # RMS[delta] / RMS[g] * g
        d *= self.rho
        d += (1.0 - self.rho) * (delta * delta)  # d <- rho d + (1 - rho) delta^2
        p -= self.lr * delta  # p <- p - lr delta


class Adagrad(Optimizer):
    """Adagrad (Duchi, Hazan & Singer 2011), the diagonal form.

    ``a <- a + g^2``, ``p <- p - lr g / (sqrt(a) + eps)``, the accumulator
    starting at ``initial_accumulator_value`` (``a0 >= 0``; Keras's 0.1).
    """

    buffer_names = ("sum",)
    hyper_names = ("lr", "initial_accumulator_value", "eps")

    def __init__(self, params, lr=0.01, initial_accumulator_value=0.1, eps=1e-7):
        super().__init__(params, lr)
        self.initial_accumulator_value = _rate(initial_accumulator_value, "initial_accumulator_value", low_open=False)
        self.eps = _rate(eps, "eps")
        for acc in self.state["sum"].values():
            acc += self.initial_accumulator_value  # a <- a0

    def _update(self, xp, key, p, g):
        a = self.state["sum"][key]
        a += g * g  # a <- a + g^2
        p -= self.lr * g / (xp.sqrt(a) + self.eps)  # p <- p - lr g / (sqrt(a) + eps)
