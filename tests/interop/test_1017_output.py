"""The nvfp4-1017 product read back by the real `safetensors` library and checked in numpy
(ml_dtypes for the FP8 values), with arithmetic written here from docs/formats.md:

- every transcoded expert dequantizes to the source's fp32 values bit for bit
  (E2M1 x E8M0 per 32 == E2M1 x E4M3 per 16 x weight_scale_2);
- weight_scale_2 = 2^(emax - 135), emax over w1 and w3 of one expert together, w2 alone;
- input scales are the reference's, except an uncalibrated expert's (all three at the
  model-wide maximum) w1/w3, lifted to the largest calibrated value of its layer;
- the Engram MXFP4 tables' cosine and error against the FP8 source match the report;
- config.json and hf_quant_config.json are the reference's (plus the Engram keys).

Env: SHARDQ_BIN (the shardq binary), SHARDQ_SOURCE_DIR (the repository, for the demo job).
"""

import json

import ml_dtypes
import numpy as np
import pytest

from shardq_output import E2M1_VALUES, SOURCE_DIR, all_tensors, e8m0, needs_shardq, nibbles, shardq

DEMO_JOB = SOURCE_DIR / "jobs" / "demo-1017-nvfp4.toml"

pytestmark = needs_shardq


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    root = tmp_path_factory.mktemp("nvfp4_1017")
    src, ref, dst = root / "src", root / "ref", root / "dst"
    shardq("fixture", "--preset", "dsv41-mini", "--out", src, "--engram-vocab", 600)
    shardq("fixture", "--preset", "dsv41-mini-ref-nvfp4", "--out", ref, "--engram-vocab", 600)
    shardq("run", DEMO_JOB, "--src", src, "--dst", dst, "--set", f'quant.input_scales_from="{ref}"',
           "--set", "run.rows_per_chunk=100")
    return src, ref, dst, all_tensors(src), all_tensors(ref), all_tensors(dst)


def u8(raw):
    return np.frombuffer(raw[2], dtype=np.uint8).reshape(raw[1])


def f32_scalar(raw):
    assert raw[0] == "F32" and raw[1] == []
    return np.frombuffer(raw[2], dtype=np.float32)[0]


def experts(tensors):
    return sorted({n.rsplit(".", 1)[0] for n in tensors if ".ffn.experts." in n and n.startswith("layers.") and n.endswith(".weight")})


def test_transcoded_experts_are_bit_exact(work):
    _, _, _, src, _, dst = work
    names = experts(src)
    assert len(names) == 384
    for prefix in names:
        assert src[prefix + ".weight"][0] == "I8" and dst[prefix + ".weight"][0] == "U8"
        codes = nibbles(u8(src[prefix + ".weight"]))
        assert np.array_equal(u8(src[prefix + ".weight"]), u8(dst[prefix + ".weight"])), "codes changed"
        source = E2M1_VALUES[codes] * np.repeat(e8m0(u8(src[prefix + ".scale"])), 32, axis=1)
        assert dst[prefix + ".weight_scale"][0] == "F8_E4M3"
        block = u8(dst[prefix + ".weight_scale"]).view(ml_dtypes.float8_e4m3fn).astype(np.float32)
        output = E2M1_VALUES[codes] * np.repeat(block, 16, axis=1) * f32_scalar(dst[prefix + ".weight_scale_2"])
        assert np.array_equal(source.view(np.uint32), output.astype(np.float32).view(np.uint32)), prefix


def test_global_scale_shared_by_w1_and_w3(work):
    _, _, _, src, _, dst = work
    for prefix in {n.rsplit(".", 1)[0] for n in experts(src)}:
        gate_up = max(u8(src[f"{prefix}.w{p}.scale"]).max() for p in (1, 3))
        down = u8(src[f"{prefix}.w2.scale"]).max()
        for p, emax in ((1, gate_up), (3, gate_up), (2, down)):
            assert f32_scalar(dst[f"{prefix}.w{p}.weight_scale_2"]) == np.ldexp(np.float32(1), int(emax) - 135), prefix


def test_input_scales_imported_and_lifted(work):
    _, ref_dir, dst_dir, src, ref, dst = work
    names = experts(src)
    reference = {n: f32_scalar(ref[n + ".input_scale"]) for n in names}
    model_max = max(reference.values())
    by_expert = {}
    for n in names:
        by_expert.setdefault(n.rsplit(".", 1)[0], []).append(n)
    uncalibrated = {e for e, projections in by_expert.items() if all(reference[p] == model_max for p in projections)}
    assert uncalibrated, "the fixture has uncalibrated experts"
    lifted = 0
    for n in names:
        expert, projection = n.rsplit(".", 1)
        layer = expert.split(".")[1]
        expected = reference[n]
        if expert in uncalibrated and projection != "w2":
            expected = max(reference[m] for m in names
                           if m.split(".")[1] == layer and m.endswith(projection) and m.rsplit(".", 1)[0] not in uncalibrated)
            lifted += expected != reference[n]
        assert f32_scalar(dst[n + ".input_scale"]) == expected, n
    report = json.loads((dst_dir / "nvfp4-1017.json").read_text())["input_scales"]
    assert len(report["lifted"]) == lifted > 0  # a lift to the value it had is a copy
    assert report["copied_unchanged"] == len(names) - lifted


def test_engram_tables_cosine_and_error(work):
    _, _, dst_dir, src, _, dst = work
    report = {t["layer"]: t for t in json.loads((dst_dir / "nvfp4-1017.json").read_text())["tables"]}
    for layer in (1, 14):
        name = f"layers.{layer}.engram.embed"
        fp8 = u8(src[name + ".weight"]).view(ml_dtypes.float8_e4m3fn).astype(np.float32)
        x = (fp8 * np.repeat(e8m0(u8(src[name + ".scale"])), 32, axis=1)).astype(np.float64)
        assert dst[name + ".weight"][0] == "U8" and dst[name + ".scale"][0] == "F8_E8M0"
        deq = E2M1_VALUES[nibbles(u8(dst[name + ".weight"]))] * np.repeat(e8m0(u8(dst[name + ".scale"])), 32, axis=1)
        deq = deq.astype(np.float64)
        cosine = float(np.sum(x * deq) / np.sqrt(np.sum(x * x) * np.sum(deq * deq)))
        rel_rms = float(np.sqrt(np.sum((deq - x) ** 2) / np.sum(x * x)))
        assert cosine > 0.99
        assert abs(cosine - report[layer]["cosine"]) < 1e-9
        assert abs(rel_rms - report[layer]["rel_rms_error"]) < 1e-9


def test_configs_are_the_references(work):
    _, ref_dir, dst_dir, _, ref, dst = work
    assert json.loads((dst_dir / "hf_quant_config.json").read_text()) == json.loads((ref_dir / "hf_quant_config.json").read_text())
    config, expected = json.loads((dst_dir / "config.json").read_text()), json.loads((ref_dir / "config.json").read_text())
    assert config == expected  # the reference already carries the Engram MXFP4 keys
    assert {n: (t[0], t[1]) for n, t in dst.items()} == {n: (t[0], t[1]) for n, t in ref.items()}
