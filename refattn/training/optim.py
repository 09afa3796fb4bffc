r"""Optimisers over a dict of arrays: SGD (with momentum), Adam, AdamW, Adadelta and Adagrad.

The parameters are a dict ``name -> array`` (NumPy or CuPy, floating point),
the dict that :meth:`refattn.core.scores.Score.init_params` returns. Each
optimiser keeps one reference to that dict and updates its arrays **in
place**, so every other holder of the same arrays (a model, a closure) sees
the new values. The gradients passed to :meth:`Optimizer.step` are a dict
with the same keys and shapes, as the ``dparams`` of
:meth:`refattn.core.scores.Score.backward`.

Update rules, for one parameter ``p`` with gradient ``g`` at step
``t = 1, 2, ...`` (all operations elementwise):

* **SGD** (Robbins & Monro 1951; heavy-ball momentum, Polyak 1964, in the
  form used by PyTorch):  ``b <- mu b + g``,  ``p <- p - lr b``
  (with ``mu = 0`` this is ``p <- p - lr g``).
* **Adam** (Kingma & Ba 2015, Algorithm 1), with an optional L2 penalty
  ``wd`` added to the gradient, ``g <- g + wd p``:

      m <- beta1 m + (1 - beta1) g
      v <- beta2 v + (1 - beta2) g^2
      m_hat = m / (1 - beta1^t),   v_hat = v / (1 - beta2^t)
      p <- p - lr m_hat / (sqrt(v_hat) + eps)

* **AdamW** (Loshchilov & Hutter 2019): Adam without the L2 term, and with
  the *decoupled* decay ``p <- p - lr wd p`` applied before the Adam update.
* **Adadelta** (Zeiler 2012, Algorithm 1, with a learning rate ``lr``
  multiplying the step, as Keras and PyTorch have it):

      a <- rho a + (1 - rho) g^2
      delta = sqrt(d + eps) / sqrt(a + eps) * g
      d <- rho d + (1 - rho) delta^2
      p <- p - lr delta

* **Adagrad** (Duchi, Hazan & Singer 2011, diagonal form):
  ``a <- a + g^2``,  ``p <- p - lr g / (sqrt(a) + eps)``, with ``a`` starting at
  ``initial_accumulator_value`` (0.1, as in Keras).

:meth:`Optimizer.state_dict` returns the hyperparameters, the step count and
copies of the buffers; :meth:`Optimizer.load_state_dict` puts them back, so a
run resumed from a saved state takes exactly the steps it would have taken.
The arithmetic uses :func:`refattn.core.backend.array_module`, so CuPy parameters
are updated on the GPU with CuPy gradients (mixing the two is a ``TypeError``).
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
        """Update every parameter in place from its gradient.

        Parameters
        ----------
        grads : dict of str to ndarray
            ``dL/dp`` for every parameter: the same keys and shapes as the
            parameter dict (e.g. the ``dparams`` of ``Score.backward``).

        Raises
        ------
        TypeError, ValueError
            For a missing or unexpected key, a wrong shape, a non-float
            gradient, or CuPy mixed with NumPy.
        """
        self._check_grads(grads)
        self.t += 1
        for key, p in self.params.items():
            xp = array_module(p, grads[key])
            self._update(xp, key, p, grads[key])

    def _update(self, xp, key, p, g):
        raise NotImplementedError

    # --- saving and resuming ---------------------------------------------------
    def state_dict(self) -> dict:
        """A snapshot: ``{"type", "t", <hyperparameters>, "state": {buffer: {key: copy}}}``.

        The buffers are copies, so later steps do not change a saved state.
        """
        out = {"type": type(self).__name__, "t": self.t}
        out.update({h: getattr(self, h) for h in self.hyper_names})
        out["state"] = {b: {k: v.copy() for k, v in bufs.items()} for b, bufs in self.state.items()}
        return out

    def load_state_dict(self, state):
        """Restore a snapshot of :meth:`state_dict` (hyperparameters, step count, copies of the buffers).

        The parameters are not part of it (the caller owns them). A state of
        another optimiser type, or whose buffers do not fit the parameters (a
        state of another model), is a ``ValueError``, and nothing is changed.
        """
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
    """Stochastic gradient descent with optional heavy-ball momentum.

    ``b <- mu b + g``, ``p <- p - lr b`` (the buffer ``b`` starts at 0, so the
    first step is ``p - lr g``); ``mu = 0`` gives plain ``p <- p - lr g``.
    This is the momentum form of PyTorch's ``SGD`` (Sutskever et al. 2013
    scale ``lr`` inside the buffer instead; the two agree for constant ``lr``).

    Parameters
    ----------
    params : dict of str to ndarray
        Updated in place.
    lr : float
        Learning rate, ``> 0``.
    momentum : float
        ``mu`` in ``[0, 1)``.

    No paper equation and no derivation file: the update is the definition,
    checked against the formula written out in ``tests/training/test_optim.py``.
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
    """Adam (Kingma & Ba 2015, Algorithm 1) with bias correction.

    ``m <- beta1 m + (1 - beta1) g``, ``v <- beta2 v + (1 - beta2) g^2``,
    ``p <- p - lr m_hat / (sqrt(v_hat) + eps)`` with ``m_hat = m / (1 - beta1^t)``
    and ``v_hat = v / (1 - beta2^t)``. With ``weight_decay = wd > 0`` the L2
    penalty ``wd |p|^2 / 2`` is added to the loss, i.e. ``g <- g + wd p``
    before the moments (as in the original paper's setting and PyTorch's
    ``Adam``); for the decoupled decay use :class:`AdamW`.

    Parameters
    ----------
    params : dict of str to ndarray
        Updated in place.
    lr : float
        Step size ``alpha``, ``> 0`` (default 1e-3).
    betas : (float, float)
        ``(beta1, beta2)``, each in ``[0, 1)`` (default (0.9, 0.999)).
    eps : float
        Added to ``sqrt(v_hat)``, ``> 0`` (default 1e-8).
    weight_decay : float
        ``wd >= 0`` (default 0).

    On the first step ``m_hat = g`` and ``v_hat = g^2`` exactly, so every
    coordinate moves by ``-lr g / (|g| + eps)``: at most ``lr``, whatever the
    scale of the gradient (a test checks this closed form). No paper
    equation; used by ``refattn.studies.neural_surface``
    (``derivations/08-neural-attention-expressivity.md``).
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
    """Adam with decoupled weight decay (Loshchilov & Hutter 2019).

    Each step first shrinks the parameter, ``p <- p - lr wd p``, and then
    takes the plain Adam step of :class:`Adam` (no ``wd p`` in the gradient,
    so the decay is not rescaled by ``1/sqrt(v_hat)``). Same parameters as
    :class:`Adam`; with ``weight_decay = 0`` the two are identical.
    """

    decoupled = True


class Adadelta(Optimizer):
    """Adadelta (Zeiler 2012, Algorithm 1), with a learning rate.

    Two running averages per coordinate, of the squared gradients and of the
    squared steps, both starting at 0:

    ``a <- rho a + (1 - rho) g^2``,
    ``delta = sqrt(d + eps) / sqrt(a + eps) * g``,
    ``d <- rho d + (1 - rho) delta^2``,
    ``p <- p - lr delta``.

    Zeiler's algorithm is ``lr = 1``; Keras and PyTorch multiply the step
    by ``lr``, and so does this class. The step's units are those of the
    parameter (the ratio of two root-mean-squares), so on the first step
    every coordinate moves by
    ``lr sqrt(eps) g / sqrt((1 - rho) g^2 + eps)``, at most
    ``lr sqrt(eps / (1 - rho))`` whatever the scale of ``g`` (a test checks
    this closed form).

    Parameters
    ----------
    params : dict of str to ndarray
        Updated in place.
    lr : float
        Multiplies the step, ``> 0`` (default 1, Zeiler's algorithm and
        PyTorch's default; Keras's default is 0.001).
    rho : float
        Decay of both averages, in ``[0, 1)`` (default 0.95, Zeiler's and
        Keras's; PyTorch's is 0.9).
    eps : float
        ``> 0`` (default 1e-7, Keras's; Zeiler's experiments use 1e-6, as
        PyTorch's default does).
    loss_scale : float
        ``> 0``: the gradients are multiplied by it first, as training on
        ``loss_scale`` times the loss does (default 1). Adadelta's step is a
        ratio of root-mean-squares, so the scale matters only against
        ``eps``, which it does not scale: on the first step a coordinate moves
        ``lr sqrt(eps) c g / sqrt((1 - rho) c^2 g^2 + eps)`` with ``c =
        loss_scale``, nearly ``lr sqrt(eps / (1 - rho))`` once ``c |g| >>
        sqrt(eps)``.

    TanhMax's public code (``Synthetic/TanhMax.ipynb``) trains its
    classifier with PyTorch's ``Adadelta(lr=0.05)``, i.e. ``rho = 0.9``,
    ``eps = 1e-6``, on 100 times the mean BCE: ``Adadelta(params, 0.05,
    rho=0.9, eps=1e-6, loss_scale=100)`` (the optimiser ``"adadelta-code"``
    of :data:`refattn.training.classifier.OPTIMISERS`); the paper's text
    (section 5.1) says Adam. No paper equation and no derivation file: the update is
    the definition, checked against the formula written out in
    ``tests/training/test_optim_adaptive.py``.
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
    """Adagrad (Duchi, Hazan & Singer 2011), the diagonal version.

    ``a <- a + g^2``,  ``p <- p - lr g / (sqrt(a) + eps)``: each coordinate's
    step shrinks with the sum of its squared gradients so far. The
    accumulator ``a`` starts at ``initial_accumulator_value`` (Keras: 0.1;
    PyTorch: 0), which bounds the first steps: the first moves every
    coordinate by ``lr g / (sqrt(a0 + g^2) + eps)``.

    Parameters
    ----------
    params : dict of str to ndarray
        Updated in place.
    lr : float
        ``> 0`` (default 0.01, PyTorch's; Keras's is 0.001).
    initial_accumulator_value : float
        ``a0 >= 0`` (default 0.1, Keras's).
    eps : float
        Added to ``sqrt(a)``, ``> 0`` (default 1e-7, Keras's).

    The state keeps the accumulator (``"sum"``); ``initial_accumulator_value``
    only matters when the optimiser is made, and a loaded state replaces the
    accumulator. No paper equation and no derivation file: the update is the
    definition, checked against the formula written out in
    ``tests/training/test_optim_adaptive.py``.
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
