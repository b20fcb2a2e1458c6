"""A table of a cargo-mutants run, per file: how many mutants were caught by a
failing test, timed out (a test waited forever: also caught), did not build
(unviable) or were missed. Usage: mutants_summary.py OUTCOMES_JSON"""

from __future__ import annotations

import json
import sys
from collections import Counter, defaultdict

KINDS = ("CaughtMutant", "Timeout", "Unviable", "MissedMutant")


def main(path: str) -> None:
    with open(path) as f:
        outcomes = json.load(f)["outcomes"]
    files: dict[str, Counter[str]] = defaultdict(Counter)
    missed: list[str] = []
    for outcome in outcomes:
        scenario = outcome["scenario"]
        if not isinstance(scenario, dict) or "Mutant" not in scenario:
            continue  # the baseline
        mutant = scenario["Mutant"]
        files[mutant["file"]][outcome["summary"]] += 1
        if outcome["summary"] == "MissedMutant":
            missed.append(mutant["name"])
    print("| file | mutants | caught | timeout | unviable | missed |")
    print("| --- | --- | --- | --- | --- | --- |")
    total: Counter[str] = Counter()
    for file in sorted(files):
        counts = files[file]
        total.update(counts)
        row = " | ".join(str(counts[kind]) for kind in KINDS)
        print(f"| `{file}` | {sum(counts.values())} | {row} |")
    row = " | ".join(str(total[kind]) for kind in KINDS)
    print(f"| all | {sum(total.values())} | {row} |")
    if missed:
        print("\nmissed:")
        for name in missed:
            print(f"  {name}")


if __name__ == "__main__":
    main(sys.argv[1])
