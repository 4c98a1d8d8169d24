#!/bin/sh
# mca.sh: cycles per packed record of the AVX2 and AVX-512 product loops,
# estimated by llvm-mca for a CPU model, from the assembly GCC makes of
# cpu/kern_avx2_pk.c, cpu/kern_avx512.c and cpu/kern_avx512_iq.c with -DFI_MCA (region markers:
# FI_MCA_BEGIN in cpu/kern_ld.h). A static estimate, not a measurement: it
# is how the AVX-512 path is judged on machines without AVX-512, and how a
# kernel change is checked for spills before it is timed.
#
#   sh bench/mca.sh [MCPU]     (default icelake-server; e.g. znver3)
#
# Needs gcc and llvm-mca (Debian: llvm). Columns: region (path, kernel,
# activation rows n), instructions and estimated cycles per record (8 rows
# on AVX2, 16 on AVX-512), spill stores and loads (%rsp), and cycles per
# 256 weights of one row and one activation row (comparable across paths).
set -eu
mcpu=${1:-icelake-server}
cd "$(dirname "$0")/../cpu"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for f in kern_avx2_pk kern_avx512 kern_avx512_iq; do
	gcc -O2 -std=gnu11 -DFI_MCA -S -fno-asynchronous-unwind-tables "$f.c" -o "$tmp/$f.s"
done
# one file per region, instructions only
cat "$tmp"/*.s | awk -v dir="$tmp" '
	/LLVM-MCA-BEGIN/ { name = $NF; out = dir "/r_" name ".s"; next }
	/LLVM-MCA-END/ { close(out); out = ""; next }
	out != "" && /^\t/ && $1 !~ /^\./ && $1 != "#" { print > out }
'
printf '%-26s %6s %8s %6s %6s %10s\n' region instr cycles st ld cyc/256w
for r in "$tmp"/r_*.s; do
	name=$(basename "$r" .s)
	name=${name#r_}
	cyc=$(llvm-mca -mcpu="$mcpu" -iterations=200 "$r" 2>/dev/null | awk '/^Total Cycles:/ { print $3 / 200 }')
	n=$(wc -l <"$r")
	st=$(grep -cE '%[xyz]mm[0-9]+, -?[0-9]*\(%rsp\)' "$r" || true)
	ld=$(($(grep -c '(%rsp)' "$r" || true) - st))
	awk -v name="$name" -v n="$n" -v cyc="$cyc" -v st="$st" -v ld="$ld" 'BEGIN {
		rows = name ~ /^avx512/ && name !~ /gemv/ ? 16 : 8 # the IQ decode: one 8-row group
		na = name; sub(/.*_/, "", na)
		blk = name ~ /q8_0|q4_0|iq4_nl|mxfp4/ ? 32 : 256
		if (cyc == "") { # the model lacks the instruction set (znver3: no AVX-512)
			printf "%-26s %6d %8s %6d %6d %10s\n", name, n, "-", st, ld, "-"
			exit
		}
		printf "%-26s %6d %8.1f %6d %6d %10.2f\n", name, n, cyc, st, ld, cyc / (rows * na) * 256 / blk
	}'
done
