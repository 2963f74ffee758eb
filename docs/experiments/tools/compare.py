#!/usr/bin/env python3
"""Paired comparisons of rondo experiment results, with 95% confidence intervals.

Replication k of every point of one `rondo experiment run` uses seed `--seed + k`, so
replication k of two series (or of two x values of one series) saw the same arrivals: they are
paired. `results.json` keeps each point's per-replication values (`replication_values`: mean
active streams; `replication_metric_values`: the experiment's metric), and this script turns
them into ratios with a Student-t 95% confidence interval over the replications.

  # ratios between series at each x, and each point relative to one x of its own series
  python3 docs/experiments/tools/compare.py results/seed000-fig6/results.json \
      --ratio "mirroring, deterministic" "mirroring, random" [--relative-to-x 2097152] \
      [--metric] [--json]

`--metric` compares the experiment's metric instead of mean active streams. `--fields F ...`
prints other (mean-only) fields of each point, e.g. reserved_primary_fraction busy_fraction.
Only the Python standard library is used.
"""

import argparse
import json
import math
import sys

# Student t 0.975 quantiles by degrees of freedom.
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
        9: 2.262, 10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131,
        16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093, 20: 2.086, 21: 2.080, 22: 2.074,
        23: 2.069, 24: 2.064, 25: 2.060, 26: 2.056, 27: 2.052, 28: 2.048, 29: 2.045,
        30: 2.042, 40: 2.021, 60: 2.000, 120: 1.980}


def t975(df):
    if df in T975:
        return T975[df]
    keys = sorted(T975)
    for lo, hi in zip(keys, keys[1:]):
        if lo < df < hi:
            return T975[lo] + (T975[hi] - T975[lo]) * (df - lo) / (hi - lo)
    return 1.960


def estimate(values):
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, float("inf")
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    return mean, t975(n - 1) * math.sqrt(var / n)


def fmt_x(x):
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("results", help="results.json of `rondo experiment run`")
    ap.add_argument("--ratio", nargs=2, action="append", default=[],
                    metavar=("NUMERATOR", "DENOMINATOR"), help="series labels")
    ap.add_argument("--relative-to-x", type=float, metavar="X",
                    help="every point's paired ratio to the same series at x = X")
    ap.add_argument("--metric", action="store_true",
                    help="use the experiment's metric instead of mean active streams")
    ap.add_argument("--fields", nargs="*", default=[],
                    help="other fields of each point to print (means over replications)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    with open(args.results) as f:
        result = json.load(f)
    key_values = "replication_metric_values" if args.metric else "replication_values"
    values, points, order = {}, {}, []
    for p in result["points"]:
        key = (p["series"], p["x"])
        values[key] = p[key_values]
        points[key] = p
        order.append(key)
    xs = sorted({x for _, x in order})

    report = {"results": args.results,
              "quantity": result["metric"] if args.metric else "mean_active_streams",
              "points": [], "ratios": []}
    for key in order:
        m, h = estimate(values[key])
        row = {"series": key[0], "x": key[1], "mean": m, "ci": h, "n": len(values[key])}
        for f in args.fields:
            row[f] = points[key].get(f)
        report["points"].append(row)

    def ratio(num_key, den_key, label_num, label_den, x):
        a, b = values.get(num_key), values.get(den_key)
        if not a or not b:
            return
        if len(a) != len(b):
            sys.exit(f"{label_num} and {label_den} have different replication counts")
        m, h = estimate([u / v for u, v in zip(a, b)])
        report["ratios"].append({"numerator": label_num, "denominator": label_den, "x": x,
                                 "mean": m, "ci": h, "n": len(a)})

    for num, den in args.ratio:
        for x in xs:
            ratio((num, x), (den, x), num, den, x)
    if args.relative_to_x is not None:
        x0 = args.relative_to_x
        for series in dict.fromkeys(s for s, _ in order):
            for x in xs:
                if x != x0:
                    ratio((series, x), (series, x0), f"{series} @ {fmt_x(x)}",
                          f"{series} @ {fmt_x(x0)}", x)

    if args.json:
        json.dump(report, sys.stdout, indent=2)
        print()
        return
    print(f"{args.results}: {report['quantity']}, mean ± 95% CI half-width")
    for p in report["points"]:
        extra = "".join(f"  {f}={p[f]:.4f}" if isinstance(p[f], float) else f"  {f}={p[f]}"
                        for f in args.fields)
        print(f"  {p['series']:<36} x={fmt_x(p['x']):<9} {p['mean']:10.4f} ± {p['ci']:.4f}"
              f"  (n={p['n']}){extra}")
    for r in report["ratios"]:
        print(f"  {r['numerator']} / {r['denominator']} at x={fmt_x(r['x'])}: "
              f"{r['mean']:.4f} ± {r['ci']:.4f}")


if __name__ == "__main__":
    main()
