"""The w8a8-int8 product read back by the real `safetensors` library and checked in numpy
(ml_dtypes for FP8 and BF16), with arithmetic written here from the format rules, nothing
taken from the tool's code:

- the source's linears decoded here: FP8 E4M3 [out, in] x E8M0 per 32x32 block
  ([ceil(out/32), ceil(in/32)]), or DeepSeek FP4 experts I8 [out, in/2] (two E2M1 codes per
  byte, low nibble = even column) x E8M0 [out, in/32];
- every INT8 linear: weight I8 [out, in], weight_scale F32 [out, 1] equal to the row's amax
  / 127 in fp32 (1.0 for an all-zero row), codes equal to clamp(rint(x / scale), -127, 127)
  with an fp32 quotient, q * scale within half a step of the source, max |q| == 127 on
  every non-zero row, never -128;
- every ignore-matched linear: BF16 [out, in], the round-to-nearest-even of the source,
  its scale dropped;
- every other tensor byte-identical to the source's (Engram tables, embeddings, norms,
  router gates, BF16 and F32 tensors), the key set as planned;
- config.json: the source's with quantization_config = the product's block;
- the report's per-kind rel_rms_error recomputed: INT8 kinds on rows 0, 16, 32, ... of
  each tensor (the report's documented sample), BF16 kinds on every row.

Env: SHARDQ_BIN (the shardq binary), SHARDQ_SOURCE_DIR (the repository, for the demo job).
"""

import json
import tomllib

import ml_dtypes
import numpy as np
import pytest

from shardq_output import E2M1_VALUES, SOURCE_DIR, all_tensors, e8m0, needs_shardq, nibbles, shardq

DEMO_JOB = SOURCE_DIR / "jobs" / "demo-w8a8-int8.toml"
IGNORE = tomllib.loads(DEMO_JOB.read_text())["quant"]["ignore"]
REPORT_ROW_STRIDE = 16  # docs/formats.md "INT8": the rows the INT8 error figures use

pytestmark = needs_shardq


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    root = tmp_path_factory.mktemp("int8")
    src, dst = root / "src", root / "dst"
    shardq("fixture", "--preset", "dsv41-mini", "--out", src, "--engram-vocab", 600)
    shardq("run", DEMO_JOB, "--src", src, "--dst", dst, "--set", "run.rows_per_chunk=100")
    return src, dst, all_tensors(src), all_tensors(dst)


def array(raw, dtype):
    return np.frombuffer(raw[2], dtype=dtype).reshape(raw[1])


def ignore_matches(module, ignore):
    """An entry matches where it occurs on component boundaries of the dotted name; an entry
    ending in '.' matches every module under it."""
    for entry in ignore:
        at = module.find(entry)
        while entry and at >= 0:
            end = at + len(entry)
            if (at == 0 or module[at - 1] == ".") and (entry.endswith(".") or end == len(module) or module[end] == "."):
                return True
            at = module.find(entry, at + 1)
    return False


