#!/usr/bin/env python3
"""One line a launch from Nsight Compute's `--page details --print-details all` text
(scripts/cuda-stalls.sh's details.txt): kernel, grid, block, duration, DRAM throughput (% of
peak), achieved occupancy, registers, issue slots busy, warp cycles per issued instruction and
the three largest stall reasons (cycles a warp an issued instruction). A markdown table on
stdout, so a call's launches can be compared without Nsight Compute's GUI.

    python3 scripts/ncu_launches.py OUT/stalls/details.txt > launches.md
"""
import re
import sys

HEAD = re.compile(r"^  (\S+) \(([\d, ]+)\)x\(([\d, ]+)\), Context")
METRIC = re.compile(r"^\s{4}(\S.*?)\s{2,}(\S+)?\s+([-\d.,]+)\s*$")
WANT = {
    "Duration": "dur",
    "DRAM Throughput": "dram",
    "Achieved Occupancy": "occ",
    "Registers Per Thread": "regs",
    "Issue Slots Busy": "issue",
    "Warp Cycles Per Issued Instruction": "wcpi",
}
# Duration units as Nsight Compute prints them, to microseconds.
TO_US = {"ns": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}


def number(s):
    return float(s.replace(",", ""))


def launches(lines):
    cur = None
    for line in lines:
        m = HEAD.match(line)
        if m:
            if cur:
                yield cur
            cur = {"name": m.group(1), "grid": m.group(2).replace(" ", ""),
                   "block": m.group(3).replace(" ", ""), "stalls": {}}
            continue
        if cur is None:
            continue
        m = METRIC.match(line)
        if not m:
            continue
        name, unit, value = m.group(1).strip(), m.group(2) or "", m.group(3)
        if name in WANT and WANT[name] not in cur:
            cur[WANT[name]] = (number(value), unit)
        elif name.startswith("Stall ") and unit == "inst" and name not in cur["stalls"]:
            cur["stalls"][name[6:]] = number(value)
    if cur:
        yield cur


def fmt(d, key, digits=1):
    return f"{d[key][0]:.{digits}f}" if key in d else "—"


def main():
    with open(sys.argv[1], errors="replace") as f:
        rows = list(launches(f))
    print("launch | kernel | grid | block | µs | DRAM % of peak | occupancy % | registers | "
          "issue slots % | warp cycles / issued | top stalls (cycles / issued)")
    print("---|---|---|---|---|---|---|---|---|---|---")
    for i, d in enumerate(rows):
        value, unit = d.get("dur", (float("nan"), "us"))
        us = value * TO_US.get(unit, float("nan"))
        top = sorted(d["stalls"].items(), key=lambda kv: -kv[1])[:3]
        stalls = ", ".join(f"{k} {v:.2f}" for k, v in top)
        print(f"{i} | {d['name']} | {d['grid']} | {d['block']} | {us:.1f} | {fmt(d, 'dram')} | "
              f"{fmt(d, 'occ')} | {fmt(d, 'regs', 0)} | {fmt(d, 'issue')} | {fmt(d, 'wcpi', 2)} | {stalls}")


if __name__ == "__main__":
    main()
