#!/usr/bin/env bash
# Out-of-core benchmark: decode and prompt speed of flowinfer and llama.cpp
# on the same GGUF, under memory caps, with the page cache dropped before
# every run (issue: models larger than memory).
#
#   sudo FLOWINFER=./flowinfer LLAMA_BIN=path/to/llama.cpp/build/bin \
#        bench/outofcore.sh MODEL.gguf|PRESET [CAP ...]
#
# The model is a GGUF file or a `flowinfer gen` preset (qwen3-30b-a3b,
# gpt-oss-20b, llama-8b, ...): a preset is generated once into
# $MODEL_DIR/PRESET.gguf (default: the current directory) with GEN_ARGS
# (default "--type Q4_K_M"; for the gpt-oss presets, whose experts are
# MXFP4 whatever the rest, "--pure --type Q8_0", llama-quantize's
# MXFP4_MOE) and reused when that file exists.
#
# CAPs are cgroup memory limits (4G, 8G, ...; "none" for no cap); default
# "4G 8G none". Each run: drop caches, start the command inside the cgroup,
# 16 tokens after a short prompt, 2 threads, context 512. llama.cpp runs
# llama-completion with its default (repack), --no-repack, and, without a
# cap, --no-mmap; flowinfer runs with its defaults (--ram-budget from the
# cgroup limit) and, for a MoE model, also with --prefetch-depth 0; the two
# engines alternate within each cap, so they see the same machine. The
# script prints one line per run: engine, setting, cap, prompt t/s, decode
# t/s, peak memory of the cgroup (page cache included), exit status, the
# time it started and the 1-minute load average then; per cap, flowinfer's
# best decode over llama.cpp's best (a run that timed out or failed counts
# as no figure: its line says so); and the disk's O_DIRECT bandwidth at the
# reader's queue depth (bench/diskbw). It needs root (cgroup v1 memory
# controller at /sys/fs/cgroup/memory, or cgroup v2 at /sys/fs/cgroup) and
# says so. TIMEOUT (seconds, default 1200) bounds each run.
set -u
model=${1:?usage: bench/outofcore.sh MODEL.gguf|PRESET [CAP ...]}
shift
caps=${*:-"4G 8G none"}
fi_bin=${FLOWINFER:-}
llama=${LLAMA_BIN:-}
prompt="Once upon a time"
ntok=16
timeout_s=${TIMEOUT:-1200}
if [ -z "$fi_bin" ] || [ ! -x "$fi_bin" ]; then
	echo "outofcore: set FLOWINFER to a flowinfer binary (go build -o flowinfer ./cmd/flowinfer)" >&2; exit 2
fi
if [ -z "$llama" ] || [ ! -x "$llama/llama-completion" ]; then
	echo "outofcore: set LLAMA_BIN to llama.cpp's build/bin (with llama-completion)" >&2; exit 2
fi
if [ "$(id -u)" != 0 ]; then
	echo "outofcore: needs root (cgroup memory limits and drop_caches)" >&2; exit 2
fi
if [ -d /sys/fs/cgroup/memory ]; then
	cg=/sys/fs/cgroup/memory/fi-outofcore; v=1
elif [ -f /sys/fs/cgroup/cgroup.controllers ]; then
	cg=/sys/fs/cgroup/fi-outofcore; v=2
else
	echo "outofcore: no cgroup memory controller found" >&2; exit 2
fi
mkdir -p "$cg" || { echo "outofcore: cannot create $cg" >&2; exit 2; }

