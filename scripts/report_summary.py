"""A short human summary of a shardq report (any product): per table or tensor kind the
rows, the method and the error figures, then the run's time and the report's path.

usage: python3 scripts/report_summary.py DST/REPORT.json
"""
import json
import sys


def engram_nvfp4(report):
    print(f"engram-nvfp4, method {report['method']}")
    for t in report["tables"]:
        weighted = t.get("weighted_rel_error")
        weighted = f", weighted rel error {weighted:.5f}" if weighted is not None else ""
        print(f"  {t['tensor']}: {t['rows']:,} rows, rel RMS error {t['rel_rms_error']:.5f}{weighted}, "
              f"{t['scale_underflows']} scale underflows")


def nvfp4_1017(report):
    experts, scales = report["experts"], report["input_scales"]
    state = "lossless" if experts["lossless"] else f"{experts['inexact_blocks']} inexact blocks"
    print(f"nvfp4-1017: {experts['transcoded_tensors']} expert tensors transcoded MXFP4 -> NVFP4, {state}")
    for t in report["tables"]:
        print(f"  {t['tensor']}: {t['rows']:,} rows to MXFP4, cosine {t['cosine']:.5f}, rel RMS error {t['rel_rms_error']:.5f}")
    print(f"  input scales: {scales['copied_unchanged']} copied, {len(scales['lifted'])} lifted (uncalibrated experts)")


def w8a8_int8(report):
    print(f"w8a8-int8: {report['all_zero_rows']} all-zero rows")
    for part in ("int8", "bf16"):
        for kind in report[part]:
            print(f"  {part.upper():4s} {kind['kind']}: {kind['tensors']} tensors, {kind['rows']:,} rows, "
                  f"rel RMS error {kind['rel_rms_error']:.5f} (on {kind['rel_rms_rows']:,} rows)")


def main():
    path = sys.argv[1]
    report = json.load(open(path))
    {"engram-nvfp4": engram_nvfp4, "nvfp4-1017": nvfp4_1017, "w8a8-int8": w8a8_int8}[report["product"]](report)
    run = report["run"]
    print(f"  {run['ranks']} ranks, {run['wall_seconds']:.1f} s, {run['rows_per_second']:,.0f} rows/s; report: {path}")


main()
