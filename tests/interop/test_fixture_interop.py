"""The fixture read by the real clients: huggingface `safetensors` parses every shard
header (it rejects malformed ones), `ml_dtypes` decodes the small floats, and the test
recomputes the scale rules on its own.  SHARDQ_BIN = the shardq binary."""
import json
import os
import re
import struct
import subprocess

import ml_dtypes
import numpy as np
import pytest
import safetensors
from safetensors import safe_open

SHARDQ = os.environ.get("SHARDQ_BIN")
if not SHARDQ or not os.access(SHARDQ, os.X_OK):
    pytest.skip("SHARDQ_BIN is not set to the shardq binary", allow_module_level=True)

E2M1 = np.array([0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6], dtype=np.float32)
ITEM_BITS = {"BOOL": 8, "U8": 8, "I8": 8, "F8_E4M3": 8, "F8_E8M0": 8, "BF16": 16, "F16": 16, "F32": 32, "I32": 32,
             "F64": 64, "I64": 64}


def generate(out, preset, *extra):
    subprocess.run([SHARDQ, "fixture", "--preset", preset, "--out", str(out), *extra], check=True,
                   capture_output=True, text=True)
    return out


@pytest.fixture(scope="module")
def mini(tmp_path_factory):
    return generate(tmp_path_factory.mktemp("mini"), "dsv41-mini")


@pytest.fixture(scope="module")
def ref(tmp_path_factory):
    return generate(tmp_path_factory.mktemp("ref"), "dsv41-mini-ref-nvfp4", "--engram-vocab", "300")


def shards(folder):
    return sorted(p for p in folder.iterdir() if p.suffix == ".safetensors")


def load_raw(path):
    """Every tensor's dtype, shape and raw bytes, as parsed by the safetensors library."""
    return {name: info for name, info in safetensors.deserialize(path.read_bytes())}


def inspect_table(path):
    out = subprocess.run([SHARDQ, "inspect", str(path)], check=True, capture_output=True, text=True).stdout
    table = {}
    for line in out.splitlines():
        m = re.match(r"^(\S+)\s{2,}(\S+)\s{2,}\[([0-9, ]*)\]\s+(\d+)$", line)
        if m:
            shape = [int(d) for d in m.group(3).split(",") if d.strip()]
            table[m.group(1)] = (m.group(2), shape, int(m.group(4)))
    return table


def e8m0_power(scale_bytes):
    """2^(byte - 127), computed without ml_dtypes."""
    return np.ldexp(np.float32(1), scale_bytes.astype(np.int32) - 127).astype(np.float32)


def e4m3_by_bits(codes):
    """E4M3FN decoded from its bit fields (bias 7, subnormals m * 2^-9), independent of ml_dtypes."""
    sign = np.where(codes & 0x80, -1.0, 1.0)
    exponent = (codes >> 3) & 0xF
    mantissa = (codes & 0x7).astype(np.float64)
    magnitude = np.where(exponent == 0, mantissa * 2.0 ** -9, (1 + mantissa / 8) * 2.0 ** (exponent.astype(np.int32) - 7))
    return (sign * magnitude).astype(np.float32)


def as_array(info, view_dtype):
    return np.frombuffer(info["data"], dtype=view_dtype).reshape(info["shape"])


def test_every_shard_parses_and_matches_inspect(mini):
    for path in shards(mini):
        raw = path.read_bytes()
        (header_len,) = struct.unpack("<Q", raw[:8])
        assert (8 + header_len) % 4096 == 0, f"{path.name}: data buffer not 4096-aligned"
        with safe_open(str(path), framework="numpy") as f:
            keys = set(f.keys())
            parsed = {k: (f.get_slice(k).get_dtype(), f.get_slice(k).get_shape()) for k in keys}
            assert f.metadata() == {"format": "pt"}
        tensors = load_raw(path)
        assert set(tensors) == keys
        table = inspect_table(path)
        assert set(table) == keys, path.name
        for name, info in tensors.items():
            dtype, shape, nbytes = table[name]
            assert (dtype, shape) == (info["dtype"], info["shape"]) == (parsed[name][0], list(parsed[name][1])), name
            assert nbytes == len(info["data"]) == int(np.prod(shape)) * ITEM_BITS[dtype] // 8, name


def test_index_covers_every_tensor_once(mini):
    index = json.loads((mini / "model.safetensors.index.json").read_text())
    seen, total = {}, 0
    for path in shards(mini):
        for name, info in load_raw(path).items():
            assert name not in seen, f"{name} in {seen.get(name)} and {path.name}"
            seen[name] = path.name
            total += len(info["data"])
    assert index["weight_map"] == seen
    assert index["metadata"]["total_size"] == total
    names = list(seen)
    assert shards(mini)[-2].name == seen["layers.1.engram.embed.weight"] == seen["layers.1.engram.embed.scale"]
    assert shards(mini)[-1].name == seen["layers.14.engram.embed.weight"] == seen["layers.14.engram.embed.scale"]
    assert len(load_raw(shards(mini)[-1])) == 2 and len(names) == len(set(names))


