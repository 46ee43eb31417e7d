#!/usr/bin/python3
"""Independent reference for collage's GPT data path (src/data/), written with numpy.

Writes small fixtures to tests/fixtures/:
  gpt_dataset_u16.{bin,idx}   uint16 MMIDIDX pair written by THIS script's writer
  gpt_dataset_i32.{bin,idx}   int32 pair (token ids above 65535)
  gpt_dataset_reference.json  the documents, and for several GPTDataset cases the doc_idx,
                              sample_idx, shuffle_idx arrays and sample tokens; numpy
                              RandomState shuffles/draws; blending indices; split bounds;
                              sampler batches; the numbers `collage inspect` must print.

Everything random goes through numpy's real legacy RandomState, and the GPT sample
construction follows NeMo r1.22 / Megatron (docs/DATA.md §4 describes it).
Sample tokens are computed a second, independent way: by slicing the concatenation of the
shuffled documents at multiples of seq_len (which is what sample_idx encodes).

Run from anywhere: /usr/bin/python3 scripts/reference/gpt_dataset_reference.py
"""
import json
import math
import os
import struct

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(ROOT, "tests", "fixtures")

DTYPE_CODES = {np.uint8: 1, np.int8: 2, np.int16: 3, np.int32: 4, np.int64: 5, np.uint16: 8}


# ---------------------------------------------------------------------------------------
# MMIDIDX writer (one sequence per document, like preprocess_data.py without sentence split)

def write_indexed(prefix, docs, dtype):
    with open(prefix + ".bin", "wb") as f:
        for d in docs:
            f.write(np.asarray(d, dtype=dtype).tobytes(order="C"))
    sizes = np.array([len(d) for d in docs], dtype=np.int32)
    itemsize = np.dtype(dtype).itemsize
    pointers = np.zeros(len(docs), dtype=np.int64)
    if len(docs) > 1:
        pointers[1:] = np.cumsum(sizes[:-1].astype(np.int64) * itemsize)
    doc_idx = np.arange(len(docs) + 1, dtype=np.int64)
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00")
        f.write(struct.pack("<Q", 1))
        f.write(struct.pack("<B", DTYPE_CODES[dtype]))
        f.write(struct.pack("<Q", len(sizes)))
        f.write(struct.pack("<Q", len(doc_idx)))
        f.write(sizes.tobytes(order="C"))
        f.write(pointers.tobytes(order="C"))
        f.write(doc_idx.tobytes(order="C"))


# ---------------------------------------------------------------------------------------
# Megatron / NeMo r1.22 GPTDataset index construction

def split_bounds(splits_string, size):
    """get_train_valid_test_split_; returns None where Megatron's bounds would decrease."""
    if splits_string.find(",") != -1:
        splits = [float(s) for s in splits_string.split(",")]
    elif splits_string.find("/") != -1:
        splits = [float(s) for s in splits_string.split("/")]
    else:
        splits = [float(splits_string)]
    while len(splits) < 3:
        splits.append(0.0)
    splits = splits[:3]
    splits_sum = sum(splits)
    assert splits_sum > 0.0
    splits = [split / splits_sum for split in splits]
    idx = [0]
    for index, split in enumerate(splits):
        idx.append(idx[index] + int(round(split * float(size))))
    diff = idx[-1] - size
    for index in range(1, len(idx)):
        idx[index] -= diff
    assert idx[-1] == size
    if any(idx[k + 1] < idx[k] for k in range(3)):
        return None
    return idx


def num_epochs_for(tokens_per_epoch, seq_length, num_samples):
    epochs, total = 0, 0
    while True:
        epochs += 1
        total += tokens_per_epoch
        if (total - 1) // seq_length >= num_samples:
            return epochs


def build_doc_idx(documents, num_epochs, rng, separate_last_epoch):
    if not separate_last_epoch or num_epochs == 1:
        doc_idx = np.tile(documents, num_epochs).astype(np.int32)
        rng.shuffle(doc_idx)
        return doc_idx
    first = build_doc_idx(documents, num_epochs - 1, rng, False)
    last = build_doc_idx(documents, 1, rng, False)
    return np.concatenate((first, last))


