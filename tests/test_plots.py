"""The notebook helpers in refattn.plots."""

import matplotlib.pyplot as plt
import pytest

from refattn import plots


def test_save_writes_only_when_a_folder_is_set(tmp_path, monkeypatch):
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    monkeypatch.delenv("REFATTN_FIGDIR", raising=False)
    assert plots.save(fig, "x") is None
    monkeypatch.setenv("REFATTN_FIGDIR", str(tmp_path / "figs"))
    path = plots.save(fig, "x")
    assert path.endswith("x.png") and (tmp_path / "figs" / "x.png").stat().st_size > 0
    with pytest.raises(ValueError, match="name"):
        plots.save(fig, "a/b")
    plt.close(fig)


def test_small(monkeypatch):
    monkeypatch.setenv("REFATTN_SMALL", "1")
    assert plots.small()
    monkeypatch.setenv("REFATTN_SMALL", "0")
    assert not plots.small()
