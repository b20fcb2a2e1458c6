"""Mutation testing of the two stores' conditions, against their servers.

cargo-mutants changes Rust operators; the conditions that make a store
linearizable are text sent to the server (DynamoDB condition and update
expressions, PostgreSQL statements), which it does not touch. This driver
applies one hand-written change to that text at a time, in a copy of the
committed tree, runs the store's tests against the servers ./scripts/mutants
started, and records whether a test failed ("caught"), none did ("MISSED"), or
the change did not build ("unviable", a mistake in the list).

Usage (from scripts/mutants): store_mutants.py TREE RESULTS [NAME...]
  TREE     a copy of the workspace to mutate (left as it was found)
  RESULTS  file to write one line per mutant to
  NAME     run only the mutants whose names contain one of these
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Mutant:
    name: str
    file: str
    original: str
    mutated: str
    tests: tuple[str, ...]


# Seconds a build or a test run may take: the unmutated tests take well
# under two minutes, a build of the copy under five on a cold target.
TIMEOUT = 600

DYNAMODB = ("-p", "lock-dynamodb", "--test", "dynamodb")
POSTGRES = ("-p", "lock-postgres", "--test", "postgres", "--test", "client")

MUTANTS = [
    # DynamoDB: lock-dynamodb/src/store.rs
    Mutant(
        "dynamodb: vacant accepts a live record (attribute_exists)",
        "lock-dynamodb/src/store.rs",
        'format!("attribute_not_exists({pk}) OR {rel} = {marker}")',
        'format!("attribute_exists({pk}) OR {rel} = {marker}")',
        DYNAMODB,
    ),
    Mutant(
        "dynamodb: vacant needs absent AND released",
        "lock-dynamodb/src/store.rs",
        'format!("attribute_not_exists({pk}) OR {rel} = {marker}")',
        'format!("attribute_not_exists({pk}) AND {rel} = {marker}")',
        DYNAMODB,
    ),
    Mutant(
        "dynamodb: vacant ignores released records",
        "lock-dynamodb/src/store.rs",
        'format!("attribute_not_exists({pk}) OR {rel} = {marker}")',
        'format!("attribute_not_exists({pk}) OR ({rel} = {marker} AND attribute_not_exists({rel}))")',
        DYNAMODB,
    ),
    Mutant(
        "dynamodb: vacant takes a held record as released",
        "lock-dynamodb/src/store.rs",
        'format!("attribute_not_exists({pk}) OR {rel} = {marker}")',
        'format!("attribute_not_exists({pk}) OR {rel} <> {marker}")',
        DYNAMODB,
    ),
    Mutant(
        "dynamodb: a version write accepts any other version",
        "lock-dynamodb/src/store.rs",
        'format!("{r} = {expected}")',
        'format!("{r} <> {expected}")',
        DYNAMODB,
    ),
    Mutant(
        "dynamodb: a version write accepts any record",
        "lock-dynamodb/src/store.rs",
        'format!("{r} = {expected}")',
        'format!("attribute_exists({r}) OR {r} = {expected}")',
        DYNAMODB,
    ),
    Mutant(
        "dynamodb: the fence does not step",
        "lock-dynamodb/src/store.rs",
        'expr.value(":one", AttributeValue::N("1".into()));',
        'expr.value(":one", AttributeValue::N("0".into()));',
        DYNAMODB,
    ),
    Mutant(
        "dynamodb: a delete on vacant deletes a live record",
        "lock-dynamodb/src/store.rs",
        'format!("attribute_exists({pk}) AND {rel} = {marker}")',
        'format!("attribute_exists({pk}) AND ({rel} = {marker} OR attribute_exists({pk}))")',
        DYNAMODB,
    ),
    # PostgreSQL: lock-postgres/src/sql.rs
    Mutant(
        "postgres: vacant overwrites a live row",
        "lock-postgres/src/sql.rs",
        "WHERE t.released \\",
        "WHERE true \\",
        POSTGRES,
    ),
    Mutant(
        "postgres: vacant overwrites only live rows",
        "lock-postgres/src/sql.rs",
        "WHERE t.released \\",
        "WHERE NOT t.released \\",
        POSTGRES,
    ),
    Mutant(
        "postgres: a version write ignores the version",
        "lock-postgres/src/sql.rs",
        "AND current.rvn = $11 \\",
        "AND (current.rvn = $11 OR true) \\",
        POSTGRES,
    ),
    Mutant(
        "postgres: a version write on any other version",
        "lock-postgres/src/sql.rs",
        "AND current.rvn = $11 \\",
        "AND current.rvn <> $11 \\",
        POSTGRES,
    ),
    Mutant(
        "postgres: the fence never steps on a released row",
        "lock-postgres/src/sql.rs",
        'const FENCE: &str = "CASE WHEN $7::bool THEN t.fence + 1 ELSE t.fence END";',
        'const FENCE: &str = "CASE WHEN $7::bool THEN t.fence ELSE t.fence END";',
        POSTGRES,
    ),
    Mutant(
        "postgres: a new row starts its fence at 0",
        "lock-postgres/src/sql.rs",
        "CASE WHEN $7::bool THEN 1 ELSE 0 END",
        "CASE WHEN $7::bool THEN 0 ELSE 0 END",
        POSTGRES,
    ),
    Mutant(
        "postgres: keep-data clears the data",
        "lock-postgres/src/sql.rs",
        "CASE $8::int4 WHEN 0 THEN t.data WHEN 1",
        "CASE $8::int4 WHEN 0 THEN NULL WHEN 1",
        POSTGRES,
    ),
    Mutant(
        "postgres: a rejection returns no current row",
        "lock-postgres/src/sql.rs",
        "SELECT false, {COLUMNS} FROM current WHERE NOT EXISTS",
        "SELECT false, {COLUMNS} FROM current WHERE false AND NOT EXISTS",
        POSTGRES,
    ),
    Mutant(
        "postgres: delete on vacant deletes a live row",
        "lock-postgres/src/sql.rs",
        'delete_vacant: delete("current.released"),',
        'delete_vacant: delete("true"),',
        POSTGRES,
    ),
    Mutant(
        "postgres: delete on a version ignores it",
        "lock-postgres/src/sql.rs",
        'delete_version: delete("current.rvn = $3"),',
        'delete_version: delete("current.rvn <> $3"),',
        POSTGRES,
    ),
    Mutant(
        "postgres: paging repeats the last key of a page",
        "lock-postgres/src/sql.rs",
        "WHERE (partition_key, sort_key) > ($1, $2)",
        "WHERE (partition_key, sort_key) >= ($1, $2)",
        POSTGRES,
    ),
    Mutant(
        "postgres: the first page of a partition skips its unsorted key",
        "lock-postgres/src/sql.rs",
        "WHERE partition_key = $1 AND sort_key >= $2",
        "WHERE partition_key = $1 AND sort_key > $2",
        POSTGRES,
    ),
    Mutant(
        "postgres: the row is not locked before the decision",
        "lock-postgres/src/sql.rs",
        "FROM {t} WHERE {KEY} FOR UPDATE)",
        "FROM {t} WHERE {KEY})",
        POSTGRES,
    ),
]


def cargo(tree: Path, *args: str) -> bool:
    """`cargo ARGS` in the tree succeeds within `TIMEOUT` seconds (a mutant
    can make a test wait forever: then the whole process group is killed,
    the test binary with cargo)."""
    process = subprocess.Popen(
        ["cargo", *args],
        cwd=tree,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        return process.wait(timeout=TIMEOUT) == 0
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        return False


def passes(tree: Path, tests: tuple[str, ...]) -> bool:
    """The tests pass on the tree as it is."""
    return cargo(tree, "test", "--quiet", *tests)


def run(tree: Path, results: Path, names: list[str]) -> int:
    chosen = [m for m in MUTANTS if not names or any(n in m.name for n in names)]
    for tests in sorted({m.tests for m in chosen}):
        started = time.monotonic()
        if not passes(tree, tests):
            print(f"the unmutated tree fails: cargo test {' '.join(tests)}", file=sys.stderr)
            return 2
        print(f"baseline ok: cargo test {' '.join(tests)} ({time.monotonic() - started:.0f} s)", flush=True)
    missed = 0
    with results.open("w") as out:
        for mutant in chosen:
            path = tree / mutant.file
            source = path.read_text()
            count = source.count(mutant.original)
            if count != 1:
                line = f"STALE    {mutant.name}: the original text occurs {count} times"
            else:
                path.write_text(source.replace(mutant.original, mutant.mutated))
                started = time.monotonic()
                try:
                    # A mutant that does not build tests nothing.
                    builds = cargo(tree, "test", "--quiet", "--no-run", *mutant.tests)
                    failed = builds and not passes(tree, mutant.tests)
                finally:
                    path.write_text(source)
                took = time.monotonic() - started
                verdict = "unviable" if not builds else "caught" if failed else "MISSED"
                missed += builds and not failed
                line = f"{verdict:8} {mutant.name} ({took:.0f} s)"
            print(line, flush=True)
            out.write(line + "\n")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(run(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:]))
