"""ruff's S rules (its port of bandit) against bandit itself, on bandit's own example files.

    .venv/bin/python bench/bench_security.py --bandit-repo /work/.mirror/PyCQA+bandit/repo
    .venv/bin/python bench/bench_security.py --bandit-repo DIR --reps 3 --json out.json

The labelled set is bandit's `examples/` directory, read at run time from a git directory of the
bandit repository (`--bandit-repo`, a bare clone is enough; `--rev`, default HEAD) into a temp
directory, never copied into this repository: one small file per check, written to make that check
fire (and, in a few, not fire). bandit's own findings are the labels.

Both tools run the way the review critics run them (critics/static.py), one file per invocation:
`python -I -m bandit -q -f json -x /nowhere -- FILE` and
`ruff check --isolated --no-cache --exit-zero --select S --output-format json -- FILE`; ruff a second
time with `--preview`, which adds the import rules (S401-S415) and widens a few others. A ruff code maps
to bandit's by its number (S307 <-> B307); the table prints both names so the mapping can be checked.
A finding matches when file, line and mapped rule are equal (counted as multisets); findings on another
line of the same statement, on a line ruff flags with another rule, and ruff's findings on `# nosec`
lines are counted apart. A file either tool cannot parse is left out.

Printed: per bandit rule, what each tool found; ruff's recall of bandit's findings (by severity, MEDIUM
+ HIGH the headline); the time of each tool per file (p50/p95/max over the files) and over the whole
set in one invocation (p50 of --reps runs, tools interleaved), also without bandit's slowest file.
No timing asserts; the exit code is 0.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

from _harness import bench_parser, machine_info, machine_line, pct, scratch, write_json
from _mirrors import bandit_examples, revision

SEVERITIES = ("HIGH", "MEDIUM", "LOW")


def ruff_bin() -> str:
    from ruff.__main__ import find_ruff_bin

    return str(find_ruff_bin())


def bandit_cmd(files: list[Path]) -> list[str]:
    return [sys.executable, "-I", "-m", "bandit", "-q", "-f", "json", "-x", "/nowhere", "--", *map(str, files)]


def ruff_cmd(files: list[Path], preview: bool = False) -> list[str]:
    return [
        ruff_bin(),
        "check",
        "--isolated",
        "--no-cache",
        "--exit-zero",
        "--select",
        "S",
        *(["--preview"] if preview else []),
        "--output-format",
        "json",
        "--",
        *map(str, files),
    ]


def timed(cmd: list[str], cwd: Path) -> tuple[float, str]:
    t0 = time.perf_counter()
    out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if not out.stdout.strip():
        raise RuntimeError(f"{cmd[:4]} exited {out.returncode} without a report: {out.stderr[-500:]}")
    return seconds, out.stdout


def bandit_findings(report: str, root: Path) -> tuple[list[dict], set[str]]:
    """(findings, files bandit could not analyse), file names relative to root."""
    data = json.loads(report)
    found = [
        dict(
            file=str((root / r["filename"]).resolve().relative_to(root)),
            line=r["line_number"],
            rule=r["test_id"],
            name=r["test_name"],
            severity=r["issue_severity"],
            lines=set(r.get("line_range") or [r["line_number"]]),
        )
        for r in data["results"]
    ]
    errors = {str((root / e["filename"]).resolve().relative_to(root)) for e in data.get("errors", [])}
    return found, errors


def ruff_findings(report: str, root: Path) -> tuple[list[dict], set[str]]:
    """(findings with the S code mapped to bandit's B code, files ruff could not parse)."""
    found, errors = [], set()
    for f in json.loads(report):
        name = str((root / f["filename"]).resolve().relative_to(root))
        code = f.get("code")
        if not code:  # a syntax error
            errors.add(name)
            continue
        found.append(
            dict(
                file=name,
                line=f["location"]["row"],
                rule="B" + code[1:],
                code=code,
                end=(f.get("end_location") or f["location"])["row"],
            )
        )
    return found, errors


def ruff_rules() -> dict[str, str]:
    """flake8-bandit rules of this ruff: code -> name, preview ones marked."""
    rules = json.loads(
        subprocess.run(
            [ruff_bin(), "rule", "--all", "--output-format", "json"], check=True, capture_output=True, text=True
        ).stdout
    )
    return {
        r["code"]: r["name"] + (" (preview)" if r.get("preview") else "")
        for r in rules
        if r["linter"] == "flake8-bandit"
    }


def bandit_rules() -> dict[str, str]:
    """bandit's loaded checks: B code -> name (from `bandit --help`)."""
    text = subprocess.run([sys.executable, "-I", "-m", "bandit", "--help"], capture_output=True, text=True).stdout
    return dict(re.findall(r"^\s+(B\d{3})\s+(\S+)", text, re.M))


def key(f: dict) -> tuple[str, int, str]:
    return f["file"], f["line"], f["rule"]


def classify(bandit: list[dict], ruff: list[dict], text: dict[str, list[str]]) -> tuple[list[str], list[str]]:
    """What became of each finding. bandit's: `both` (ruff has file + line + rule; multisets), `near` (ruff has
    the rule in the file on an overlapping line range: a multi-line statement reported on another of its lines),
    `other` (ruff flags that line with another S rule), `miss`. ruff's: `both`, `near`, `nosec` (its lines carry a
    `# nosec` comment, which bandit honours and ruff does not), `extra`."""
    left = Counter(map(key, bandit)) & Counter(map(key, ruff))
    b_cls, r_cls = ["miss"] * len(bandit), ["extra"] * len(ruff)
    take = Counter(left)
    for i, f in enumerate(bandit):
        if take[key(f)] > 0:
            take[key(f)] -= 1
            b_cls[i] = "both"
    take = Counter(left)
    for j, g in enumerate(ruff):
        if take[key(g)] > 0:
            take[key(g)] -= 1
            r_cls[j] = "both"
    for i, f in enumerate(bandit):
        if b_cls[i] != "miss":
            continue
        span = f["lines"] | {f["line"]}
        j = next(
            (
                j
                for j, g in enumerate(ruff)
                if r_cls[j] == "extra"
                and g["file"] == f["file"]
                and g["rule"] == f["rule"]
                and span & set(range(g["line"], g["end"] + 1))
            ),
            None,
        )
        if j is not None:
            b_cls[i] = r_cls[j] = "near"
        elif any(g["file"] == f["file"] and g["line"] == f["line"] for g in ruff):
            b_cls[i] = "other"
    for j, g in enumerate(ruff):
        if r_cls[j] == "extra" and any("nosec" in line for line in text[g["file"]][g["line"] - 1 : g["end"]]):
            r_cls[j] = "nosec"
    return b_cls, r_cls


def main(argv: list[str] | None = None) -> int:
    p = bench_parser(__doc__)
    p.add_argument("--bandit-repo", required=True, type=Path, help="git directory of the bandit repository")
    p.add_argument("--rev", default="HEAD", help="revision of bandit's examples to read (default HEAD)")
    p.add_argument("--reps", type=int, default=5, help="timed whole-set runs per tool (plus one warm-up)")
    args = p.parse_args(argv)
    info = machine_info("ruff", "bandit")
    info["bandit_examples"] = revision(args.bandit_repo, args.rev)[:12]
    info["loadavg_start"] = round(os.getloadavg()[0], 2)
    print(machine_line(info))
    with scratch("hiveboard-bench-security-", args.keep) as home:
        files = bandit_examples(args.bandit_repo, args.rev, home)
        rel = [f.relative_to(home) for f in files]
        text = {str(f): (home / f).read_text("utf-8", "replace").splitlines() for f in rel}
        print(
            f"{len(files)} example files from bandit's examples/ at {info['bandit_examples']}, "
            f"{sum(map(len, text.values()))} lines"
        )
        tools = {
            "bandit": bandit_cmd,
            "ruff --select S": ruff_cmd,
            "ruff --select S --preview": lambda fs: ruff_cmd(fs, preview=True),
        }

        per_file: dict[str, list[float]] = {tool: [] for tool in tools}
        reports: dict[str, list[str]] = {tool: [] for tool in tools}
        for f in rel:  # one file per invocation, as a review critic runs: findings and times
            for tool, cmd in tools.items():
                seconds, report = timed(cmd([f]), home)
                per_file[tool].append(seconds)
                reports[tool].append(report)
        slowest = rel[max(range(len(rel)), key=lambda i: per_file["bandit"][i])]
        sets = {"all": rel, f"without {slowest}": [f for f in rel if f != slowest]}
        times: dict[str, dict[str, list[float]]] = {name: {tool: [] for tool in tools} for name in sets}
        for i in range(args.reps + 1):  # the whole set in one invocation, tools interleaved, the first a warm-up
            for name, fs in sets.items():
                for tool, cmd in tools.items():
                    seconds = timed(cmd(fs), home)[0]
                    if i:
                        times[name][tool].append(seconds)

        found: dict[str, list[dict]] = {}
        errors: set[str] = set()
        for tool in tools:
            found[tool] = []
            for report in reports[tool]:
                fs, errs = (bandit_findings if tool == "bandit" else ruff_findings)(report, home)
                found[tool] += fs
                errors |= errs
        if errors:  # a file either tool could not parse is left out of the comparison
            print(f"left out (bandit could not analyse it, or ruff found a syntax error): {', '.join(sorted(errors))}")
        found = {tool: [f for f in fs if f["file"] not in errors] for tool, fs in found.items()}
        bandit, stable, preview = found["bandit"], found["ruff --select S"], found["ruff --select S --preview"]
        b_cls, r_cls = classify(bandit, stable, text)
        bp_cls, rp_cls = classify(bandit, preview, text)
        b_names, r_names = bandit_rules(), ruff_rules()

        rows: dict[str, Counter] = defaultdict(Counter)
        for f, c, cp in zip(bandit, b_cls, bp_cls):
            row = rows[f["rule"]]
            row["bandit"] += 1
            row[f["severity"][0]] += 1
            row[c] += 1
            row["pv " + cp] += 1
        for g, c in zip(stable, r_cls):
            rows[g["rule"]]["r " + c] += 1
        print(
            "\nPer rule, ruff's stable S rules (ruff's code has bandit's number: S307 = B307). bandit = its findings,"
            " by severity H/M/L. Matched on file + line + rule: both; bandit's unmatched ones: near = ruff has the"
            "\nrule on an overlapping line range (another line of a multi-line statement), other = ruff flags that"
            " line with another S rule, miss = neither. r-only = ruff's unmatched (not near): nosec = on a line "
            "bandit's `# nosec` silences.\n+pv: both + near with --preview."
        )
        head = (
            f"{'rule':<5} {'bandit check':<32} {'ruff rule':<42} {'bandit':>6} {'sev':<10} {'both':>4} {'near':>4} "
            f"{'other':>5} {'miss':>4} {'r-only':>6} {'nosec':>5} {'+pv':>4}"
        )
        print(head + "\n" + "-" * len(head))
        total: Counter = Counter()
        for rule in sorted(rows):
            r = rows[rule]
            r_only = r["r extra"] + r["r nosec"]
            cells = dict(
                bandit=r["bandit"],
                both=r["both"],
                near=r["near"],
                other=r["other"],
                miss=r["miss"],
                r_only=r_only,
                nosec=r["r nosec"],
                pv=r["pv both"] + r["pv near"],
            )
            total.update(cells)
            sev = " ".join(f"{k}{r[k]}" for k in "HML" if r[k])
            print(
                f"{rule:<5} {b_names.get(rule, '(not in this bandit)')[:32]:<32} "
                f"{r_names.get('S' + rule[1:], '-')[:42]:<42} {cells['bandit']:>6} {sev:<10} {cells['both']:>4} "
                f"{cells['near']:>4} {cells['other']:>5} {cells['miss']:>4} {cells['r_only']:>6} {cells['nosec']:>5} "
                f"{cells['pv']:>4}"
            )
        print("-" * len(head))
        print(
            f"{'all':<5} {'':<32} {'':<42} {total['bandit']:>6} {'':<10} {total['both']:>4} {total['near']:>4} "
            f"{total['other']:>5} {total['miss']:>4} {total['r_only']:>6} {total['nosec']:>5} {total['pv']:>4}"
        )
        missing = sorted(set(b_names) - {"B" + c[1:] for c in r_names})
        print(f"bandit checks with no ruff S rule of that number: {', '.join(f'{c} {b_names[c]}' for c in missing)}")

        print(
            "\nRecall of ruff relative to bandit: share of bandit's findings that ruff reports at the same file, line"
            " and rule (exact); +near: or the same rule on another line of the same statement; +line: or any S rule"
            " on that line"
        )
        head = (
            f"{'bandit severity':<16} {'findings':>8} | {'ruff S exact':>13} {'+near':>6} {'+line':>6} | "
            f"{'--preview exact':>15} {'+near':>6} {'+line':>6}"
        )
        print(head + "\n" + "-" * len(head))
        out_recall = {}
        for label, sevs in (
            ("HIGH", ("HIGH",)),
            ("MEDIUM", ("MEDIUM",)),
            ("MEDIUM + HIGH", ("MEDIUM", "HIGH")),
            ("LOW", ("LOW",)),
            ("all", SEVERITIES),
        ):
            idx = [i for i, f in enumerate(bandit) if f["severity"] in sevs]
            n = len(idx)
            counts = {
                name: [
                    sum(cls[i] in ok for i in idx) for ok in (("both",), ("both", "near"), ("both", "near", "other"))
                ]
                for name, cls in (("stable", b_cls), ("preview", bp_cls))
            }
            out_recall[label] = dict(findings=n, **counts)

            def share(h: int) -> str:
                return f"{h / n:.1%}" if n else "-"

            (s1, s2, s3), (p1, p2, p3) = counts["stable"], counts["preview"]
            print(
                f"{label:<16} {n:>8} | {s1:>5} {share(s1):>7} {share(s2):>6} {share(s3):>6} | "
                f"{p1:>7} {share(p1):>7} {share(p2):>6} {share(p3):>6}"
            )
        for name, cls in (("ruff --select S", b_cls), ("with --preview", bp_cls)):
            missed = Counter(f["rule"] for f, c in zip(bandit, cls) if c == "miss" and f["severity"] != "LOW")
            print(
                f"MEDIUM/HIGH findings {name} misses (no S finding on the line): {sum(missed.values())}: "
                + ", ".join(f"{rule} {b_names.get(rule, '?')} {n}" for rule, n in missed.most_common())
            )
        print(
            f"ruff's own findings: {len(stable)} stable ({r_cls.count('both') + r_cls.count('near')} matched to "
            f"bandit's, {r_cls.count('nosec')} on `# nosec` lines, {r_cls.count('extra')} others); "
            f"{len(preview)} with --preview ({rp_cls.count('both') + rp_cls.count('near')} matched)"
        )

        print(
            f"\nTime, ms: the whole set in one invocation (p50 and max of {args.reps} runs after a warm-up, "
            f"tools interleaved), and one file per invocation (p50, p95, max over the {len(rel)} files)"
        )
        names = list(sets)
        head = (
            f"{'tool':<26} {'set p50':>8} {'max':>8} {'w/o ' + str(slowest)[:12]:>16} {'file p50':>8} "
            f"{'p95':>7} {'max':>8}"
        )
        print(head + "\n" + "-" * len(head))
        for tool in tools:
            a, b, fs = times[names[0]][tool], times[names[1]][tool], per_file[tool]
            print(
                f"{tool:<26} {pct(a, 50):>8.1f} {max(a) * 1000:>8.1f} {pct(b, 50):>16.1f} {pct(fs, 50):>8.1f} "
                f"{pct(fs, 95):>7.1f} {max(fs) * 1000:>8.1f}"
            )
        t = {name: pct(times[name]["bandit"], 50) / pct(times[name]["ruff --select S"], 50) for name in names}
        print(
            f"bandit / ruff --select S (p50): {t[names[0]]:.0f}x over the whole set, {t[names[1]]:.0f}x without "
            f"{slowest} (bandit's slowest file: {max(per_file['bandit']) * 1000:.0f} ms alone), "
            f"{pct(per_file['bandit'], 50) / pct(per_file['ruff --select S'], 50):.0f}x per file"
        )
        info["loadavg_end"] = round(os.getloadavg()[0], 2)
        print(f"\nload average {info['loadavg_start']:.2f} at start, {info['loadavg_end']:.2f} at end")
        write_json(
            args.json,
            dict(
                machine=info,
                files=[str(f) for f in rel],
                left_out=sorted(errors),
                recall=out_recall,
                rules={rule: dict(row) for rule, row in rows.items()},
                times={name: times[name] for name in names},
                per_file=per_file,
                findings=dict(
                    bandit=[
                        dict({k: v for k, v in f.items() if k != "lines"}, stable=c, preview=cp)
                        for f, c, cp in zip(bandit, b_cls, bp_cls)
                    ],
                    ruff=[dict(g, cls=c) for g, c in zip(stable, r_cls)],
                    ruff_preview=[dict(g, cls=c) for g, c in zip(preview, rp_cls)],
                ),
            ),
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