def build_sample_idx(sizes, doc_idx, seq_length, num_epochs, tokens_per_epoch):
    """Megatron's python twin of helpers.build_sample_idx (drop_last, add_extra_token=1)."""
    num_samples = (num_epochs * tokens_per_epoch - 1) // seq_length
    sample_idx = np.zeros([num_samples + 1, 2], dtype=np.int32)
    doc_idx_index, doc_offset = 0, 0
    for sample_index in range(1, num_samples + 1):
        remaining = seq_length + 1
        while remaining != 0:
            doc_length = sizes[doc_idx[doc_idx_index]] - doc_offset
            remaining -= doc_length
            if remaining <= 0:
                doc_offset += remaining + doc_length - 1
                remaining = 0
            else:
                doc_idx_index += 1
                doc_offset = 0
        sample_idx[sample_index] = (doc_idx_index, doc_offset)
    return sample_idx


def build_shuffle_idx(num_samples, total_size, rng):
    dtype = np.uint32 if total_size < np.iinfo(np.uint32).max - 1 else np.int64
    first = np.arange(0, num_samples, dtype=dtype)
    rng.shuffle(first)
    if num_samples == total_size:
        return first
    last = np.arange(num_samples, total_size, dtype=dtype)
    rng.shuffle(last)
    return np.concatenate((first, last))


def gpt_dataset(sizes, documents, num_samples, seq_length, seed):
    tokens_per_epoch = int(np.sum(sizes[documents]))
    num_epochs = num_epochs_for(tokens_per_epoch, seq_length, num_samples)
    rng = np.random.RandomState(seed=seed)
    separate = False
    n_prev = 0
    if num_epochs > 1:
        n_prev = ((num_epochs - 1) * tokens_per_epoch - 1) // seq_length
        last = num_samples - n_prev
        per_epoch = (tokens_per_epoch - 1) // seq_length
        separate = last < int(0.80 * per_epoch)
    doc_idx = build_doc_idx(documents, num_epochs, rng, separate)
    sample_idx = build_sample_idx(sizes, doc_idx, seq_length, num_epochs, tokens_per_epoch)
    total = sample_idx.shape[0] - 1
    shuffle_idx = build_shuffle_idx(n_prev if separate else total, total, rng)
    return dict(tokens_per_epoch=tokens_per_epoch, num_epochs=num_epochs,
                separate_last_epoch=bool(separate), doc_idx=doc_idx, sample_idx=sample_idx,
                shuffle_idx=shuffle_idx)


def samples_from_stream(docs, doc_idx, shuffle_idx, seq_length, indices):
    """Sample i = tokens [j*S, j*S + S] of the concatenated shuffled documents, j = shuffle[i]."""
    stream = np.concatenate([np.asarray(docs[d], dtype=np.int64) for d in doc_idx])
    out = []
    for i in indices:
        j = int(shuffle_idx[i])
        out.append(stream[j * seq_length: j * seq_length + seq_length + 1].tolist())
    return out


# ---------------------------------------------------------------------------------------
# Blending (helpers.cpp build_blending_indices) and NeMo's per-dataset sample counts

def blend_num_samples(weights, num_samples):
    weight_sum = 0.0
    for w in weights:
        weight_sum += w
    weights = [w / weight_sum for w in weights]
    return weights, [int(math.ceil(num_samples * w * 1.005)) for w in weights]


def blending_indices(weights, size):
    weights = np.array(weights, dtype=np.float64)
    weights /= np.sum(weights)
    dataset_index = np.zeros(size, dtype=np.uint8)
    dataset_sample_index = np.zeros(size, dtype=np.int64)
    current = [0] * len(weights)
    for i in range(size):
        scale = max(float(i), 1.0)
        errors = [weights[d] * scale - current[d] for d in range(len(weights))]
        best = 0
        for d in range(1, len(weights)):
            if errors[d] > errors[best]:
                best = d
        dataset_index[i] = best
        dataset_sample_index[i] = current[best]
        current[best] += 1
    return dataset_index, dataset_sample_index


# ---------------------------------------------------------------------------------------
# MegatronPretrainingSampler

def sampler_batches(total_samples, consumed_samples, micro_batch_size, dp_size, dp_rank):
    batch, out = [], []
    for idx in range(consumed_samples, total_samples):
        batch.append(idx)
        if len(batch) == micro_batch_size * dp_size:
            out.append(batch[dp_rank * micro_batch_size:(dp_rank + 1) * micro_batch_size])
            batch = []
    return out


# ---------------------------------------------------------------------------------------

def make_docs(seed, count, max_len, vocab, eod):
    rng = np.random.RandomState(seed)
    docs = []
    for k in range(count):
        n = int(rng.randint(1, max_len + 1))
        body = rng.randint(0, vocab, size=n - 1).tolist()
        docs.append(body + [eod])
    docs[3] = []  # empty documents are legal
    docs[17] = []
    return docs