# a preset name: generate the file once
if [ ! -f "$model" ]; then
	case $model in
	*/* | *.gguf) echo "outofcore: no file $model" >&2; exit 2;;
	esac
	preset=$model
	model=${MODEL_DIR:-.}/$preset.gguf
	case $preset in
	gpt-oss-*) gen_args=${GEN_ARGS:-"--pure --type Q8_0"};;
	*) gen_args=${GEN_ARGS:-"--type Q4_K_M"};;
	esac
	if [ ! -f "$model" ]; then
		echo "outofcore: generating $model: flowinfer gen --preset $preset $gen_args" >&2
		# shellcheck disable=SC2086 # gen_args is a list of flags
		"$fi_bin" gen --preset "$preset" $gen_args -o "$model" || exit 2
	fi
fi

bytes() { # 4G -> bytes
	case $1 in
	*G) echo $(( ${1%G} * 1024 * 1024 * 1024 ));;
	*M) echo $(( ${1%M} * 1024 * 1024 ));;
	*) echo "$1";;
	esac
}

setcap() {
	if [ $v = 1 ]; then
		if [ "$1" = none ]; then echo -1 > "$cg/memory.limit_in_bytes"; else bytes "$1" > "$cg/memory.limit_in_bytes"; fi
		echo 0 > "$cg/memory.max_usage_in_bytes"
	else
		if [ "$1" = none ]; then echo max > "$cg/memory.max"; else bytes "$1" > "$cg/memory.max"; fi
	fi
}

peak() {
	if [ $v = 1 ]; then cat "$cg/memory.max_usage_in_bytes"; else cat "$cg/memory.peak" 2>/dev/null || echo 0; fi
}

# best A B: the larger decode rate ("" counts as none).
best() {
	if [ -z "$1" ]; then echo "$2"; elif [ -z "$2" ]; then echo "$1"; else echo "if ($1 > $2) $1 else $2" | bc -l; fi
}

# run CAP NAME SETTING CMD...: one measured run inside the cgroup.
run() {
	local cap=$1 name=$2 setting=$3; shift 3
	setcap "$cap"
	sync; echo 3 > /proc/sys/vm/drop_caches
	local when load
	when=$(date -u +%H:%M:%S); load=$(cut -d' ' -f1 /proc/loadavg)
	local out; out=$(mktemp)
	timeout "$timeout_s" sh -c 'echo $$ > "$0/cgroup.procs"; exec "$@"' "$cg" "$@" > "$out" 2>&1
	local rc=$?
	local pp tg
	if [ "$name" = flowinfer ]; then
		pp=$(grep -o 'prompt eval time.*' "$out" | grep -o '[0-9.]* tokens per second' | cut -d' ' -f1)
		tg=$(grep -o ' eval time.*runs.*' "$out" | grep -v prompt | grep -o '[0-9.]* tokens per second' | cut -d' ' -f1)
	else
		pp=$(grep 'prompt eval time' "$out" | grep -o '[0-9.]* tokens per second' | cut -d' ' -f1)
		tg=$(grep ' eval time' "$out" | grep -v prompt | grep -o '[0-9.]* tokens per second' | cut -d' ' -f1)
	fi
	printf "%-10s %-28s cap %-5s pp %8s t/s  tg %8s t/s  peak %6.2f GiB  rc %s  at %s load %s\n" "$name" "$setting" "$cap" "${pp:--}" "${tg:--}" \
		"$(echo "$(peak) / 1073741824" | bc -l)" "$rc" "$when" "$load"
	if [ $rc = 124 ]; then echo "    timed out after ${timeout_s} s"; fi
	if [ $rc = 0 ] && [ -n "$tg" ]; then
		if [ "$name" = flowinfer ]; then best_fi=$(best "$best_fi" "$tg"); else best_ll=$(best "$best_ll" "$tg"); fi
	fi
	if [ "$name" = flowinfer ]; then grep -E 'expert cache:|disk reads:|prefetch:|weights:|preloaded|layer stream:' "$out" | sed 's/^/    /'; fi
	# the output may end without a newline (a run killed mid-line)
	if [ $rc != 0 ]; then tail -3 "$out" | sed -e 's/^/    /' -e '$a\'; fi
	rm -f "$out"
}

# a MoE model also runs without speculative prefetch (the default is 1)
moe=$("$fi_bin" run -m "$model" --dry-run 2>&1 | grep -o 'expert cache' | head -1)
echo "outofcore: $model ($(du -h "$model" | cut -f1)), caps: $caps, cgroup v$v, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
for cap in $caps; do
	best_fi= best_ll=
	if [ -n "$moe" ]; then
		run "$cap" flowinfer "--prefetch-depth 0" "$fi_bin" run -m "$model" -p "$prompt" -n $ntok -t 2 -c 512 --temp 0 --no-display-prompt --prefetch-depth 0
	fi
	run "$cap" flowinfer "default" "$fi_bin" run -m "$model" -p "$prompt" -n $ntok -t 2 -c 512 --temp 0 --no-display-prompt
	run "$cap" llama.cpp "default (repack, mmap)" "$llama/llama-completion" -m "$model" -p "$prompt" -n $ntok -t 2 -c 512 --temp 0 -no-cnv
	run "$cap" llama.cpp "--no-repack (mmap)" "$llama/llama-completion" -m "$model" -p "$prompt" -n $ntok -t 2 -c 512 --temp 0 -no-cnv --no-repack
	if [ "$cap" = none ]; then
		run "$cap" llama.cpp "--no-mmap" "$llama/llama-completion" -m "$model" -p "$prompt" -n $ntok -t 2 -c 512 --temp 0 -no-cnv --no-mmap
	fi
	if [ -n "$best_fi" ] && [ -n "$best_ll" ]; then
		printf "cap %-5s best decode: flowinfer %.2f t/s, llama.cpp %.2f t/s: %.2fx\n" "$cap" "$best_fi" "$best_ll" "$(echo "$best_fi / $best_ll" | bc -l)"
	else
		echo "cap $cap best decode: flowinfer ${best_fi:-none}, llama.cpp ${best_ll:-none} (no ratio)"
	fi
done
sync; echo 3 > /proc/sys/vm/drop_caches
# diskbw is run from the repository (the script may be started elsewhere)
model_abs=$(readlink -f "$model")
(cd "$(dirname "$0")/.." && go run ./bench/diskbw -f "$model_abs" -size 1MiB -qd 8 -t 10s -engine pread,io_uring)
rmdir "$cg" 2>/dev/null || true
