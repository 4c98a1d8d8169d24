#!/usr/bin/env bash
# Decode and prompt processing at depth beside llama.cpp, with the KV cache
# each engine allocates (sliding-window models: llama.cpp's
# llama_kv_cache_iswa against flowinfer's rings).
#
#   FLOWINFER=./flowinfer LLAMA_BIN=path/to/llama.cpp/build/bin \
#       bench/depth.sh MODEL.gguf [DEPTH]
#
# For the depth (default 8192) it runs llama-bench -p 512 -n 32 -d DEPTH and
# then flowinfer bench the same (pp512 and tg32 at that depth; each engine
# prefills the depth once, untimed, and restores it for each test), -r
# $REPS (default 1), -t $THREADS (default 2); ROUNDS (default 1) repeats the
# pair, so the engines alternate and see the same machine. llama-bench runs
# with -v, and its llama_kv_cache
# lines (the SWA and non-SWA caches' cells and MiB) are printed; flowinfer
# bench runs with -b 512, the rows of one step llama.cpp's default n_ubatch
# gives its SWA cache, so both size their window caches for the same step,
# and its "kv cache:" line is printed. Each run's line carries the time it
# started and the 1-minute load average then. The depth's prefill takes
# minutes at 8192 on two cores.
set -u
model=${1:?usage: bench/depth.sh MODEL.gguf [DEPTH]}
depth=${2:-8192}
fi_bin=${FLOWINFER:-}
llama=${LLAMA_BIN:-}
reps=${REPS:-1}
threads=${THREADS:-2}
if [ -z "$fi_bin" ] || [ ! -x "$fi_bin" ]; then
	echo "depth: set FLOWINFER to a flowinfer binary (go build -o flowinfer ./cmd/flowinfer)" >&2; exit 2
fi
if [ -z "$llama" ] || [ ! -x "$llama/llama-bench" ]; then
	echo "depth: set LLAMA_BIN to llama.cpp's build/bin (with llama-bench)" >&2; exit 2
fi
if [ ! -f "$model" ]; then
	echo "depth: no file $model" >&2; exit 2
fi
stamp() { echo "at $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg)"; }

# one ENGINE TEST ARGS...: runs one test, prints its table row and cache lines.
one() {
	local engine=$1 test=$2; shift 2
	local out rc s
	out=$(mktemp)
	s=$(stamp)
	if [ "$engine" = llama.cpp ]; then
		"$llama/llama-bench" -m "$model" -r "$reps" -t "$threads" -v "$@" > "$out" 2>&1
	else
		"$fi_bin" bench -m "$model" -r "$reps" -t "$threads" -b 512 "$@" > "$out" 2>&1
	fi
	rc=$?
	printf "%-10s %-16s %s  rc %s\n" "$engine" "$test" "$s" "$rc"
	grep -E '^\| .*(pp|tg)[0-9]+ @ d' "$out" | sed 's/^/    /'
	if [ "$engine" = llama.cpp ]; then
		grep -E 'llama_kv_cache_iswa: creating|llama_kv_cache: size' "$out" | sed 's/^/    /'
	else
		grep -E '^kv cache:|^machine:' "$out" | sed 's/^/    /'
	fi
	if [ $rc != 0 ]; then tail -3 "$out" | sed 's/^/    /'; fi
	rm -f "$out"
}

echo "depth: $model ($(du -h "$model" | cut -f1)), depth $depth, -r $reps -t $threads, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
for _ in $(seq "${ROUNDS:-1}"); do
	one llama.cpp "d$depth" -p 512 -n 32 -d "$depth"
	one flowinfer "d$depth" -p 512 -n 32 -d "$depth"
done
