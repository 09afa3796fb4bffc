"""The papers' propositions as code: Proposition 1 and the closed forms of Delta_II (derivations 03, 04),
the four properties (06), Proposition 2 and the range of TanhMax (05), signexp at 0 (09)."""

from ..core.activations import ACTIVATIONS, Activation, activation

__all__ = ["as_activation"]


def as_activation(given) -> Activation:
    """``given``, an Activation or a registered activation's name, as an Activation (errors name ``activation``)."""
    if isinstance(given, Activation):
        return given
    if not isinstance(given, str):
        raise TypeError(f"activation: expected a registered activation's name or an Activation, "
                        f"got {type(given).__name__}")
    try:
        return activation(given)
    except ValueError:
        raise ValueError(f"activation: unknown activation {given!r}; expected one of {ACTIVATIONS}, a name "
                         f"registered by define_activation, or an Activation") from None
