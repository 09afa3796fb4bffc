"""The credit line every handout, slide deck, printed document and autograder result carries.

Written here once; the exports, the book's slide decks and problem sets
(``docs/teaching.py``) and the autograder read it from :func:`credit`. The
licences are the repository's ``LICENSE`` (shipped whole with every handout):
code under the MIT licence, text under CC BY 4.0.
"""

from __future__ import annotations

__all__ = ["PAPERS", "LICENCES", "credit"]

#: The papers the project draws on, by the short names it cites them by (README.md has the table).
PAPERS = ("TanhMax (Huang, Yang & Wang, 2024)", "Cog (Lv et al., 2024)", "NeuralAttn (DiGiugno & Mahmood, 2025)",
          "Expressive (Gros, 2024)")
#: The licence of each kind of material (the repository's LICENSE says which is which).
LICENCES = {"text": "text under CC BY 4.0 (creativecommons.org/licenses/by/4.0)",
            "code": "code under the MIT licence (LICENSE)"}


def credit(*kinds) -> str:
    """The one-line credit of a piece of material made of ``kinds`` (``"text"``, ``"code"``, or both)."""
    return (f"From refattn (the refattn authors, 2026), {' and '.join(LICENCES[k] for k in kinds)}; "
            f"after {', '.join(PAPERS[:-1])} and {PAPERS[-1]}.")