def test_config_engram_keys_match_tables(mini):
    text = json.loads((mini / "config.json").read_text())["text_config"]
    for layer, rows in zip(text["engram_layer_ids"], text["engram_num_embeddings"]):
        path = mini / json.loads((mini / "model.safetensors.index.json").read_text())["weight_map"][
            f"layers.{layer}.engram.embed.weight"]
        tensors = load_raw(path)
        assert tensors[f"layers.{layer}.engram.embed.weight"]["shape"] == [rows, text["engram_head_dim"]]
        assert tensors[f"layers.{layer}.engram.embed.scale"]["shape"] == [rows, text["engram_head_dim"] // 32]


def test_fp8_tables_dequantize_alike_and_follow_the_ceil_scale_rule(mini):
    tensors = load_raw(shards(mini)[-2])
    codes = as_array(tensors["layers.1.engram.embed.weight"], np.uint8)
    scales = as_array(tensors["layers.1.engram.embed.scale"], np.uint8)
    assert not np.any((codes & 0x7F) == 0x7F), "NaN E4M3 codes"
    assert not np.any(scales == 0xFF), "NaN E8M0 scales"
    by_ml = codes.view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    assert np.array_equal(by_ml, e4m3_by_bits(codes))
    scale_ml = scales.view(ml_dtypes.float8_e8m0fnu).astype(np.float32)
    assert np.array_equal(scale_ml, e8m0_power(scales))
    values = by_ml.reshape(-1, 8, 32) * scale_ml[:, :, None]
    # A real FP8 quantizer's block scale is 2^ceil(log2(amax / 448)), so the largest code of
    # a block is in [224, 448], except blocks below DeepSeek's 1e-4 amax floor.
    block_amax = np.abs(values).max(axis=2)
    code_amax = np.abs(by_ml.reshape(-1, 8, 32)).max(axis=2)
    regular = block_amax > 1e-4
    assert regular.mean() > 0.9
    assert np.all((code_amax[regular] >= 224) & (code_amax[regular] <= 448))
    floor_byte = 127 + int(np.ceil(np.log2(np.float32(1e-4) / np.float32(448))))
    assert np.all(scales[~regular] == floor_byte)
    zero_rows = np.all(values.reshape(len(codes), -1) == 0, axis=1)
    assert 24 <= zero_rows.sum() < len(codes) // 100


def test_fp8_linears_use_32x32_blocks(mini):
    tensors = load_raw(shards(mini)[0])
    for name in ["layers.1.engram.wkv", "layers.0.attn.wq_b", "layers.0.ffn.shared_experts.w2"]:
        weight = as_array(tensors[name + ".weight"], np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float32)
        scale = as_array(tensors[name + ".scale"], np.uint8)
        out, cols = weight.shape
        assert list(scale.shape) == [-(-out // 32), -(-cols // 32)], name
        full = np.repeat(np.repeat(e8m0_power(scale), 32, axis=0), 32, axis=1)[:out, :cols]
        values = weight * full
        for br in range(scale.shape[0]):
            for bc in range(scale.shape[1]):
                block = weight[32 * br:32 * br + 32, 32 * bc:32 * bc + 32]
                assert 224 <= np.abs(block).max() <= 448, (name, br, bc)
        assert np.isfinite(values).all()


def test_fp4_experts_pack_low_nibble_first(mini):
    tensors = load_raw(shards(mini)[0])
    for w in ["w1", "w2", "w3"]:
        name = f"layers.0.ffn.experts.3.{w}"
        assert tensors[name + ".weight"]["dtype"] == "I8"
        packed = as_array(tensors[name + ".weight"], np.uint8)
        scale = as_array(tensors[name + ".scale"], np.uint8)
        nibbles = np.stack([packed & 0xF, packed >> 4], axis=-1).reshape(packed.shape[0], -1)
        assert np.array_equal(nibbles.view(ml_dtypes.float4_e2m1fn).astype(np.float32), E2M1[nibbles])
        codes = E2M1[nibbles].reshape(packed.shape[0], -1, 32)
        assert list(scale.shape) == [packed.shape[0], packed.shape[1] * 2 // 32]
        # scale = 2^ceil(log2(amax / 6)): each block's largest code is 3, 4 or 6.
        assert np.all(np.abs(codes).max(axis=2) >= 3)
        values = codes * e8m0_power(scale)[:, :, None]
        assert np.isfinite(values).all()


def test_reference_nvfp4_preset_opens(ref):
    input_scales = {}
    for path in shards(ref):
        with safe_open(str(path), framework="numpy") as f:
            keys = list(f.keys())
        tensors = load_raw(path)
        assert set(keys) == set(tensors)
        for name, info in tensors.items():
            if name.endswith(".input_scale"):
                assert info["dtype"] == "F32" and info["shape"] == []
                input_scales[name] = struct.unpack("<f", info["data"])[0]
            if name.endswith(".weight_scale_2"):
                prefix = name[: -len(".weight_scale_2")]
                packed = as_array(tensors[prefix + ".weight"], np.uint8)
                block = as_array(tensors[prefix + ".weight_scale"], np.uint8).view(ml_dtypes.float8_e4m3fn)
                glob = struct.unpack("<f", info["data"])[0]
                nibbles = np.stack([packed & 0xF, packed >> 4], axis=-1).reshape(packed.shape[0], -1)
                values = E2M1[nibbles].reshape(packed.shape[0], -1, 16) * block.astype(np.float32)[:, :, None] * glob
                assert np.isfinite(values).all()
                assert np.abs(values).max() <= 6 * 448 * glob * (1 + 1e-6)
    maximum = max(input_scales.values())
    per_expert = {}
    for name, value in input_scales.items():
        per_expert.setdefault(name.rsplit(".w", 1)[0], []).append(value == maximum)
    assert sum(all(flags) for flags in per_expert.values()) == 2
    hf = json.loads((ref / "hf_quant_config.json").read_text())["quantization"]
    assert hf["quant_algo"] == "NVFP4" and hf["group_size"] == 16
    assert "kv_cache_quant_algo" in hf and "exclude_modules" in hf
    config = json.loads((ref / "config.json").read_text())
    assert config["quantization_config"]["quant_method"] == "modelopt"
    assert config["text_config"]["engram_embed_quant"] == "mxfp4"
