#!/usr/bin/python3
"""Checks the shards `collage prepare-bert` wrote, with h5py and numpy (independent of collage's
reader, src/data/bert/bert_hdf5.h). Run by tests/cli/prepare_bert_cli_test.cpp:

  check_prepare_bert.py SHARD_DIR EXPECTED.json

EXPECTED.json: {"seq_len", "max_predictions", "masked_lm_prob", "shard_size", "instances",
"cls", "sep", "mask", "vocab_size", "documents": [[ids of document 0, sentences back to back],
...]} (the ids are the WordPiece tokenizer's ids of the input text, line by line).

Checks the layout of NVIDIA DeepLearningExamples' create_pretraining_data.py (dataset names,
dtypes i4/i1/i1/i4/i4/i1, shapes, gzip), then every row: [CLS] A [SEP] B [SEP] with the masked
labels put back, input_mask 1 up to the length, segment ids 0 through the first [SEP] and 1 to
the end, zero padding, masked positions sorted, unique, inside the pair and never [CLS]/[SEP],
their number min(P, max(1, round(L * prob))); A a contiguous span of some document and, for
label 0, B a span of the same document after A's start. Then the statistics: [MASK] / kept /
random among masked positions near 80/10/10, next-sentence label 1 near one half.
Prints a summary; exits 1 with the reasons when a check fails.

  check_prepare_bert.py --tamper SHARD ROW   changes masked_lm_ids[ROW, 0] (to show the check fails)
"""
import glob
import json
import os
import re
import sys

import h5py
import numpy as np

NAMES = ["input_ids", "input_mask", "segment_ids", "masked_lm_positions", "masked_lm_ids",
         "next_sentence_labels"]
DTYPES = ["<i4", "|i1", "|i1", "<i4", "<i4", "|i1"]  # create_pretraining_data.py's choice

failures = []


def check(condition, message):
    if not condition:
        failures.append(message)
        if len(failures) > 20:
            report_and_exit()
    return condition


def report_and_exit():
    print("\n".join(failures[:20]))
    sys.exit(1)


def as_text(ids):
    # Ids as a string with separators, so spans are found by str.find.
    return "," + ",".join(map(str, ids)) + ","


def tamper(path, row):
    with h5py.File(path, "r+") as f:
        f["masked_lm_ids"][row, 0] = (f["masked_lm_ids"][row, 0] + 1) % 30000 + 1000


