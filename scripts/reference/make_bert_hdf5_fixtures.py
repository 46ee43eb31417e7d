#!/usr/bin/python3
"""Independent reference for collage's BERT pretraining HDF5 reader (src/data/bert/bert_hdf5.h,
src/data/bert/bert_shards.h), written with h5py and numpy.

The format is NVIDIA DeepLearningExamples' create_pretraining_data.py output (the AWS
`bert_pretrain_wikicorpus_tokenized_hdf5_seqlen{128,512}` shards): one .hdf5 file with
  input_ids, input_mask, segment_ids  [N, S]
  masked_lm_positions, masked_lm_ids  [N, P], 0-padded: a sample's labels end at the first
                                      position equal to 0 (position 0 is [CLS], never masked)
  next_sentence_labels                [N]
(the layout is written down in src/data/bert/bert_hdf5.h).

Writes small files (a few KB each) to tests/fixtures/bert_hdf5/:
  vocab.txt                   a toy BERT vocab: [PAD]=0, [unused0..98], [UNK]=100, [CLS]=101,
                              [SEP]=102, [MASK]=103, then words and ##pieces
  valid_int32.hdf5            every dataset int32, gzip, chunks of 2 rows (reads cross chunks)
  widths.hdf5                 uint16 / int8 / uint8 / int64 / big-endian int32 / int64, contiguous
  many_rows.hdf5              600 rows in gzip chunks of 100: several of the reader's row blocks
  shards/*.hdf5, shards/*.h5  four shards (DLE dtypes i4/i1/i1/i4/i4/i1, gzip, HDF5 1.10 chunk
                              index) of 5, 7, 4, 3 rows
  <broken>.hdf5               one defect each (see BROKEN below)
  reference.json              every valid sample as the reader must return it, the shard
                              set's global sample order for a few (seed, epoch), and where
                              each broken file's defect is

The global order of a shard set (src/data/bert/bert_shards.h) is computed here a second time:
per epoch the shards are permuted, then the rows inside each shard, each permutation by
numpy's legacy RandomState seeded with stream_seed(seed, epoch, stream) below.

Run from anywhere: /usr/bin/python3 scripts/reference/make_bert_hdf5_fixtures.py
"""
import json
import os
import shutil

import h5py
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "fixtures", "bert_hdf5")
SEED = 9309  # everything random below comes from this

PAD, UNK, CLS, SEP, MASK = 0, 100, 101, 102, 103
WORDS = ["the", "cat", "sat", "on", "a", "mat", "dog", "ran", "to", "park", "it", "was",
         "very", "happy", "and", "then", "slept", "all", "day", "long", "##s", "##ing", "##ed",
         "sun", "shone", ".", ","]
