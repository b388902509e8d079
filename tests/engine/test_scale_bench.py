"""bench/scale.py end to end on a small synthetic model: every figure is timed on our engine, the
roofline share printed, and (llama.cpp absent) the run says so instead of failing."""

import sys

from bench import scale
from bench.synthetic import Shape, synthetic_model

SMALL = Shape(n_layers=2, d_model=256, ffn_dim=512, n_heads=4, n_kv_heads=2)


def test_scale_times_every_figure_and_the_roofline(tmp_path, model_path, capsys, monkeypatch):
    path = synthetic_model(SMALL, "q4_k_m", cache=tmp_path)
    monkeypatch.setitem(sys.modules, "llama_cpp", None)          # import llama_cpp fails: ours alone
    monkeypatch.setenv("LLMBUS_CACHE", str(tmp_path))
    scale.main(["--model", str(path), "--threads", "1", "--clock", "cpu", "--rounds", "1"])
    out = capsys.readouterr().out
    assert "llama_cpp is not importable" in out
    for figure in scale.FIGURES:
        assert f"round 1 {figure}" in out and f"  {figure:<11} ours" in out
    assert "of the roofline" in out and "cpu clock" in out


def test_the_cpu_clock_wants_one_thread(capsys):
    import pytest
    with pytest.raises(SystemExit):
        scale.parse(["--clock", "cpu", "--threads", "2"])
    assert "needs --threads 1" in capsys.readouterr().err
