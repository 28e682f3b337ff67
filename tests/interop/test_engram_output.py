"""The Engram NVFP4 product read back by the real `safetensors` library and checked in numpy.

Makes the dsv41-mini fixture, runs `shardq run` with rtn, mse and rtn + write_mode direct,
and checks every output against the source with arithmetic written here from
docs/formats.md (nothing is taken from the tool's own code):

- every tensor outside the Engram tables is byte-identical to the source;
- the dequantized tables are within the NVFP4 bound of the source, element by element;
- rel_rms_error, weight_scale_2 and the RTN block scales are recomputed independently;
- mse's error never exceeds rtn's on any block;
- index, config.json and the linked files are right.

Env: SHARDQ_BIN (the shardq binary), SHARDQ_SOURCE_DIR (the repository, for the demo job).
"""

import json
import os

import ml_dtypes
import numpy as np
import pytest
from safetensors import deserialize, safe_open

from shardq_output import E2M1_VALUES, SOURCE_DIR, needs_shardq, nibbles, shardq

DEMO_JOB = SOURCE_DIR / "jobs" / "demo-engram-nvfp4.toml"

ENGRAM_LAYERS = [1, 14]
COLS = 256
BLOCK = 16
E4M3_MAX = 448.0
E4M3_MIN_SUBNORMAL = 2.0**-9
E4M3_ONE = 0x38
MSE_ALPHA_MIN = 0.75
ROWS_PER_BATCH = 8192  # rows checked at a time: bounds the test's memory
LINKED_FILES = ["tokenizer.json", "tokenizer_config.json", "LICENSE", "generation_config.json"]
QUANT_KEYS = {
    "engram_embed_quant": "nvfp4",
    "engram_embed_block_size": 16,
    "engram_embed_scale_dtype": "e4m3",
    "engram_embed_layers": [1, 14],
}
RUNS = {
    "rtn": ["--set", 'quant.method="rtn"'],
    "mse": ["--set", 'quant.method="mse"'],
    "rtn-direct": ["--set", 'quant.method="rtn"', "--set", 'run.write_mode="direct"'],
}

pytestmark = needs_shardq


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    root = tmp_path_factory.mktemp("engram")
    src = root / "src"
    shardq("fixture", "--preset", "dsv41-mini", "--out", src)
    outputs = {}
    for name, overrides in RUNS.items():
        dst = root / name
        shardq("run", DEMO_JOB, "--src", src, "--dst", dst, *overrides)
        outputs[name] = dst
    return src, outputs


# ---- reading shards with safetensors ----

def shard_files(folder):
    return sorted(p.name for p in folder.glob("*.safetensors"))


def raw_tensors(path):
    """name -> (dtype, shape, raw bytes), through safetensors' own parser."""
    return {name: (t["dtype"], list(t["shape"]), bytes(t["data"])) for name, t in deserialize(path.read_bytes())}


def all_raw_tensors(folder):
    tensors, where = {}, {}
    for file in shard_files(folder):
        for name, value in raw_tensors(folder / file).items():
            assert name not in tensors, f"{name} appears in two shards"
            tensors[name], where[name] = value, file
    return tensors, where


def table_names(layer):
    base = f"layers.{layer}.engram.embed"
    return {
        "src_weight": f"{base}.weight", "src_scale": f"{base}.scale",
        "weight": f"{base}.weight", "scale": f"{base}.weight_scale", "global": f"{base}.weight_scale_2",
    }


def source_table_names():
    return {n for layer in ENGRAM_LAYERS for n in (table_names(layer)["src_weight"], table_names(layer)["src_scale"])}


def output_table_names():
    names = table_names
    return {n for layer in ENGRAM_LAYERS for n in (names(layer)["weight"], names(layer)["scale"], names(layer)["global"])}


def table_arrays(folder, names):
    """Raw tensors of the shard holding names[0] (numpy has no F8 dtypes: ml_dtypes views
    the bytes), as {name: (dtype string, array of the given numpy dtype)}."""
    tensors = raw_tensors(folder / shard_of(folder, names[0][0]))
    arrays = {}
    for name, dtype in names:
        stored_dtype, shape, data = tensors[name]
        arrays[name] = stored_dtype, np.frombuffer(data, dtype=dtype).reshape(shape)
    return arrays


