#!/usr/bin/env python3
"""Writes the tracked seed files of tests/fuzz/corpus: a few valid shards and one of each
malformed kind the parser must refuse (docs/formats.md "Untrusted input"), and two shard
indexes behind a length field."""
import json
import pathlib
import struct

CORPUS = pathlib.Path(__file__).resolve().parent / "corpus"


def shard(header: str, buffer_bytes: int, length=None) -> bytes:
    raw = header.encode("utf-8", "surrogateescape")
    return struct.pack("<Q", len(raw) if length is None else length) + raw + bytes(buffer_bytes)


def entry(dtype, shape, begin, end):
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


def main():
    CORPUS.mkdir(exist_ok=True)
    valid = {"__metadata__": {"format": "pt"}, "w": entry("BF16", [2, 3], 0, 12), "s": entry("F8_E4M3", [2], 12, 14),
             "p": entry("F4", [2, 4], 14, 18), "z": entry("F32", [0, 7], 18, 18)}
    seeds = {
        "valid_small": shard(json.dumps(valid), 18),
        "valid_padded": shard(json.dumps({"a": entry("U8", [3], 0, 3)}) + " " * 21, 3),
        "empty_object": shard("{}", 0),
        "overlap": shard(json.dumps({"a": entry("F32", [2], 0, 8), "b": entry("F32", [2], 4, 12)}), 12),
        "gap": shard(json.dumps({"a": entry("F32", [1], 0, 4), "b": entry("F32", [1], 8, 12)}), 12),
        "past_eof": shard(json.dumps({"a": entry("F32", [2], 0, 8)}), 4),
        "wrapping_dim": shard(json.dumps({"w": entry("U8", [4398046511105, 4194304], 0, 4194304)}), 0),
        "duplicate_key": shard('{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
                               '"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}', 2),
        "length_u64_max": shard("{}", 0, length=2**64 - 1),
        "bad_metadata": shard(json.dumps({"__metadata__": {"k": 1}}), 0),
        # found by the fuzzer: a number past double range threw an unhandled JSON exception
        "number_out_of_range": shard('{"a":{"dtype":"U8","shape":[999e999999],"data_offsets":[0,1]}}', 1),
        # shard indexes (the text after the length field is read as one, too)
        "index_valid": shard(json.dumps({"metadata": {"total_size": 18, "format": "pt"},
                                         "weight_map": {"w": "model-00001-of-00002.safetensors",
                                                        "s": "model-00002-of-00002.safetensors"}}, indent=2), 0),
        "index_nested": shard(json.dumps({"weight_map": {"w": "a.safetensors"}, "metadata": {"n": {"k": [1]}}}), 0),
    }
    for name, data in seeds.items():
        (CORPUS / name).write_bytes(data)


if __name__ == "__main__":
    main()
