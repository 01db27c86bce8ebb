#!/usr/bin/env bash
# Builds the fuzz targets and runs each for $1 seconds (default 25) from its committed seeds;
# fails on the first crash. Installs cargo-fuzz when missing. See fuzz/README.md.
set -euo pipefail
cd "$(dirname "$0")"
secs="${1:-25}"

command -v cargo-fuzz >/dev/null || cargo install --quiet --locked cargo-fuzz
# The targets need no sanitizer, so no nightly-only flag: the stable toolchain builds them
# (RUSTC_BOOTSTRAP covers any -Z flag cargo-fuzz may add); a nightly one is used if present.
toolchain=()
if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
    toolchain=(+nightly)
else
    export RUSTC_BOOTSTRAP=1
fi
flags=(-O -a -s none)
cargo "${toolchain[@]}" fuzz build "${flags[@]}"

corpus="$(mktemp -d)"
trap 'rm -rf "$corpus"' EXIT
for t in $(cargo "${toolchain[@]}" fuzz list); do
    mkdir -p "$corpus/$t"
    echo "fuzz: $t for ${secs}s"
    log="$corpus/$t.log"
    if ! cargo "${toolchain[@]}" fuzz run "${flags[@]}" "$t" "$corpus/$t" "seeds/$t" -- \
        -max_total_time="$secs" -rss_limit_mb=2048 -malloc_limit_mb=512 -timeout=20 \
        -print_final_stats=1 >"$log" 2>&1; then
        tail -n 80 "$log"
        echo "fuzz: $t failed (the crashing input is in fuzz/artifacts/$t/)"
        exit 1
    fi
    grep -E '^(Done [0-9]+ runs|stat::number_of_executed_units|stat::peak_rss_mb)' "$log"
done
