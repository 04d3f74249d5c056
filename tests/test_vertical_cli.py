"""``streamfl vertical`` as users run it: from a folder of their own; results written, mistakes refused in one line."""

import json
import subprocess
import sys

import pandas as pd

CLI = [sys.executable, "-m", "streamfl.cli"]


def cli(cwd, *argv):
    return subprocess.run(CLI + list(argv), capture_output=True, text=True, timeout=600, cwd=cwd)


def test_vertical_embedded_run_and_one_line_errors(tmp_path):
    (tmp_path / "v.yaml").write_text("kind: vertical\nseed: 1\nsamples: 96\nbatch_size: 16\nlocal_iterations: 3\n"
                                     "compressor: {kind: scalar, bits: 2}\n")
    proc = cli(tmp_path, "vertical", "--config", "v.yaml", "--out", "run")
    assert proc.returncode == 0, proc.stderr
    metrics = pd.read_csv(tmp_path / "run" / "metrics.csv")
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert metrics["samples"].tolist() == [16, 32, 48, 64, 80, 96]
    # per round, by hand: each party sends a (16, 16) 2-bit payload: header 6 + 16·16·2/8 = 70 bytes, up 4 × 70;
    # down, each party gets the 3 others' (3 × 70) and C_0(θ_0): θ_0 has 64·10 + 10 = 650 values, so header 6
    # (650 is a 2-byte varint) + float32 scale 4 + ⌈650·2/8⌉ = 163 → 173 bytes; 4 × (210 + 173) = 1,532
    assert metrics["bytes_up"].diff().fillna(metrics["bytes_up"]).tolist() == [280] * 6
    assert metrics["bytes_down"].diff().fillna(metrics["bytes_down"]).tolist() == [1532] * 6
    assert (summary["bytes_up"], summary["bytes_down"]) == (1680, 9192)
    assert "bytes up 1,680, down 9,192" in " ".join(proc.stdout.split())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run", "v.yaml"]

    again = cli(tmp_path, "vertical", "--config", "v.yaml", "--out", "run")
    assert again.returncode == 2 and again.stderr.strip().splitlines() == [
        "error: --out run already holds files; choose a new folder or remove it"]
    (tmp_path / "bad.yaml").write_text("kind: vertical\nbatch_size: 0\n")
    bad = cli(tmp_path, "vertical", "--config", "bad.yaml", "--out", "x")
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [
        "error: config error: batch_size: Input should be greater than or equal to 1 (got 0)"]
    assert not (tmp_path / "x").exists()


def test_header_and_summary_say_which_compressor_each_side_used_and_a_raised_top_k(tmp_path):
    # server_compressor not given: θ_0 (16·4·10 + 10 = 650 weights) goes through `compressor` too, and the run says so;
    # top-k at b = 1 on P = 16 gives ⌊16·1/32⌋ = 0, which TopK raises to k = 1: stated, not silent
    (tmp_path / "t.yaml").write_text("kind: vertical\nseed: 1\nsamples: 32\nbatch_size: 16\nlocal_iterations: 1\n"
                                     "compressor: {kind: topk, bits: 1}\n")
    proc = cli(tmp_path, "vertical", "--config", "t.yaml", "--out", "run", "--no-live")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == ("embeddings C_m: topk b = 1, k = 1 of 16 (from compressor); "
                        "top-k: ⌊P·b/32⌋ = ⌊16·1/32⌋ = 0, raised to k = 1")
    assert lines[1] == "server model C_0: topk b = 1, k = 20 of 650 (from compressor (server_compressor not given))"
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["compressors"]["server"] == {"kind": "topk", "bits": 1, "components": 650, "k": 20,
                                                "from": "compressor (server_compressor not given)"}
    assert summary["compressors"]["embeddings"]["k"] == 1