def source_table(src, layer):
    """The source table: E4M3 codes and E8M0 scale bytes (one per 32 values)."""
    names = table_names(layer)
    arrays = table_arrays(src, [(names["src_weight"], ml_dtypes.float8_e4m3fn), (names["src_scale"], np.uint8)])
    (code_dtype, codes), (scale_dtype, scales) = arrays[names["src_weight"]], arrays[names["src_scale"]]
    assert (code_dtype, scale_dtype) == ("F8_E4M3", "F8_E8M0")
    assert codes.shape[1] == COLS and scales.shape == (codes.shape[0], COLS // 32)
    return codes, scales


def source_values(codes, scales):
    scale = np.ldexp(1.0, scales.astype(np.int64) - 127)
    return codes.astype(np.float64) * np.repeat(scale, 32, axis=1)


def output_table(dst, layer):
    """Packed codes and weight_scale_2 through safetensors' numpy API; weight_scale (F8) raw."""
    names = table_names(layer)
    with safe_open(dst / shard_of(dst, names["weight"]), framework="numpy") as f:
        packed = f.get_tensor(names["weight"])
        global_scale = f.get_tensor(names["global"])
    dtype, scales = table_arrays(dst, [(names["scale"], ml_dtypes.float8_e4m3fn)])[names["scale"]]
    assert dtype == "F8_E4M3" and scales.shape == (packed.shape[0], COLS // BLOCK)
    assert packed.dtype == np.uint8 and packed.shape[1] == COLS // 2
    assert global_scale.dtype == np.float32 and global_scale.shape == ()
    return packed, scales, np.float32(global_scale)


def shard_of(folder, name):
    return json.loads((folder / "model.safetensors.index.json").read_text())["weight_map"][name]


def dequantize(packed, scales, global_scale):
    """fp32 dequant as a consumer computes it: e2m1 * float(scale) * weight_scale_2."""
    codes = nibbles(packed)
    block_scale = np.repeat(scales.astype(np.float32), BLOCK, axis=1)
    return E2M1_VALUES[codes] * block_scale * global_scale


def half_step(magnitude):
    """Half the E2M1 grid step around |x| / s: 0.25 up to 2, 0.5 up to 4, 1 up to 6."""
    return np.where(magnitude <= 2, 0.25, np.where(magnitude <= 4, 0.5, 1.0))


def blocks(a):
    return a.reshape(a.shape[0], -1, BLOCK)


# ---- checks ----

@pytest.mark.parametrize("run", list(RUNS))
def test_unchanged_tensors_are_byte_identical(work, run):
    src, outputs = work
    source, _ = all_raw_tensors(src)
    output, _ = all_raw_tensors(outputs[run])
    assert set(source) - source_table_names() == set(output) - output_table_names()
    assert output_table_names() <= set(output)
    for name in set(source) - source_table_names():
        assert output[name] == source[name], f"{run}: {name} differs from the source"


@pytest.mark.parametrize("run", list(RUNS))
def test_table_shapes_and_dtypes(work, run):
    src, outputs = work
    output, _ = all_raw_tensors(outputs[run])
    source, _ = all_raw_tensors(src)
    for layer in ENGRAM_LAYERS:
        names = table_names(layer)
        rows = source[names["src_weight"]][1][0]
        assert output[names["weight"]][:2] == ("U8", [rows, COLS // 2])
        assert output[names["scale"]][:2] == ("F8_E4M3", [rows, COLS // BLOCK])
        assert output[names["global"]][:2] == ("F32", [])


def check_table_within_bound(x, deq, scales, global_scale, alpha_min):
    """Per element, with s = float(e4m3 scale) * weight_scale_2 (fp64, exact) and y = x / s:
    |deq - x| <= s * half_step(|y|) for |y| <= 6 (round to nearest on the E2M1 grid);
    for |y| > 6 the code saturates: deq == sign(x) * 6s, and the block scale cannot be so
    small that this goes further than amax / s <= 6 (1 + 2^-4) / alpha_min (RNE to E4M3
    moves a normal scale by <= 2^-4 of itself) or, for a subnormal scale, 6 (s + 2^-10 g) /
    (alpha_min s). A scale clamped up to 2^-9 (block amax / (6 g) < 2^-9) keeps |y| < 6,
    so its bound is the absolute 0.25 * 2^-9 * g: values below it may vanish (relative
    error up to 1). Slack 1e-6 relative: the tool divides in fp32."""
    s = np.repeat(scales.astype(np.float64), BLOCK, axis=1) * np.float64(global_scale)
    y = np.abs(x) / s
    err = np.abs(deq.astype(np.float64) - x)
    inside = y <= 6
    bound = s * half_step(y) * (1 + 1e-6)
    assert np.all(err[inside] <= bound[inside]), f"worst excess {np.max((err - bound)[inside])}"
    saturated = ~inside
    assert np.all(np.abs(deq[saturated]) == np.float32(6) * np.repeat(scales.astype(np.float32), BLOCK, axis=1)[saturated] * global_scale)
    assert np.all(np.sign(deq[saturated]) == np.sign(x[saturated]))
    scale_value = scales.astype(np.float64)
    slack = np.where(scale_value >= 2.0**-6, scale_value * 2.0**-4, 2.0**-10)
    limit = np.repeat(6 * (scale_value + slack) / (alpha_min * scale_value), BLOCK, axis=1) * (1 + 1e-6)
    assert np.all(y[saturated] <= limit[saturated]), "a block scale is smaller than its candidates allow"


def table_batches(src, dst, layer):
    codes, src_scales = source_table(src, layer)
    packed, scales, global_scale = output_table(dst, layer)
    assert packed.shape[0] == codes.shape[0]
    for first in range(0, codes.shape[0], ROWS_PER_BATCH):
        rows = slice(first, first + ROWS_PER_BATCH)
        x = source_values(codes[rows], src_scales[rows])
        yield x, dequantize(packed[rows], scales[rows], global_scale), scales[rows], global_scale


@pytest.mark.parametrize("run", list(RUNS))
def test_dequantized_tables_within_nvfp4_bound(work, run):
    src, outputs = work
    alpha_min = MSE_ALPHA_MIN if run == "mse" else 1.0
    for layer in ENGRAM_LAYERS:
        for x, deq, scales, global_scale in table_batches(src, outputs[run], layer):
            check_table_within_bound(x, deq, scales, global_scale, alpha_min)


def report_table(dst, layer):
    report = json.loads((dst / "engram-nvfp4.json").read_text())
    [table] = [t for t in report["tables"] if t["layer"] == layer]
    return report, table


@pytest.mark.parametrize("run", list(RUNS))
def test_report_figures_recomputed(work, run):
    """rel_rms_error = sqrt(sum (deq - x)^2 / sum x^2) (here in fp64); weight_scale_2 =
    fp32(amax / (6 * 448)); amax, rows and block counts from the source."""
    src, outputs = work
    for layer in ENGRAM_LAYERS:
        error_sq = reference_sq = 0.0
        amax = 0.0
        zero_blocks = blocks_seen = 0
        global_scale = None
        for x, deq, _, global_scale in table_batches(src, outputs[run], layer):
            error_sq += float(np.sum((deq.astype(np.float64) - x) ** 2))
            reference_sq += float(np.sum(x * x))
            amax = max(amax, float(np.max(np.abs(x))))
            block_amax = np.max(np.abs(blocks(x)), axis=2)
            zero_blocks += int(np.sum(block_amax == 0))
            blocks_seen += block_amax.size
        expected_global = np.float32(amax) / np.float32(6 * 448)
        assert global_scale == expected_global, f"weight_scale_2 {global_scale} != amax {amax} / 2688"
        report, table = report_table(outputs[run], layer)
        assert report["method"] == run.split("-")[0]
        assert table["amax"] == amax
        assert np.float32(table["global_scale"]) == expected_global
        assert table["blocks"] == blocks_seen
        assert table["zero_blocks"] == zero_blocks
        expected_rel = np.sqrt(error_sq / reference_sq)
        # shardq sums each block in fp32 (kernels/nvfp4.h, block_report_sums_nvfp4): every
        # block sum within 2^-21 relative, so the ratio's square root within 2^-21 too.
        assert abs(table["rel_rms_error"] - expected_rel) <= 2.0**-21 * expected_rel, (table["rel_rms_error"], expected_rel)


def test_rtn_block_scales_follow_the_amax_rule(work):
    """RTN: scale = e4m3(clamp(amax_block / fp32(6 * global), 2^-9, 448)), zero block -> 1.0;
    the underflow count of the report = non-zero blocks whose unclamped scale < 2^-9."""
    src, outputs = work
    for layer in ENGRAM_LAYERS:
        underflows = 0
        for x, _, scales, global_scale in table_batches(src, outputs["rtn"], layer):
            block_amax = np.max(np.abs(blocks(x)), axis=2).astype(np.float32)
            unclamped = block_amax / (np.float32(6) * global_scale)
            expected = np.clip(unclamped, E4M3_MIN_SUBNORMAL, E4M3_MAX).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
            expected = np.where(block_amax == 0, E4M3_ONE, expected)
            assert np.array_equal(scales.view(np.uint8), expected)
            underflows += int(np.sum((block_amax > 0) & (unclamped < E4M3_MIN_SUBNORMAL)))
        _, table = report_table(outputs["rtn"], layer)
        assert table["scale_underflows"] == underflows
        assert underflows > 0, "the fixture's tiny rows should exercise the 2^-9 clamp"


def test_mse_block_error_never_exceeds_rtn(work):
    """Per block, sum (deq - x)^2 in fp64: mse keeps the best of 8 candidates, alpha = 1
    (rtn's scale) among them, so it can only tie or win. Slack 1e-12 relative for the sum
    order (the tool folds in halves, numpy pairwise)."""
    src, outputs = work
    for layer in ENGRAM_LAYERS:
        wins = 0
        rtn = table_batches(src, outputs["rtn"], layer)
        mse = table_batches(src, outputs["mse"], layer)
        for (x, deq_rtn, _, _), (_, deq_mse, _, _) in zip(rtn, mse):
            err_rtn = np.sum(blocks((deq_rtn.astype(np.float64) - x) ** 2), axis=2)
            err_mse = np.sum(blocks((deq_mse.astype(np.float64) - x) ** 2), axis=2)
            worse = err_mse > err_rtn * (1 + 1e-12)
            assert not np.any(worse), f"layer {layer}: {int(np.sum(worse))} blocks where mse is worse than rtn"
            wins += int(np.sum(err_mse < err_rtn))
        assert wins > 0, "mse never beat rtn: the search did nothing"


def test_direct_writes_equal_owner_writes(work):
    _, outputs = work
    for file in shard_files(outputs["rtn"]):
        assert (outputs["rtn"] / file).read_bytes() == (outputs["rtn-direct"] / file).read_bytes(), file


@pytest.mark.parametrize("run", list(RUNS))
def test_index(work, run):
    _, outputs = work
    dst = outputs[run]
    index = json.loads((dst / "model.safetensors.index.json").read_text())
    tensors, where = all_raw_tensors(dst)
    assert index["weight_map"] == where
    assert index["metadata"]["total_size"] == sum(len(data) for _, _, data in tensors.values())


@pytest.mark.parametrize("run", list(RUNS))
def test_config(work, run):
    src, outputs = work
    source = json.loads((src / "config.json").read_text())
    output = json.loads((outputs[run] / "config.json").read_text())
    text = output["text_config"]
    for key, value in QUANT_KEYS.items():
        assert text.pop(key) == value, key
    assert output == source


@pytest.mark.parametrize("run", list(RUNS))
def test_unchanged_files_are_links(work, run):
    src, outputs = work
    dst = outputs[run]
    table_shards = {shard_of(dst, table_names(layer)["weight"]) for layer in ENGRAM_LAYERS}
    unchanged_shards = [f for f in shard_files(src) if f not in table_shards]
    for file in LINKED_FILES + unchanged_shards:
        out, source = dst / file, src / file
        if out.is_symlink():
            assert out.resolve() == source.resolve(), file
        else:
            assert os.stat(out).st_ino == os.stat(source).st_ino and os.stat(out).st_dev == os.stat(source).st_dev, file
    for file in table_shards:
        assert os.stat(dst / file).st_ino != os.stat(src / file).st_ino, f"{file} changed but is a link to the source"