def gpt_case(name, prefix, docs, split, split_name, seq_len, seed, num_samples, show=24):
    sizes = np.array([len(d) for d in docs], dtype=np.int32)
    bounds = split_bounds(split, len(docs))
    k = {"train": 0, "valid": 1, "test": 2}[split_name]
    documents = np.arange(bounds[k], bounds[k + 1], dtype=np.int32)
    r = gpt_dataset(sizes, documents, num_samples, seq_len, seed)
    n = len(r["shuffle_idx"])
    indices = list(range(min(show, n))) + [n - 1]
    return dict(name=name, prefix=prefix, split=split, split_name=split_name, seq_len=seq_len,
                seed=seed, num_samples=num_samples, bounds=bounds,
                tokens_per_epoch=r["tokens_per_epoch"], num_epochs=r["num_epochs"],
                separate_last_epoch=r["separate_last_epoch"],
                doc_idx=r["doc_idx"].tolist(), sample_idx=r["sample_idx"].reshape(-1).tolist(),
                shuffle_idx=[int(x) for x in r["shuffle_idx"]], sample_indices=indices,
                samples=samples_from_stream(docs, r["doc_idx"], r["shuffle_idx"], seq_len,
                                            indices))


def pick_num_samples(docs, split, split_name, seq_len, want_separate):
    """A 3-epoch num_samples right at the separate_last_epoch threshold: the last epoch gets
    int(0.8 * samples_per_epoch) - 1 samples (separate) or exactly that many (joined)."""
    sizes = np.array([len(d) for d in docs], dtype=np.int64)
    bounds = split_bounds(split, len(docs))
    k = {"train": 0, "valid": 1, "test": 2}[split_name]
    tpe = int(sizes[bounds[k]:bounds[k + 1]].sum())
    n_prev = (2 * tpe - 1) // seq_len
    per_epoch = (tpe - 1) // seq_len
    return n_prev + int(0.80 * per_epoch) - (1 if want_separate else 0)


def numpy_random_cases():
    cases = []
    for seed in [0, 1, 1234, 4321, 2**32 - 1]:
        draws32 = np.random.RandomState(seed).randint(0, 2**32, size=8, dtype=np.uint32)
        # Legacy randint(0, max+1) uses the same masked rejection as shuffle's
        # random_interval(max), with (hi << 32 | lo) draws once max exceeds 32 bits.
        bounded = {}
        for mx in [1, 6, 1000, 2**31 + 5, 2**32 - 1, 2**32, 2**40 + 12345, 2**63 - 1]:
            v = np.random.RandomState(seed).randint(0, mx + 1, size=6, dtype=np.uint64)
            bounded[str(mx)] = [int(x) for x in v]
        shuffles = []
        for n in [1, 2, 3, 10, 1000, 65536, 65537, 70001]:
            perm = np.random.RandomState(seed).permutation(n)
            checksum = sum((i + 1) * int(p) for i, p in enumerate(perm)) % 2**64
            shuffles.append(dict(n=n, head=perm[:10].tolist(), tail=perm[-10:].tolist(),
                                 checksum=str(checksum)))
        cases.append(dict(seed=seed, draws32=[int(x) for x in draws32], bounded=bounded,
                          shuffles=shuffles))
    return cases


