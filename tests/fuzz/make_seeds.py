#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora (tests/fuzz/corpus/TARGET/) from the test fixtures and
configs, in each target's input layout (see the fuzz_*.cpp headers). Small on purpose: the
fuzzer grows its own corpus in build-fuzz/. Run from anywhere: python3 tests/fuzz/make_seeds.py
"""
import os
import struct

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
fixtures = os.path.join(root, "tests", "fixtures")
corpus = os.path.join(root, "tests", "fuzz", "corpus")


def read(*path):
    with open(os.path.join(root, *path), "rb") as f:
        return f.read()


def seed(target, name, data):
    os.makedirs(os.path.join(corpus, target), exist_ok=True)
    with open(os.path.join(corpus, target, name), "wb") as f:
        f.write(data)


for dtype in ("u16", "i32"):
    idx = read("tests", "fixtures", f"gpt_dataset_{dtype}.idx")
    bin_bytes = len(read("tests", "fixtures", f"gpt_dataset_{dtype}.bin"))
    # fuzz_indexed_dataset: u16 .bin size, then the .idx
    seed("indexed_dataset", dtype, struct.pack("<H", bin_bytes) + idx)
    # fuzz_gpt_dataset: u16 seq_len, u32 samples, u32 seed, u8 split, splits "\n", u16 bin, idx
    seed("gpt_dataset", dtype,
         struct.pack("<HIIB", 16, 50, 1234, 0) + b"90,5,5\n" + struct.pack("<H", bin_bytes) + idx)

seed("config", "gpt-tiny", read("configs", "demo", "gpt-tiny.yaml") + b"\0training.max_steps=3")
seed("config", "bert-tiny", read("configs", "demo", "bert-tiny.yaml"))
seed("config", "phases", read("configs", "bert", "base.yaml") + b"\0optimizer.lr=1e-4")

seed("gpt2_tokenizer", "english", b"Hello, world! It's 2026 -- the sea was calm.\n\n  tabs\tand  spaces")
seed("gpt2_tokenizer", "unicode", "caf\u00e9 \u00fcber \u65e5\u672c\u8a9e \U0001F600 <|endoftext|>".encode())
seed("gpt2_tokenizer_files", "small",
     b'{"a": 0, "b": 1, "ab": 2, "\\u0120": 3, "<|endoftext|>": 4}\0#version: 0.2\na b\n')
seed("wordpiece_tokenizer", "english",
     b"Hello, World! Don't stop \xc3\xa9t\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac\0[PAD]\n[UNK]\nhello\n##lo\nworld\n")
seed("document_reader", "jsonl", b'{"text": "first document"}\n\n{"text": "second \\u00e9", "id": 2}\n')
seed("document_reader", "text", b"Plain text is one document.\nSecond line.\n")


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def checkpoint(meta, tensors):
    """A checkpoint file in the layout of src/checkpoint/checkpoint.h."""
    import json
    table, data = [], b""
    for name, dtype, shape, raw in tensors:
        data += b"\0" * (-len(data) % 64)
        table.append({"name": name, "dtype": dtype, "shape": shape, "offset": len(data),
                      "bytes": len(raw)})
        data += raw
    header = json.dumps({"step": 1, "meta": meta, "tensors": table}).encode()
    head = b"COLLAGE-CKPT" + struct.pack("<IQQ", 1, len(header), len(data)) + header
    head += b"\0" * (-len(head) % 64)
    body = head + data
    return body + struct.pack("<I", crc32c(body))


config = read("configs", "demo", "gpt-tiny.yaml").decode()
seed("checkpoint", "small", checkpoint(
    {"step": 1, "precision": "bf16", "config": config},
    [("wte.weight", "bf16", [2, 3], bytes(range(12))), ("step", "i32", [], struct.pack("<i", 1))]))

# fuzz_bert_hdf5: the file itself. The h5py-written fixtures: int32 rows chunked and
# gzip-compressed, mixed integer widths, and refusals that get past libhdf5 (a float dataset,
# a wrong rank, an int64 value beyond int32).
for name in ("valid_int32", "widths", "float_dtype", "wrong_rank", "overflow_int64"):
    seed("bert_hdf5", name, read("tests", "fixtures", "bert_hdf5", f"{name}.hdf5"))
