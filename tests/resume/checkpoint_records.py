"""A checkpoint's records as the tests see them, read independently of shardq: the HDF5
base with h5dump, then the journal (PATH.journal) parsed from its documented layout
(docs/checkpoint.md "Journal"; pipeline/checkpoint_journal.h), replayed while whole.

usage: checkpoint_records.py CHECKPOINT done             "T I" per chunk recorded done
       checkpoint_records.py CHECKPOINT pending chunks   chunks not done
       checkpoint_records.py CHECKPOINT pending reductions
       checkpoint_records.py CHECKPOINT finished         finished steps, one a line
"""
import os
import re
import struct
import subprocess
import sys

MAGIC = b"SHQJRNL1"


def h5_values(path, dataset):
    text = subprocess.run(["h5dump", "-d", dataset, "-y", "-w0", path], capture_output=True, text=True, check=True).stdout
    if "DATA {" not in text:
        return []  # an empty dataset
    data = text[text.index("DATA {") + len("DATA {"):]
    data = data[:data.index("}")]
    if '"' in data:
        return re.findall(r'"([^"]*)"', data)
    return [float(v) for v in re.split(r"[\s,]+", data.strip()) if v]


def h5_generation(path):
    text = subprocess.run(["h5dump", "-a", "/generation", path], capture_output=True, text=True, check=True).stdout
    return int(re.search(r"\(0\): (\d+)", text).group(1))


def base(path):
    counts = [int(v) for v in h5_values(path, "/tasks/chunks")]
    reduction_counts = [int(v) for v in h5_values(path, "/tasks/reductions")]
    states, done = h5_values(path, "/chunks/state"), h5_values(path, "/reductions/done")
    chunks, reductions, at = {}, {}, 0
    for task, count in enumerate(counts):
        for chunk in range(count):
            chunks[(task, chunk)] = int(states[at])
            at += 1
    at = 0
    for task, count in enumerate(reduction_counts):
        for chunk in range(count):
            reductions[(task, chunk)] = int(done[at])
            at += 1
    return chunks, reductions, h5_values(path, "/finished")


def replay(path, chunks, reductions, finished):
    journal = path + ".journal"
    if not os.path.exists(journal):
        return
    data = open(journal, "rb").read()
    if len(data) < 28 or data[:8] != MAGIC or struct.unpack_from("<Q", data, 12)[0] != h5_generation(path):
        return  # written for another base
    at = 28
    while at + 16 <= len(data):
        (length,) = struct.unpack_from("<Q", data, at)
        if at + 16 + length > len(data):
            return  # torn: the save never completed
        body, at = data[at + 16:at + 16 + length], at + 16 + length
        pos = 24
        (n,) = struct.unpack_from("<Q", body, pos)
        pos += 8
        for _ in range(n):
            task, chunk, state = struct.unpack_from("<IQB", body, pos)
            chunks[(task, chunk)] = state
            pos += 4 + 8 + 1 + 8 + 8
            (mask,) = struct.unpack_from("<Q", body, pos)  # the stats words present, each a u64
            pos += 8 + 8 * bin(mask).count("1")
        (n,) = struct.unpack_from("<Q", body, pos)
        pos += 8
        for _ in range(n):
            task, chunk, done = struct.unpack_from("<IQB", body, pos)
            reductions[(task, chunk)] = done
            pos += 4 + 8 + 1 + 4
        before, n = struct.unpack_from("<QQ", body, pos)
        pos += 16
        del finished[before:]
        for _ in range(n):
            (size,) = struct.unpack_from("<Q", body, pos)
            finished.append(body[pos + 8:pos + 8 + size].decode())
            pos += 8 + size


def main():
    path, what = sys.argv[1], sys.argv[2]
    if not os.path.exists(path):
        path = path + ".prev"
    if not os.path.exists(path):
        print(0) if what == "pending" else None
        return
    chunks, reductions, finished = base(path)
    replay(path, chunks, reductions, finished)
    if what == "done":
        for task, chunk in sorted(k for k, v in chunks.items() if v == 1):
            print(task, chunk)
    elif what == "pending":
        records = chunks if sys.argv[3] == "chunks" else reductions
        print(sum(1 for v in records.values() if v == 0))
    elif what == "finished":
        print("\n".join(finished))


main()