def main():
    os.makedirs(FIXTURES, exist_ok=True)
    docs16 = make_docs(seed=7, count=40, max_len=60, vocab=50256, eod=50256)
    docs32 = make_docs(seed=8, count=30, max_len=50, vocab=100276, eod=100276)
    docs32[0][0] = 2**31 - 1  # the largest int32 must survive the round trip
    p16 = os.path.join(FIXTURES, "gpt_dataset_u16")
    p32 = os.path.join(FIXTURES, "gpt_dataset_i32")
    write_indexed(p16, docs16, np.uint16)
    write_indexed(p32, docs32, np.int32)

    cases = [
        gpt_case("one_epoch", "gpt_dataset_u16", docs16, "980,10,10", "train", 16, 1234, 40),
        gpt_case("separate_last_epoch", "gpt_dataset_u16", docs16, "980,10,10", "train", 16,
                 1234, pick_num_samples(docs16, "980,10,10", "train", 16, True)),
        gpt_case("joined_last_epoch", "gpt_dataset_u16", docs16, "980,10,10", "train", 16, 1,
                 pick_num_samples(docs16, "980,10,10", "train", 16, False)),
        gpt_case("valid_split", "gpt_dataset_u16", docs16, "80,10,10", "valid", 8, 0, 30),
        gpt_case("int32_tokens", "gpt_dataset_i32", docs32, "90,5,5", "train", 32, 4321, 100),
        gpt_case("max_seed", "gpt_dataset_u16", docs16, "980,10,10", "train", 7, 2**32 - 1, 100),
    ]
    assert cases[1]["num_epochs"] == 3 and cases[1]["separate_last_epoch"]
    assert cases[2]["num_epochs"] == 3 and not cases[2]["separate_last_epoch"]

    # Blend: u16 train split and i32 train split, like NeMo's data_prefix [0.3, a, 0.7, b].
    blend_weights = [0.3, 0.7]
    blend_total = 60
    norm, counts = blend_num_samples(blend_weights, blend_total)
    parts = [gpt_case("blend_part0", "gpt_dataset_u16", docs16, "980,10,10", "train", 16, 1234,
                      counts[0], show=10**9),
             gpt_case("blend_part1", "gpt_dataset_i32", docs32, "980,10,10", "train", 16, 1234,
                      counts[1], show=10**9)]
    size = sum(counts)
    di, dsi = blending_indices(norm, size)
    blend = dict(weights=blend_weights, num_samples=blend_total, split="980,10,10",
                 seq_len=16, seed=1234, prefixes=["gpt_dataset_u16", "gpt_dataset_i32"],
                 counts=counts, dataset_index=di.tolist(), dataset_sample_index=dsi.tolist(),
                 samples=[parts[int(d)]["samples"][int(s)] for d, s in zip(di, dsi)])
    blend_index_cases = []
    for weights, size in [([1.0, 1.0, 1.0], 50), ([0.2, 0.5, 0.3], 200), ([5, 1], 31),
                          ([0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1], 120)]:
        di, dsi = blending_indices(weights, size)
        blend_index_cases.append(dict(weights=weights, size=size, dataset_index=di.tolist(),
                                      dataset_sample_index=dsi.tolist(),
                                      counts=blend_num_samples(weights, 1000)[1]))

    # np.sum's summation order (pairwise, 8 lanes) decides the last bit of the blend weights.
    sum_rng = np.random.RandomState(99)
    numpy_sum_cases = []
    for n in [1, 3, 7, 8, 9, 16, 17, 100, 129, 300]:
        values = (sum_rng.standard_normal(n) * 10.0 ** sum_rng.randint(-8, 9, size=n)).tolist()
        numpy_sum_cases.append(dict(values=values, sum=float(np.sum(np.array(values)))))

    split_cases = []
    for s, n in [("980,10,10", 40), ("980,10,10", 1000), ("980,10,10", 7), ("80,10,10", 40),
                 ("1,1,1", 1), ("1,1,1", 2), ("1,1,1", 10), ("98/1/1", 250), ("1", 9),
                 ("3,1", 10), ("0,1,1", 3), ("2.5, 2.5, 5", 11), ("1,1", 5), ("1,1", 9), ("0,0,1", 5),
                 ("949,50,1", 12345), ("1,1,1", 0)]:
        split_cases.append(dict(split=s, n=n, bounds=split_bounds(s, n)))

    sampler_cases = []
    for total, consumed, mbs, dp in [(50, 0, 4, 1), (50, 8, 2, 3), (23, 5, 3, 2), (100, 0, 1, 4)]:
        sampler_cases.append(dict(total=total, consumed=consumed, micro_batch_size=mbs, dp=dp,
                                  batches=[sampler_batches(total, consumed, mbs, dp, r)
                                           for r in range(dp)]))

    lengths = np.array([len(d) for d in docs16])
    inspect_case = dict(
        prefix="gpt_dataset_u16", sequences=len(docs16), documents=len(docs16),
        tokens=int(lengths.sum()), dtype="uint16", min_length=int(lengths.min()),
        mean_length=float(lengths.mean()), max_length=int(lengths.max()),
        max_token_id=int(max(max(d) for d in docs16 if d)), case="valid_split", samples=5)

    out = dict(documents_u16=docs16, documents_i32=docs32, gpt_cases=cases, blend=blend,
               blend_index_cases=blend_index_cases,
               numpy_sum_cases=numpy_sum_cases, split_cases=split_cases,
               sampler_cases=sampler_cases, numpy_random=numpy_random_cases(),
               inspect=inspect_case)
    with open(os.path.join(FIXTURES, "gpt_dataset_reference.json"), "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
