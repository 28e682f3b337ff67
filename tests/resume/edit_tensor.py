"""edit_tensor.py FOLDER TENSOR EDIT: a copy-on-write edit of the shard of FOLDER that holds
TENSOR, for the bad-input and doctored-output script tests. The edited shard is replaced,
never written through (it may be a hard link of the source or of a good output); the other
shards stay as they are. EDIT is one of:
  drop            the tensor removed from its shard and from the index;
  shape=A,B       its shape changed (the same byte count);
  byte=INDEX:XOR  byte INDEX of its data xor'ed with XOR;
  code=ROW,COL    the I8 code at [ROW, COL] moved two steps (toward zero if |q| > 100);
  f32=INDEX:BITS  F32 element INDEX given the bit pattern BITS;
  f32mul=INDEX:F  F32 element INDEX multiplied by F (in fp32);
  e4m3mul=F       every non-zero E4M3 byte (U8/F8_E4M3) replaced by the code of F times its
                  value, which must be an E4M3 value exactly (e.g. F = 0.5 on power-of-two
                  block scales);
  fill=HEX        its data filled with the bytes HEX (e.g. 18191a1b) over and over.
Prints what it did.
"""

import json
import os
import struct
import sys


def shard_bytes(header, data):
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def dropped(header, data, tensor):
    """The shard without `tensor`, the others' data packed in their order."""
    entries = sorted(((k, v) for k, v in header.items() if k != "__metadata__"), key=lambda kv: kv[1]["data_offsets"][0])
    out_header = {"__metadata__": header["__metadata__"]} if "__metadata__" in header else {}
    out_data = bytearray()
    for name, entry in entries:
        if name == tensor:
            continue
        begin, end = entry["data_offsets"]
        out_header[name] = dict(entry, data_offsets=[len(out_data), len(out_data) + end - begin])
        out_data += data[begin:end]
    return shard_bytes(out_header, out_data)


def e4m3_value(code):
    """The magnitude of E4M3 code 0..0x7E (bias 7, 3 mantissa bits, subnormals below 8)."""
    exponent, mantissa = code >> 3, code & 7
    return mantissa * 2.0 ** -9 if exponent == 0 else (1 + mantissa / 8) * 2.0 ** (exponent - 7)


def edit_data(raw, base, entry, tensor, kind, arg):
    """Edits the tensor's data (starting at raw[base]) in place; returns what it did."""
    if kind == "f32":
        at, bits = (int(v, 0) for v in arg.split(":"))
        raw[base + 4 * at:base + 4 * at + 4] = struct.pack("<I", bits)
        return f"{tensor}: element {at} = bits 0x{bits:08X}"
    if kind == "f32mul":
        at, factor = arg.split(":")
        at = int(at)
        (value,) = struct.unpack("<f", raw[base + 4 * at:base + 4 * at + 4])
        new = struct.unpack("<f", struct.pack("<f", value * float(factor)))[0]
        raw[base + 4 * at:base + 4 * at + 4] = struct.pack("<f", new)
        return f"{tensor}: element {at} {value} -> {new}"
    if kind == "e4m3mul":
        codes = {e4m3_value(c): c for c in range(0x7F)}
        begin, end = entry["data_offsets"]
        for at in range(base, base + end - begin):
            if raw[at] & 0x7F:
                target = e4m3_value(raw[at] & 0x7F) * float(arg)
                assert target in codes, (tensor, raw[at], target)
                raw[at] = (raw[at] & 0x80) | codes[target]
        return f"{tensor}: every non-zero E4M3 value times {arg}"
    if kind == "fill":
        pattern = bytes.fromhex(arg)
        begin, end = entry["data_offsets"]
        raw[base:base + end - begin] = (pattern * (end - begin))[:end - begin]
        return f"{tensor}: data filled with {arg}"
    if kind == "byte":
        at, xor = (int(v, 0) for v in arg.split(":"))
        raw[base + at] ^= xor
        return f"{tensor}: data byte {at} xor 0x{xor:02X}"
    assert kind == "code" and entry["dtype"] == "I8", (kind, entry)
    row, col = (int(v) for v in arg.split(","))
    at = base + row * entry["shape"][1] + col
    q = struct.unpack("b", raw[at:at + 1])[0]
    new = q + 2 if abs(q) <= 100 else q - 2 * (1 if q > 0 else -1)
    raw[at:at + 1] = struct.pack("b", new)
    return f"{tensor}[{row}, {col}]: code {q} -> {new}"


def main(folder, tensor, edit):
    index_path = f"{folder}/model.safetensors.index.json"
    index = json.load(open(index_path))
    shard = f"{folder}/{index['weight_map'][tensor]}"
    raw = bytearray(open(shard, "rb").read())
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    if edit == "drop":
        raw = dropped(header, raw[8 + n:], tensor)
        del index["weight_map"][tensor]
        os.unlink(index_path)
        json.dump(index, open(index_path, "w"))
        done = f"dropped {tensor}"
    else:
        kind, arg = edit.split("=")
        if kind == "shape":
            header[tensor] = dict(header[tensor], shape=[int(d) for d in arg.split(",")])
            raw = shard_bytes(header, raw[8 + n:])
            done = f"{tensor}: shape {arg}"
        else:
            done = edit_data(raw, 8 + n + header[tensor]["data_offsets"][0], header[tensor], tensor, kind, arg)
    os.unlink(shard)
    with open(shard, "wb") as f:
        f.write(raw)
    print(done)


if __name__ == "__main__":
    main(*sys.argv[1:4])