def main():
    if sys.argv[1] == "--tamper":
        return tamper(sys.argv[2], int(sys.argv[3]))
    shard_dir, expected_path = sys.argv[1], sys.argv[2]
    with open(expected_path) as f:
        want = json.load(f)
    S, P = want["seq_len"], want["max_predictions"]
    CLS, SEP, MASK = want["cls"], want["sep"], want["mask"]
    docs = [as_text(d) for d in want["documents"]]

    names = sorted(os.listdir(shard_dir))
    check(all(re.fullmatch(r"part_\d{5}\.hdf5", n) for n in names),
          f"unexpected files in {shard_dir}: {names}")
    check(names == ["part_%05d.hdf5" % k for k in range(len(names))],
          f"shards not numbered 0..{len(names) - 1}: {names}")

    rows = random_next = 0
    masked = to_mask = kept = replaced = 0
    for k, name in enumerate(names):
        path = os.path.join(shard_dir, name)
        with h5py.File(path, "r") as f:
            check(sorted(f.keys()) == sorted(NAMES), f"{name}: datasets {sorted(f.keys())}")
            data = {}
            for dname, dtype in zip(NAMES, DTYPES):
                ds = f[dname]
                check(ds.dtype.str == dtype, f"{name}/{dname}: dtype {ds.dtype.str}, want {dtype}")
                check(ds.compression == "gzip", f"{name}/{dname}: compression {ds.compression}")
                data[dname] = ds[...].astype(np.int64)
        n = data["input_ids"].shape[0]
        check(n == want["shard_size"] or (k == len(names) - 1 and 0 < n <= want["shard_size"]),
              f"{name}: {n} rows with shard size {want['shard_size']}")
        for dname, width in zip(NAMES, [S, S, S, P, P, None]):
            shape = (n, width) if width else (n,)
            check(data[dname].shape == shape, f"{name}/{dname}: shape {data[dname].shape}")

        for r in range(n):
            where = f"{name} row {r}"
            ids, mask, seg = data["input_ids"][r], data["input_mask"][r], data["segment_ids"][r]
            pos, lab = data["masked_lm_positions"][r], data["masked_lm_ids"][r]
            label = int(data["next_sentence_labels"][r])
            L = int(mask.sum())
            check(np.array_equal(mask, (np.arange(S) < L).astype(np.int64)), f"{where}: mask")
            check(np.all(ids[L:] == 0) and np.all(seg[L:] == 0), f"{where}: padding")
            k_masked = int(np.argmax(pos == 0)) if np.any(pos == 0) else P
            check(np.all(pos[k_masked:] == 0) and np.all(lab[k_masked:] == 0),
                  f"{where}: masked padding")
            pos, lab = pos[:k_masked], lab[:k_masked]
            # The count create_pretraining_data.py asks for: Python's round, ties to even.
            check(k_masked == min(P, max(1, int(round(L * want["masked_lm_prob"])))),
                  f"{where}: {k_masked} masked of {L}")
            check(np.all(np.diff(pos) > 0) and np.all(pos >= 1) and np.all(pos < L - 1),
                  f"{where}: masked positions {pos.tolist()}")
            restored = ids[:L].copy()
            restored[pos] = lab
            seps = np.flatnonzero(restored == SEP)
            if not check(restored[0] == CLS and len(seps) == 2 and seps[1] == L - 1
                         and not np.any(restored[1:] == CLS), f"{where}: not [CLS] A [SEP] B [SEP]"):
                continue
            first_sep = int(seps[0])
            check(np.array_equal(seg[:L], (np.arange(L) > first_sep).astype(np.int64)),
                  f"{where}: segment ids")
            check(not np.any(np.isin(pos, [0, first_sep, L - 1])), f"{where}: masked a special")
            a, b = as_text(restored[1:first_sep]), as_text(restored[first_sep + 1:L - 1])
            found = False
            for doc in docs:
                at = doc.find(a)
                while at >= 0 and not found:
                    found = label == 1 or doc.find(b, at + 1) >= 0
                    at = doc.find(a, at + 1)
                if found:
                    break
            check(found, f"{where}: A (and B for label 0) not found in the text's tokens")
            if label == 1:
                check(any(doc.find(b) >= 0 for doc in docs), f"{where}: B not in the text")
            random_next += label
            for p, original in zip(pos, lab):
                masked += 1
                if ids[p] == MASK:
                    to_mask += 1
                elif ids[p] == original:
                    kept += 1
                else:
                    replaced += 1
            check(np.all((ids >= 0) & (ids < want["vocab_size"])), f"{where}: id out of vocab")
        rows += n

    check(rows == want["instances"], f"{rows} rows, the command reported {want['instances']}")
    mask_share, kept_share, random_share = to_mask / masked, kept / masked, replaced / masked
    check(abs(mask_share - 0.8) < 0.03, f"[MASK] share {mask_share:.3f}")
    check(abs(kept_share - 0.1) < 0.02, f"kept share {kept_share:.3f}")
    check(abs(random_share - 0.1) < 0.02, f"random share {random_share:.3f}")
    nsp = random_next / rows
    # A chunk of one sentence (often a document's last) is always random next: a little above 1/2.
    check(0.45 < nsp < 0.62, f"next-sentence label 1 share {nsp:.3f}")
    print(f"checked {len(names)} shards, {rows} rows, {masked} masked positions: "
          f"[MASK] {mask_share:.3f} kept {kept_share:.3f} random {random_share:.3f}, "
          f"random next {nsp:.3f}")
    if failures:
        report_and_exit()


if __name__ == "__main__":
    main()
