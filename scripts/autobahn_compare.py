#!/usr/bin/env python3
"""Compare a kosoku/Autobahn index.json with the committed baseline.

Exit 1 when any case is missing or its behavior (or close behavior) ranks
worse than the baseline, or when any case FAILED at all (a baseline may not
hold a failure either); print a summary either way. `--update` writes the
current results as the new baseline.
"""
import json
import sys

RANK = {"OK": 0, "NON-STRICT": 1, "INFORMATIONAL": 1, "UNIMPLEMENTED": 2, "FAILED": 3}


def load_results(path):
    with open(path) as f:
        index = json.load(f)
    cases = {}
    for agent in index.values():
        for case, r in agent.items():
            cases[case] = {"behavior": r["behavior"], "behaviorClose": r["behaviorClose"]}
    return cases


def main():
    current_path, baseline_path = sys.argv[1], sys.argv[2]
    current = load_results(current_path)
    if "--update" in sys.argv:
        with open(baseline_path, "w") as f:
            json.dump(dict(sorted(current.items())), f, indent=1, sort_keys=True)
            f.write("\n")
        print(f"baseline updated: {len(current)} cases")
        return 0
    with open(baseline_path) as f:
        baseline = json.load(f)
    counts = {}
    for r in current.values():
        counts[r["behavior"]] = counts.get(r["behavior"], 0) + 1
    print("autobahn:", ", ".join(f"{n} {b}" for b, n in sorted(counts.items())))
    regressions = [
        f"{case}: {key} {got[key]}"
        for case, got in sorted(current.items())
        for key in ("behavior", "behaviorClose")
        if got[key] in ("FAILED", "ERROR")
    ]
    for case, want in sorted(baseline.items()):
        got = current.get(case)
        if got is None:
            regressions.append(f"{case}: missing from this run")
            continue
        for key in ("behavior", "behaviorClose"):
            if RANK.get(got[key], 3) > RANK.get(want[key], 3):
                regressions.append(f"{case}: {key} {want[key]} -> {got[key]}")
    if regressions:
        print("Autobahn regressions against autobahn/baseline.json:")
        for r in regressions:
            print("  " + r)
        return 1
    print(f"autobahn: {len(baseline)} cases at or above baseline")
    return 0


if __name__ == "__main__":
    sys.exit(main())
