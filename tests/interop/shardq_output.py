"""What the product interop tests share (not a test itself): the shardq binary and the
repository from the environment, running shardq, every tensor of a folder through the real
`safetensors` parser, and the E2M1 / E8M0 arithmetic written from docs/formats.md.

Env: SHARDQ_BIN (the shardq binary), SHARDQ_SOURCE_DIR (the repository, for the demo jobs).
"""

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from safetensors import deserialize

SHARDQ_BIN = os.environ.get("SHARDQ_BIN")
SOURCE_DIR = Path(os.environ.get("SHARDQ_SOURCE_DIR", Path(__file__).resolve().parents[2]))
E2M1_VALUES = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], dtype=np.float32)

needs_shardq = pytest.mark.skipif(not SHARDQ_BIN, reason="SHARDQ_BIN is not set")


def shardq(*args):
    result = subprocess.run([SHARDQ_BIN, *map(str, args)], capture_output=True, text=True)
    assert result.returncode == 0, f"shardq {' '.join(map(str, args))} failed:\n{result.stderr}"


def all_tensors(folder):
    """name -> (dtype string, shape, raw bytes) over every shard, through safetensors' parser."""
    tensors = {}
    for path in sorted(folder.glob("*.safetensors")):
        for name, t in deserialize(path.read_bytes()):
            assert name not in tensors, f"{name} appears in two shards"
            tensors[name] = (t["dtype"], list(t["shape"]), bytes(t["data"]))
    return tensors


def nibbles(packed):
    """[rows, cols/2] bytes -> [rows, cols] E2M1 codes, low nibble = even column."""
    out = np.empty((packed.shape[0], packed.shape[1] * 2), dtype=np.uint8)
    out[:, 0::2], out[:, 1::2] = packed & 0xF, packed >> 4
    return out


def e8m0(codes):
    return np.ldexp(np.float32(1), codes.astype(np.int32) - 127).astype(np.float32)
