"""bench/stack_memory.py's readings: a shard process's layers from its command line, its resident
set from /proc, and its KV pool's bytes derived from the model's shape."""

import subprocess
import sys

from bench.stack_memory import kv_pool_bytes, process_layers, process_rss
from bench.synthetic import Shape, synthetic_model

SMALL = Shape(n_layers=4, d_model=256, ffn_dim=512, n_heads=4, n_kv_heads=2)


def test_a_processes_layers_and_resident_set_are_read_from_proc():
    child = subprocess.Popen([sys.executable, "-c", "import sys; print('up', flush=True); sys.stdin.read()",
                              "--layers", "3:7"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert child.stdout.readline() == b"up\n"              # the interpreter is running
        assert process_layers(child.pid) == (3, 7)
        assert 1 << 20 < process_rss(child.pid) < 1 << 30      # an interpreter: MiBs, not GiBs
    finally:
        child.communicate(b"")


def test_the_kv_pool_is_k_and_v_in_float16_for_every_layer_held(tmp_path):
    path = synthetic_model(SMALL, "q4_0", cache=tmp_path)
    head_dim = 256 // 4
    per_token_layer = 2 * 2 * head_dim * 2                      # K and V, 2 KV heads, float16
    assert kv_pool_bytes(path, 1, 4, pages=10) == 3 * 10 * 16 * per_token_layer
