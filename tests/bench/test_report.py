"""``bench.report``: the JSON report and the plot written only where asked, one way for every
benchmark command; the peak memory; matplotlib asked for before a plotted run."""

import json

import pytest

from resispec_gguf.bench import report
from resispec_gguf.errors import UserError


def test_the_report_and_the_plot_are_written_only_where_asked(tmp_path):
    body = {"rows": [1, 2], "name": "x"}
    drawn = []
    assert report.write_report(body, None, None, drawn.append) is body and drawn == []
    assert report.write_report(body, None, str(tmp_path / "p.png")) is body  # nothing to draw with
    path = tmp_path / "r.json"
    report.write_report(body, str(path), str(tmp_path / "p.png"), drawn.append)
    assert json.loads(path.read_text(encoding="utf-8")) == body and path.read_text().startswith('{\n  "rows"')
    assert drawn == [str(tmp_path / "p.png")]


def test_the_peak_resident_set_is_positive_and_never_falls():
    first = report.peak_rss_mb()
    assert first > 0 and report.peak_rss_mb() >= first


def test_a_plot_without_matplotlib_names_the_extra(monkeypatch):
    import builtins

    real = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    with pytest.raises(UserError, match=r"--plot needs matplotlib: pip install -e '\.\[plot\]'"):
        report.require_pyplot()