def source_linears(src):
    """module -> fp32 [out, in] decoded source, for every quantized linear."""
    out = {}
    for name, (dtype, shape, _) in src.items():
        module = name[: -len(".weight")]
        if not name.endswith(".weight") or "engram.embed" in name or src.get(module + ".scale", ("",))[0] != "F8_E8M0":
            continue
        scale = e8m0(array(src[module + ".scale"], np.uint8))
        if dtype == "F8_E4M3":
            rows, cols = shape
            codes = array(src[name], np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float32)
            assert scale.shape == ((rows + 31) // 32, (cols + 31) // 32)
            out[module] = codes * np.repeat(np.repeat(scale, 32, axis=0), 32, axis=1)[:rows, :cols]
        else:
            assert dtype == "I8", (name, dtype)
            assert scale.shape == (shape[0], shape[1] * 2 // 32)
            out[module] = E2M1_VALUES[nibbles(array(src[name], np.uint8))] * np.repeat(scale, 32, axis=1)
    return out


@pytest.fixture(scope="module")
def linears(work):
    _, _, src, _ = work
    decoded = source_linears(src)
    assert len(decoded) == 162 + 432  # FP8 linears, FP4 experts
    return decoded


def test_int8_linears_within_half_a_step(work, linears):
    _, _, _, dst = work
    checked = 0
    for module, x in linears.items():
        if ignore_matches(module, IGNORE):
            continue
        weight, scale_raw = dst[module + ".weight"], dst[module + ".weight_scale"]
        assert weight[0] == "I8" and weight[1] == list(x.shape), (module, weight[:2])
        assert scale_raw[0] == "F32" and scale_raw[1] == [x.shape[0], 1], (module, scale_raw[:2])
        assert module + ".scale" not in dst
        q = array(weight, np.int8)
        scale = array(scale_raw, np.float32)[:, 0]
        amax = np.abs(x).max(axis=1)
        zero = amax == 0
        expected_scale = np.where(zero, np.float32(1), amax / np.float32(127)).astype(np.float32)
        assert np.array_equal(scale.view(np.uint32), expected_scale.view(np.uint32)), f"{module}: weight_scale != amax / 127"
        # The rule itself: fp32 quotient, round half to even, clamp.
        quotient = (x / scale[:, None]).astype(np.float32)
        expected = np.clip(np.rint(quotient), -127, 127).astype(np.int8)
        bad = np.argwhere(q != expected)
        assert bad.size == 0, f"{module}: code at {bad[0]} is {q[tuple(bad[0])]}, {expected[tuple(bad[0])]} expected"
        assert not np.any(q == -128), module
        # Within half a step (plus one fp32 rounding of the quotient), in fp64.
        error = np.abs(q.astype(np.float64) * scale[:, None].astype(np.float64) - x.astype(np.float64))
        assert np.all(error <= scale[:, None].astype(np.float64) * (0.5 + 2.0**-16)), module
        largest = np.abs(q.astype(np.int32)).max(axis=1)
        assert np.all(largest[~zero] == 127), f"{module}: rows {np.flatnonzero(largest[~zero] != 127)} do not reach 127"
        assert np.all(largest[zero] == 0), module
        checked += 1
    assert checked == 529


def test_ignored_linears_are_bf16_of_the_source(work, linears):
    _, _, _, dst = work
    checked = 0
    for module, x in linears.items():
        if not ignore_matches(module, IGNORE):
            continue
        weight = dst[module + ".weight"]
        assert weight[0] == "BF16" and weight[1] == list(x.shape), (module, weight[:2])
        assert module + ".scale" not in dst and module + ".weight_scale" not in dst, module
        expected = x.astype(ml_dtypes.bfloat16)  # round to nearest even
        assert np.array_equal(array(weight, np.uint16), expected.view(np.uint16)), module
        # FP8 and FP4 values times a power of two are BF16 numbers: nothing is lost.
        assert np.array_equal(expected.astype(np.float32), x), module
        checked += 1
    assert checked == 65
    assert {m.split(".", 2)[-1] if m.startswith("layers.") else m for m in linears if ignore_matches(m, IGNORE)} >= {
        "attn.wq_a", "attn.wkv", "attn.wo_a", "attn.compressor.wkv", "attn.compressor.wgate", "attn.indexer.wk", "engram.wkv"}
    # "attn.wkv" does not reach into attn.compressor.wkv's name, nor "engram.wkv" into others.
    assert not ignore_matches("layers.2.attn.compressor.wkv", ["attn.wkv"])
    assert dst["layers.2.attn.indexer.wq_b.weight"][0] == "I8"


def test_everything_else_copied_byte_for_byte(work, linears):
    _, _, src, dst = work
    produced = set()
    for module in linears:
        produced.add(module + ".weight")
        if not ignore_matches(module, IGNORE):
            produced.add(module + ".weight_scale")
    scales = {m + ".scale" for m in linears}
    expected_names = (set(src) - scales) | produced
    assert set(dst) == expected_names, (sorted(set(dst) - expected_names)[:5], sorted(expected_names - set(dst))[:5])
    copied = [n for n in src if n not in scales and n not in produced]
    for name in copied:
        assert dst[name] == src[name], f"{name} is not byte-identical to the source"
    kinds = {n for n in copied if "engram.embed" in n}
    assert kinds == {f"layers.{l}.engram.embed.{p}" for l in (1, 14) for p in ("weight", "scale")}
    for must in ("embed.weight", "head.weight", "norm.weight", "layers.0.ffn.gate.weight", "layers.0.ffn.gate.bias",
                 "layers.2.attn.indexer.weights_proj.weight", "layers.1.engram.q_weight", "layers.0.hc_attn_fn"):
        assert must in copied, must


def test_config_quantization_block(work):
    src_dir, dst_dir, _, _ = work
    source = json.loads((src_dir / "config.json").read_text())
    config = json.loads((dst_dir / "config.json").read_text())
    expected = {"quant_method": "w8a8_int8", "activation_scheme": "dynamic", "is_dynamic": True,
                "is_checkpoint_int8_serialized": True, "expert_dtype": "int8", "ignore": IGNORE}
    assert config["quantization_config"] == expected
    del source["quantization_config"], config["quantization_config"]
    assert config == source
    index = json.loads((dst_dir / "model.safetensors.index.json").read_text())["weight_map"]
    assert set(index) == set(all_tensors(dst_dir))


def test_report_figures(work, linears):
    _, dst_dir, _, dst = work
    report = json.loads((dst_dir / "w8a8-int8.json").read_text())
    sums = {}
    for module, x in linears.items():
        ignored = ignore_matches(module, IGNORE)
        kind = ".".join(p for i, p in enumerate(module.split(".")) if not p.isdigit() and not (i == 0 and p == "layers"))
        if ignored:
            deq = array(dst[module + ".weight"], np.uint16).view(ml_dtypes.bfloat16).astype(np.float32)
        else:
            scale = array(dst[module + ".weight_scale"], np.float32)
            deq = (array(dst[module + ".weight"], np.int8).astype(np.float32) * scale).astype(np.float32)
        # INT8 kinds measure the error on rows 0, 16, 32, ... of each tensor; BF16 on all.
        sample = slice(None) if ignored else slice(None, None, REPORT_ROW_STRIDE)
        entry = sums.setdefault((ignored, kind), [0, 0.0, 0.0, 0, 0])
        entry[0] += 1
        entry[1] += float(np.sum((deq[sample].astype(np.float64) - x[sample].astype(np.float64)) ** 2))
        entry[2] += float(np.sum(x[sample].astype(np.float64) ** 2))
        entry[3] += x.shape[0]
        entry[4] += x[sample].shape[0]
    for section, ignored in (("int8", False), ("bf16", True)):
        kinds = {k["kind"]: k for k in report[section]}
        assert set(kinds) == {kind for (i, kind) in sums if i == ignored}, section
        for kind, k in kinds.items():
            tensors, error_sq, reference_sq, rows, sampled = sums[(ignored, kind)]
            assert k["tensors"] == tensors and k["rows"] == rows, (section, kind)
            assert k["rel_rms_rows"] == sampled, (section, kind, k["rel_rms_rows"], sampled)
            # INT8 rows sum integer terms, each within half a unit of its square
            # (docs/formats.md "INT8"): the figure within 1e-3 of the fp64 one.
            want = np.sqrt(error_sq / reference_sq)
            tolerance = 1e-3 * want if section == "int8" else 1e-9
            assert abs(k["rel_rms_error"] - want) <= tolerance, (section, kind, k["rel_rms_error"], want)
    assert report["all_zero_rows"] == 0
    assert report["parameters"]["ignore"] == IGNORE
