"""Medians over several runs: `python bench/summarize.py run1.json run2.json ...`.

Each file is what `run_all.py --json` wrote. Prints, as Markdown, every table with each
numeric cell replaced by its median over the runs (rows matched by their first two cells),
then every target with the median of its measured value and how many runs met it.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from pathlib import Path
from typing import Any

NUMBER = re.compile(r"^-?[\d,]+(\.\d+)?%?$")


def _num(cell: Any) -> float | None:
    text = str(cell).strip()
    if not NUMBER.match(text):
        return None
    value = float(text.rstrip("%").replace(",", ""))
    return value / 100 if text.endswith("%") else value


def _cell(values: list[Any]) -> str:
    parts = [str(v).split("/") for v in values]
    if len(parts[0]) > 1 and all(len(p) == len(parts[0]) for p in parts):
        # A composite cell such as "p50/p99": the median of each part.
        return "/".join(_cell([p[i] for p in parts]) for i in range(len(parts[0])))
    numbers = [_num(v) for v in values]
    if any(n is None for n in numbers):
        return str(values[0]) if len(set(map(str, values))) == 1 else " / ".join(map(str, values))
    found = statistics.median([n for n in numbers if n is not None])
    if str(values[0]).strip().endswith("%"):
        return f"{found:.0%}"
    return f"{found:,.0f}" if found >= 100 or found.is_integer() else f"{found:.2f}"


def main(paths: list[str]) -> int:
    runs = [json.loads(Path(p).read_text()) for p in paths]
    print(f"Medians over {len(runs)} runs: " + ", ".join(r["when"] for r in runs) + "\n")
    names = [r["name"] for r in runs[0]["results"]]
    for name in names:
        per_run = [next((x for x in r["results"] if x["name"] == name), None) for r in runs]
        per_run = [x for x in per_run if x is not None]
        print(f"### {name}\n")
        for index, table in enumerate(per_run[0]["tables"]):
            print(f"**{table['title']}**\n")
            print("| " + " | ".join(table["columns"]) + " |")
            print("|" + "---|" * len(table["columns"]))
            for row in table["rows"]:
                key = [str(c) for c in row[:2]]
                matches = [row]
                for other in per_run[1:]:
                    if index < len(other["tables"]):
                        for candidate in other["tables"][index]["rows"]:
                            if [str(c) for c in candidate[:2]] == key:
                                matches.append(candidate)
                cells = [_cell([m[i] for m in matches]) for i in range(len(row))]
                print("| " + " | ".join(cells) + " |")
            print()
        print("| target | median measured | limit | met in runs |\n|---|---|---|---|")
        for target in per_run[0]["targets"]:
            found = [t for x in per_run for t in x["targets"] if t["name"] == target["name"]]
            value = statistics.median(t["value"] for t in found)
            met = sum(1 for t in found if t["met"])
            bound = ">=" if target["at_least"] else "<="
            print(f"| {target['name']} | {value:,.3g} {target['unit']} | {bound} "
                  f"{target['limit']:g} | {met}/{len(found)} |")
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