VOCAB = (["[PAD]"] + [f"[unused{i}]" for i in range(99)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
         + WORDS)
VOCAB_SIZE = len(VOCAB)
NAMES = ["input_ids", "input_mask", "segment_ids", "masked_lm_positions", "masked_lm_ids",
         "next_sentence_labels"]
DLE_DTYPES = ["<i4", "|i1", "|i1", "<i4", "<i4", "|i1"]  # create_pretraining_data.py's choice


# ---------------------------------------------------------------------------------------
# Samples: [CLS] A [SEP] B [SEP] 0..., with 1 + (row % P) masked positions (so some rows use
# every slot and others are 0-padded), 80% [MASK] / 10% kept / 10% random id, as DLE masks.

def make_samples(rng, n, seq_len, max_pred):
    rows = {k: [] for k in NAMES}
    for row in range(n):
        total = int(rng.integers(min(6, seq_len - 3), seq_len - 3 + 1))  # tokens of A and B together
        len_a = int(rng.integers(1, total))
        words = rng.integers(104, VOCAB_SIZE, size=total).tolist()
        tokens = [CLS] + words[:len_a] + [SEP] + words[len_a:] + [SEP]
        segments = [0] * (len_a + 2) + [1] * (total - len_a + 1)
        candidates = [i for i, t in enumerate(tokens) if t not in (CLS, SEP)]
        count = 1 + row % max_pred
        positions = sorted(rng.choice(candidates, size=count, replace=False).tolist())
        labels = [tokens[p] for p in positions]
        for p in positions:
            u = rng.random()
            if u < 0.8:
                tokens[p] = MASK
            elif u >= 0.9:
                tokens[p] = int(rng.integers(0, VOCAB_SIZE))
        pad = seq_len - len(tokens)
        rows["input_ids"].append(tokens + [0] * pad)
        rows["input_mask"].append([1] * len(tokens) + [0] * pad)
        rows["segment_ids"].append(segments + [0] * pad)
        rows["masked_lm_positions"].append(positions + [0] * (max_pred - count))
        rows["masked_lm_ids"].append(labels + [0] * (max_pred - count))
        rows["next_sentence_labels"].append(int(rng.integers(0, 2)))
    return {k: np.array(v, dtype=np.int64) for k, v in rows.items()}


def reference_samples(arrays):
    """What the reader returns per sample: labels cut at the first position equal to 0."""
    out = []
    for i in range(arrays["input_ids"].shape[0]):
        pos = arrays["masked_lm_positions"][i]
        zeros = np.nonzero(pos == 0)[0]
        count = int(zeros[0]) if len(zeros) else len(pos)
        out.append({
            "input_ids": arrays["input_ids"][i].tolist(),
            "input_mask": arrays["input_mask"][i].tolist(),
            "segment_ids": arrays["segment_ids"][i].tolist(),
            "masked_positions": pos[:count].tolist(),
            "masked_ids": arrays["masked_lm_ids"][i][:count].tolist(),
            "next_sentence_label": int(arrays["next_sentence_labels"][i]),
        })
    return out


def open_for_writing(path, libver):
    """h5py.File(path, "w", libver=libver), but with the root group's timestamps off, which
    the "latest" format would otherwise store (so that the fixtures are the same every run)."""
    if libver == "earliest":
        return h5py.File(path, "w")
    fapl = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
    fapl.set_libver_bounds(h5py.h5f.LIBVER_LATEST, h5py.h5f.LIBVER_LATEST)
    fcpl = h5py.h5p.create(h5py.h5p.FILE_CREATE)
    fcpl.set_obj_track_times(False)
    return h5py.File(h5py.h5f.create(path.encode(), h5py.h5f.ACC_TRUNC, fapl=fapl, fcpl=fcpl))


def write_file(path, arrays, dtypes, gzip_chunk_rows=None, skip=(), shapes=None,
               libver="earliest"):
    with open_for_writing(path, libver) as f:
        for name, dtype in zip(NAMES, dtypes):
            if name in skip:
                continue
            data = np.asarray(arrays[name]).astype(dtype)
            if shapes and name in shapes:
                data = shapes[name](data)
            kwargs = {}
            if gzip_chunk_rows:
                kwargs = dict(compression="gzip",
                              chunks=(min(gzip_chunk_rows, data.shape[0]),) + data.shape[1:])
            f.create_dataset(name, data=data, **kwargs)


# ---------------------------------------------------------------------------------------
# The shard set's global order (src/data/bert/bert_shards.h)

M64 = (1 << 64) - 1


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def stream_seed(seed, epoch, stream):
    """stream 0: the order of the shards in `epoch`; stream 1 + f: the order of shard f's rows."""
    return splitmix64(splitmix64(splitmix64(seed) ^ epoch) ^ stream) & 0xFFFFFFFF


def epoch_order(seed, epoch, sizes):
    order = []
    for f in np.random.RandomState(stream_seed(seed, epoch, 0)).permutation(len(sizes)):
        f = int(f)
        rows = np.random.RandomState(stream_seed(seed, epoch, 1 + f)).permutation(sizes[f])
        order += [[f, int(r)] for r in rows]
    return order


# ---------------------------------------------------------------------------------------

def main():
    rng = np.random.default_rng(SEED)
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(os.path.join(OUT, "shards"))
    with open(os.path.join(OUT, "vocab.txt"), "w") as f:
        f.write("\n".join(VOCAB) + "\n")
    ref = {"vocab_file": "vocab.txt", "vocab_size": VOCAB_SIZE, "files": {}, "broken": {}}

    # valid_int32: S=16, P=3, gzip in 2-row chunks; row 5 carries a label slot after the
    # first 0 position ([p, 0, q]): the reader must stop at the 0 and ignore q.
    a = make_samples(rng, 7, 16, 3)
    a["masked_lm_positions"][5] = [a["masked_lm_positions"][5][0], 0, 9]
    a["masked_lm_ids"][5] = [a["masked_lm_ids"][5][0], 0, 110]
    write_file(os.path.join(OUT, "valid_int32.hdf5"), a, ["<i4"] * 6, gzip_chunk_rows=2)
    ref["files"]["valid_int32.hdf5"] = {
        "dtypes": ["int32"] * 6, "storage": "chunked", "seq_len": 16, "max_predictions": 3,
        "samples": reference_samples(a)}

    # widths: every integer width and signedness the reader converts, one big-endian.
    widths = ["<u2", "|i1", "|u1", "<i8", ">i4", "<i8"]
    b = make_samples(rng, 5, 12, 4)
    write_file(os.path.join(OUT, "widths.hdf5"), b, widths)
    ref["files"]["widths.hdf5"] = {
        "dtypes": ["uint16", "int8", "uint8", "int64", "int32 (big-endian)", "int64"],
        "storage": "contiguous", "seq_len": 12, "max_predictions": 4,
        "samples": reference_samples(b)}

    # Enough rows for several of the reader's row blocks (256 rows at least): 600 rows in
    # chunks of 100. reference.json holds a few whole rows and every row's sum of input_ids.
    m = make_samples(rng, 600, 8, 2)
    write_file(os.path.join(OUT, "many_rows.hdf5"), m, DLE_DTYPES, gzip_chunk_rows=100,
               libver="latest")
    picked = [0, 1, 255, 256, 257, 511, 512, 599]
    ref["many_rows"] = {
        "file": "many_rows.hdf5", "rows": 600, "picked": picked,
        "samples": [reference_samples(m)[i] for i in picked],
        "input_id_sums": m["input_ids"].sum(axis=1).tolist()}

    # A directory of shards, as DLE writes them (dtypes, gzip); one named .h5.
    shard_names = ["wikicorpus_en_training_0.hdf5", "wikicorpus_en_training_1.hdf5",
                   "wikicorpus_en_training_2.hdf5", "wikicorpus_en_training_3.h5"]
    shard_sizes = [5, 7, 4, 3]
    shards = []
    for name, n in zip(shard_names, shard_sizes):
        s = make_samples(rng, n, 16, 3)
        # libver "latest" (the HDF5 1.10 chunk index) keeps these at 4 KB instead of 20 KB.
        write_file(os.path.join(OUT, "shards", name), s, DLE_DTYPES, gzip_chunk_rows=4,
                   libver="latest")
        shards.append(reference_samples(s))
    ref["shards"] = {
        "dir": "shards", "files": shard_names, "sizes": shard_sizes, "seq_len": 16,
        "max_predictions": 3, "samples": shards,
        "orders": [{"seed": seed, "epoch": e, "order": epoch_order(seed, e, shard_sizes)}
                   for seed in (1234, 77) for e in (0, 1, 2)]}

    # Broken files, each one defect on a valid base (S=8, P=2, N=4); `dataset`, `row`,
    # `column` say where the reader must point.
    base = make_samples(rng, 4, 8, 2)

    def broken(name, where, arrays=None, **kw):
        write_file(os.path.join(OUT, name), arrays if arrays is not None else base,
                   ["<i4"] * 6, **kw)
        ref["broken"][name] = where

    broken("missing_dataset.hdf5", {"dataset": "masked_lm_ids"}, skip=("masked_lm_ids",))
    broken("wrong_rank.hdf5", {"dataset": "next_sentence_labels", "rank": 2},
           shapes={"next_sentence_labels": lambda d: d.reshape(-1, 1)})
    broken("wrong_seq_len.hdf5", {"dataset": "input_mask", "shape": [4, 9]},
           shapes={"input_mask": lambda d: np.pad(d, ((0, 0), (0, 1)))})
    broken("wrong_predictions.hdf5", {"dataset": "masked_lm_ids", "shape": [4, 3]},
           shapes={"masked_lm_ids": lambda d: np.pad(d, ((0, 0), (0, 1)))})
    broken("disagreeing_rows.hdf5", {"dataset": "next_sentence_labels", "shape": [3]},
           shapes={"next_sentence_labels": lambda d: d[:3]})
    with h5py.File(os.path.join(OUT, "float_dtype.hdf5"), "w") as f:
        for name in NAMES:
            f.create_dataset(name, data=base[name].astype("<f4" if name == "input_mask" else "<i4"))
    ref["broken"]["float_dtype.hdf5"] = {"dataset": "input_mask"}

    def with_value(name, dataset, row, column, value, dtype="<i4"):
        arrays = {k: v.copy() for k, v in base.items()}
        if column is None:
            arrays[dataset][row] = value
        else:
            arrays[dataset][row, column] = value
        write_file(os.path.join(OUT, name), arrays,
                   [dtype if n == dataset else "<i4" for n in NAMES])
        ref["broken"][name] = {"dataset": dataset, "row": row, "column": column, "value": value}

    with_value("position_out_of_range.hdf5", "masked_lm_positions", 2, 0, 8)
    with_value("negative_position.hdf5", "masked_lm_positions", 1, 1, -3)
    with_value("id_out_of_vocab.hdf5", "input_ids", 3, 2, VOCAB_SIZE)
    with_value("masked_id_out_of_vocab.hdf5", "masked_lm_ids", 1, 0, VOCAB_SIZE + 5)
    with_value("bad_mask_value.hdf5", "input_mask", 0, 1, 2)
    with_value("bad_segment_value.hdf5", "segment_ids", 2, 3, -1)
    with_value("bad_nsp_label.hdf5", "next_sentence_labels", 2, None, 3)
    with_value("overflow_int64.hdf5", "input_ids", 1, 4, 1 << 33, dtype="<i8")
    with open(os.path.join(OUT, "not_hdf5.hdf5"), "w") as f:
        f.write("this is text, not HDF5\n")
    ref["broken"]["not_hdf5.hdf5"] = {}

    with open(os.path.join(OUT, "reference.json"), "w") as f:
        json.dump(ref, f, separators=(",", ":"))
        f.write("\n")
    total = 0
    for dirpath, _, files in os.walk(OUT):
        for name in files:
            total += os.path.getsize(os.path.join(dirpath, name))
    print(f"wrote {OUT}: {sum(len(fs) for _, _, fs in os.walk(OUT))} files, {total} bytes")


if __name__ == "__main__":
    main()
