#!/usr/bin/env python3
"""Summarise a precision comparison (scripts/compare_precisions.sh): reads
OUT_DIR/<strategy>/metrics.jsonl for each strategy and writes OUT_DIR/report.md (a Markdown
table) and OUT_DIR/precisions.png (training loss and edq_ratio against step, one line per
strategy; drawn with gnuplot). Standard library only.

usage: precision_report.py OUT_DIR STRATEGY [STRATEGY ...]
"""
import json
import math
import os
import subprocess
import sys


def read_metrics(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def mean(values):
    values = [v for v in values if v is not None and math.isfinite(v)]
    return sum(values) / len(values) if values else float("nan")


def summarise(records):
    steps = [r for r in records if "loss" in r]
    evals = [r for r in records if "val_loss" in r]
    start = next((r for r in records if r.get("step") == 0), {})
    tail = steps[-max(1, len(steps) // 10):]  # last 10% of the steps: per-step loss is noisy
    return {
        "steps": len(steps),
        "train_loss": mean([r["loss"] for r in tail]),
        "val_loss": evals[-1]["val_loss"] if evals else float("nan"),
        "edq_ratio": mean([r.get("edq_ratio") for r in steps]),
        "edq_ratio_cumulative": steps[-1].get("edq_ratio_cumulative", float("nan")) if steps else float("nan"),
        "lost_frac": mean([r.get("lost_frac") for r in steps]),
        "bytes_per_parameter": start.get("bytes_per_parameter", float("nan")),
        "tokens_per_s": mean([r["tokens_per_s"] for r in steps[1:]]),
    }


def markdown(rows):
    header = ("| strategy | train loss (last 10%) | val loss | mean edq_ratio | cumulative edq_ratio "
              "| lost_frac | bytes/param | tokens/s |\n|---|---|---|---|---|---|---|---|\n")
    lines = []
    for name, s in rows:
        lines.append(f"| `{name}` | {s['train_loss']:.4f} | {s['val_loss']:.4f} | {s['edq_ratio']:.3f} "
                     f"| {s['edq_ratio_cumulative']:.3f} | {100 * s['lost_frac']:.1f}% "
                     f"| {s['bytes_per_parameter']:.0f} | {s['tokens_per_s']:.0f} |")
    return header + "\n".join(lines) + "\n"


def plot(out_dir, names):
    for name in names:
        with open(os.path.join(out_dir, f"{name}.tsv"), "w") as f:
            for r in read_metrics(os.path.join(out_dir, name, "metrics.jsonl")):
                if "loss" in r:
                    f.write(f"{r['step']}\t{r['loss']}\t{r.get('edq_ratio', 'NaN')}\n")
    loss_lines = ", ".join(f"'{name}.tsv' using 1:2 with lines lw 2 title '{name}'" for name in names)
    edq_lines = ", ".join(f"'{name}.tsv' using 1:3 with lines lw 2 title '{name}'" for name in names)
    script = f"""
set terminal pngcairo size 1200,500 font ',11'
set output 'precisions.png'
set multiplot layout 1,2
set grid
set key top right
set xlabel 'step'
set ylabel 'training loss'
set title 'training loss'
plot {loss_lines}
set ylabel 'edq ratio'
set title 'edq ratio = <delta theta, u> / |u|^2 (1 = nothing lost)'
set key bottom right
plot {edq_lines}
unset multiplot
"""
    subprocess.run(["gnuplot"], input=script, text=True, cwd=out_dir, check=True)


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    out_dir, names = sys.argv[1], sys.argv[2:]
    rows = [(name, summarise(read_metrics(os.path.join(out_dir, name, "metrics.jsonl")))) for name in names]
    table = markdown(rows)
    with open(os.path.join(out_dir, "report.md"), "w") as f:
        f.write(table)
    print(table, end="")
    plot(out_dir, names)
    print(f"wrote {os.path.join(out_dir, 'report.md')} and {os.path.join(out_dir, 'precisions.png')}")


if __name__ == "__main__":
    main()
