#!/usr/bin/env python3
"""Per-kernel table of an ncu --csv --page raw export (gpu__time_duration.sum, dram__bytes_read.sum,
launch__grid_size, optionally launch__cluster_dim_z): share of the time, calls, mean time, DRAM
bytes read per call and the bandwidth they imply, grid shapes. Usage: ncu_kernel_table.py CSV...
"""
import collections
import csv
import sys


def table(path, top=12):
    rows = [r for r in csv.reader(open(path, newline="")) if r]
    header_at = next((i for i, r in enumerate(rows) if "Kernel Name" in r), None)
    if header_at is None:
        print(f"{path}: no ncu table")
        return
    h = rows[header_at]
    ki, ti, di, gi = (h.index(c) for c in ("Kernel Name", "gpu__time_duration.sum", "dram__bytes_read.sum",
                                           "launch__grid_size"))
    zi = h.index("launch__cluster_dim_z") if "launch__cluster_dim_z" in h else None
    agg = collections.OrderedDict()
    for r in rows[header_at + 2:]:  # the row after the header holds units
        try:
            t = float(r[ti].replace(",", ""))
            d = float(r[di].replace(",", ""))
        except (ValueError, IndexError):
            continue
        a = agg.setdefault(r[ki][:60], [0, 0.0, 0.0, set()])
        a[0] += 1
        a[1] += t
        a[2] += d
        a[3].add(r[gi] + (f"/z{r[zi]}" if zi is not None else ""))
    total = sum(a[1] for a in agg.values())
    print(f"== {path}: {sum(a[0] for a in agg.values())} kernels, {total / 1e3:.1f} us")
    for name, (n, t, d, grids) in sorted(agg.items(), key=lambda x: -x[1][1])[:top]:
        print(f"{100 * t / total:5.1f}% n={n:4d} mean {t / n / 1e3:8.2f} us {d / n / 1e6:7.1f} MB/call "
              f"{d / max(t, 1):5.0f} GB/s  {name}  grids {','.join(sorted(grids))[:60]}")


if __name__ == "__main__":
    for p in sys.argv[1:]:
        table(p)
