#!/usr/bin/env bash
# bench/gpu.sh: flowinfer's Vulkan backend against llama.cpp's Vulkan
# backend on the same GPU, one table.
#
# It builds what it needs outside the repository (in $GPU_SH_WORK, default:
# a directory gpu-bench beside the checkout): flowinfer, and llama.cpp at
# the pinned commit with -DGGML_VULKAN=ON (llama-bench only); generates the
# random-weight GGUFs of the presets with `flowinfer gen`; then measures
# pp$GPU_SH_PP and tg$GPU_SH_TG of each with `flowinfer bench --backend
# vulkan` and `llama-bench -ngl 99`, on the same Vulkan device. The MoE
# preset (qwen3-30b-a3b) runs under a VRAM budget smaller than the model,
# the smallest --vram whose placement plan (flowinfer's --dry-run, which
# needs no device) holds GPU_SH_EXPERT_PCT percent of the routed experts in
# device slots beside everything else. llama.cpp gets the best of the
# settings users pick for a card of that size, each given the same weight
# bytes on the device as flowinfer's plan: -ngl 99 -ncmoe N (the expert
# weights of the fewest layers N kept in host memory so that the rest match
# flowinfer's expert slots), -ngl 99 -ncmoe LAYERS (all experts in host
# memory, as --cpu-moe) and -ngl K (the most whole layers that fit); the
# table names the setting that won each test. A row that an engine refuses
# or fails shows the reason instead of a figure.
#
# It refuses to run without a Vulkan GPU: vulkaninfo must list a discrete,
# integrated or virtual GPU. GPU_SH_ALLOW_CPU=1 accepts a CPU device such as
# lavapipe, for a dry run of the script itself (with tiny sizes).
#
# Settings (environment):
#   GPU_SH_WORK          work directory (outside the repo)     [../gpu-bench]
#   GPU_SH_PRESETS       presets to measure        [llama-1b llama-8b qwen3-30b-a3b]
#   GPU_SH_BUDGET_PRESETS  presets run under a VRAM budget     [qwen3-30b-a3b qwen3moe-small]
#   GPU_SH_EXPERT_PCT    percent of the routed experts the VRAM budget holds [33]
#   GPU_SH_TYPE          weight types of the generated models  [Q4_K_M]
#   GPU_SH_PP, GPU_SH_TG prompt and generated tokens           [512, 128]
#   GPU_SH_REPS          repetitions                           [3]
#   GPU_SH_JOBS          build jobs                            [nproc]
#   GPU_SH_LLAMA_COMMIT  llama.cpp commit   [d32676d77426540327835040d5d3279728f0b4c8]
#   GPU_SH_LLAMA_SRC     an existing llama.cpp source tree to build from (else a clone)
#   GPU_SH_LLAMA_BENCH   a llama-bench built with Vulkan to use instead of building one
#   GPU_SH_ALLOW_CPU     1: accept a CPU Vulkan device (dry run)  [0]
#   GPU_SH_OUT           the table's file                      [$GPU_SH_WORK/gpu-table.md]
set -euo pipefail

die() { echo "bench/gpu.sh: $*" >&2; exit 1; }

REPO=$(cd "$(dirname "$0")/.." && pwd)
WORK=${GPU_SH_WORK:-$(dirname "$REPO")/gpu-bench}
PRESETS=${GPU_SH_PRESETS:-llama-1b llama-8b qwen3-30b-a3b}
BUDGET_PRESETS=${GPU_SH_BUDGET_PRESETS:-qwen3-30b-a3b qwen3moe-small}
EXPERT_PCT=${GPU_SH_EXPERT_PCT:-33}
TYPE=${GPU_SH_TYPE:-Q4_K_M}
PP=${GPU_SH_PP:-512}
TG=${GPU_SH_TG:-128}
REPS=${GPU_SH_REPS:-3}
JOBS=${GPU_SH_JOBS:-$(nproc)}
LLAMA_COMMIT=${GPU_SH_LLAMA_COMMIT:-d32676d77426540327835040d5d3279728f0b4c8}
ALLOW_CPU=${GPU_SH_ALLOW_CPU:-0}
OUT=${GPU_SH_OUT:-$WORK/gpu-table.md}

case "$WORK/" in "$REPO"/*) die "GPU_SH_WORK ($WORK) is inside the repository; builds and models go outside it" ;; esac
for v in "$PP" "$TG" "$REPS" "$EXPERT_PCT" "$JOBS"; do
	[[ $v =~ ^[0-9]+$ ]] || die "not a whole number: $v (GPU_SH_PP, _TG, _REPS, _EXPERT_PCT, _JOBS)"
done
((EXPERT_PCT > 0 && EXPERT_PCT < 100)) || die "GPU_SH_EXPERT_PCT=$EXPERT_PCT: the budget must hold some but not all experts (1 to 99)"

# --- the device ----------------------------------------------------------
command -v vulkaninfo >/dev/null || die "no vulkaninfo (Debian/Ubuntu: apt install vulkan-tools): cannot look for a Vulkan device"
summary=$(vulkaninfo --summary 2>/dev/null) || die "vulkaninfo --summary failed: no Vulkan loader or driver"
# "GPU<i>:" blocks with deviceType and deviceName; the first GPU-type device
# is the one both engines use (flowinfer takes the first discrete or
# integrated GPU; llama.cpp is pointed at the same index)
read -r DEV DEVTYPE DEVNAME < <(awk '
	/^GPU[0-9]+:/ { i = substr($1, 4); sub(":", "", i) }
	/deviceType/ { t[i] = $3 }
	/deviceName/ { sub(/^[^=]*= /, ""); n[i] = $0 }
	END {
		for (j = 0; j in t; j++) if (t[j] ~ /DISCRETE_GPU|INTEGRATED_GPU/) { print j, t[j], n[j]; exit }
		for (j = 0; j in t; j++) if (t[j] ~ /VIRTUAL_GPU/) { print j, t[j], n[j]; exit }
		for (j = 0; j in t; j++) { print j, t[j], n[j]; exit }
		print "-", "-", "-"
	}' <<<"$summary")
[[ $DEV != - ]] || die "no Vulkan device (vulkaninfo lists none): nothing to measure"
if [[ ! $DEVTYPE =~ GPU ]]; then
	[[ $ALLOW_CPU == 1 ]] || die "no Vulkan GPU: the only device is $DEVNAME ($DEVTYPE); GPU_SH_ALLOW_CPU=1 runs on it anyway (a dry run of this script, not a GPU measurement)"
	echo "bench/gpu.sh: dry run on a CPU device: $DEVNAME" >&2
fi
export GGML_VK_VISIBLE_DEVICES=$DEV # llama.cpp: this device (it skips CPU devices otherwise)

mkdir -p "$WORK/models"

# --- flowinfer -------------------------------------------------------------
command -v go >/dev/null || die "no go toolchain"
echo "bench/gpu.sh: building flowinfer" >&2
(cd "$REPO" && go build -o "$WORK/flowinfer" ./cmd/flowinfer)
FI=$WORK/flowinfer
FI_COMMIT=$(git -C "$REPO" describe --always --dirty --abbrev=12 2>/dev/null || echo unknown)

# --- llama.cpp with Vulkan ---------------------------------------------------
LB=${GPU_SH_LLAMA_BENCH:-}
if [[ -z $LB ]]; then
	for t in cmake ninja glslc; do command -v $t >/dev/null || die "no $t: needed to build llama.cpp's Vulkan backend (apt install cmake ninja-build glslc libvulkan-dev spirv-headers)"; done
	src=${GPU_SH_LLAMA_SRC:-$WORK/llama.cpp}
	if [[ ! -d $src ]]; then
		command -v git >/dev/null || die "no git: cannot clone llama.cpp (or set GPU_SH_LLAMA_SRC)"
		git clone --quiet https://github.com/ggml-org/llama.cpp "$src"
	fi
	if [[ -d $src/.git ]]; then
		git -C "$src" -c advice.detachedHead=false checkout --quiet "$LLAMA_COMMIT" || die "llama.cpp: cannot check out $LLAMA_COMMIT in $src"
	fi
	bdir=$WORK/llama-vulkan-build
	echo "bench/gpu.sh: building llama.cpp (Vulkan) in $bdir" >&2
	cmake -S "$src" -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_VULKAN=ON -DGGML_NATIVE=ON -DLLAMA_CURL=OFF >"$WORK/llama-cmake.log" 2>&1 ||
		die "llama.cpp cmake failed (see $WORK/llama-cmake.log)"
	cmake --build "$bdir" --target llama-bench -j "$JOBS" >"$WORK/llama-build.log" 2>&1 ||
		die "llama.cpp build failed (see $WORK/llama-build.log)"
	LB=$bdir/bin/llama-bench
fi
[[ -x $LB ]] || die "no llama-bench at $LB"
LLAMA_DESC=$LLAMA_COMMIT
[[ -n ${GPU_SH_LLAMA_BENCH:-} ]] && LLAMA_DESC="$LB (given; built at $LLAMA_COMMIT is assumed)"

# --- measure -----------------------------------------------------------------
# rate FILE TEST: the "t/s" cell (mean ± sd) of TEST in llama-bench's markdown table
rate() { awk -F'|' -v t="$2" '{ gsub(/ /, "", $(NF-2)) } $(NF-2) == t { gsub(/^ +| +$/, "", $(NF-1)); print $(NF-1); exit }' "$1"; }
# why FILE STATUS: the last line of an engine's error output (or its exit
# status when it printed none), for the table
why() {
	local w
	w=$(tail -n 1 "$1" | tr '|' '/' | cut -c1-160)
	echo "${w:-exit status $2}"
}

# bytes SIZE: a size as flowinfer prints it (0, 576KiB, 33.19MiB, 1.5GiB) in bytes
bytes() {
	awk -v s="$1" 'BEGIN {
		m = 1
		if (s ~ /KiB$/) m = 1024; else if (s ~ /MiB$/) m = 1048576; else if (s ~ /GiB$/) m = 1073741824
		sub(/[KMG]iB$|B$/, "", s); printf "%.0f", s * m
	}'
}
# plan MODEL BUDGET: flowinfer's placement under --vram BUDGET (no device
# needed), as "W KV E SLOTS EXPERTS NGL": device weights, device KV and
# routed-expert slot bytes, slots of experts, and the plan's -ngl
plan() {
	local line
	line=$("$FI" run -m "$1" --backend vulkan --vram "$2" --dry-run 2>&1 | grep -m1 'vulkan: placement') || return 1
	local w kv e k n ngl
	w=$(sed -n 's/.*device memory: weights \([^,]*\),.*/\1/p' <<<"$line")
	kv=$(sed -n 's/.*device memory: weights [^,]*, KV \([^ ,]*\).*/\1/p' <<<"$line")
	e=$(sed -n 's/.*routed experts \([^ ]*\) (.*/\1/p' <<<"$line")
	k=$(sed -n 's/.*routed experts [^ ]* (\([0-9]*\) of [0-9]* in slots.*/\1/p' <<<"$line")
	n=$(sed -n 's/.*routed experts [^ ]* ([0-9]* of \([0-9]*\) in slots.*/\1/p' <<<"$line")
	ngl=$(sed -n 's/.*as -ngl \([0-9]*\).*/\1/p' <<<"$line")
	echo "$(bytes "${w:-0}") $(bytes "${kv:-0}") $(bytes "${e:-0}") ${k:-0} ${n:-0} ${ngl:-0}"
}

rows=()
for preset in $PRESETS; do
	model=$WORK/models/$preset-$TYPE.gguf
	if [[ ! -s $model ]]; then
		echo "bench/gpu.sh: generating $preset ($TYPE)" >&2
		"$FI" gen --preset "$preset" --type "$TYPE" -o "$model.tmp" >/dev/null && mv "$model.tmp" "$model"
	fi
	fi_args=(bench -m "$model" --backend vulkan -p "$PP" -n "$TG" -r "$REPS")
	lb_sets=("-ngl 99")
	note="all weights on the device"
	if [[ " $BUDGET_PRESETS " == *" $preset "* ]]; then
		size=$(stat -c %s "$model")
		# everything on the device: the byte counts the budget is fitted from
		read -r W KV E _ NEXP NGL < <(plan "$model" $((4 * size))) || die "$preset: flowinfer --dry-run gave no placement"
		((NEXP > 0 && E > 0)) || die "$preset: the plan shows no routed experts (not a MoE model?)"
		layers=$((NGL - 1)) # -ngl counts the output layer
		want=$(((NEXP * EXPERT_PCT + 99) / 100))
		# the smallest budget whose plan holds want slots (bisection on MiB)
		blo=$(((W + KV) >> 20)) bhi=$(((4 * size) >> 20))
		while ((bhi - blo > 1)); do
			mid=$(((blo + bhi) / 2))
			read -r _ _ _ K _ _ < <(plan "$model" "${mid}MiB") || K=0
			if ((K >= want)); then bhi=$mid; else blo=$mid; fi
		done
		read -r W KV ES K _ _ < <(plan "$model" "${bhi}MiB")
		fi_args+=(--vram "${bhi}MiB")
		# llama.cpp's settings given the same weight bytes on the device as
		# flowinfer's plan (its non-expert weights, KV and ES bytes of expert
		# slots; flowinfer's activation reserve is not counted for either):
		# the fewest layers whose experts stay in host memory so that at most
		# ES bytes of experts are on the device, or the most whole layers
		ncmoe=$(awk -v l="$layers" -v s="$ES" -v e="$E" 'BEGIN { n = l * (1 - s / e); n = (n == int(n)) ? n : int(n) + 1; print (n < 0) ? 0 : (n > l ? l : n) }')
		ngl=$(awk -v l="$layers" -v b="$((W + KV + ES))" -v t="$((W + KV + E))" 'BEGIN { k = int(l * b / t); print (k > l) ? l : k }')
		lb_sets=("-ngl 99 -ncmoe $ncmoe" "-ngl 99 -ncmoe $layers" "-ngl $ngl")
		note="VRAM budget ${bhi} MiB = $K of $NEXP experts in slots beside $(((W + KV) >> 20)) MiB of weights and KV (model $((size >> 20)) MiB): flowinfer --vram; llama.cpp's best of"
		note+=" $(printf '[%s] ' "${lb_sets[@]}")"
	fi
	echo "bench/gpu.sh: $preset: flowinfer ${fi_args[*]}" >&2
	fo=$WORK/fi-$preset.md
	fe=$WORK/fi-$preset.err
	fst=0
	"$FI" "${fi_args[@]}" >"$fo" 2>"$fe" || fst=$?
	# each llama.cpp setting; per test the best rate and its setting
	declare -A best=() bestset=() lfail=()
	for i in "${!lb_sets[@]}"; do
		# shellcheck disable=SC2206 # a setting is a list of flags
		set_args=(${lb_sets[$i]})
		echo "bench/gpu.sh: $preset: llama-bench -m $model ${set_args[*]} -p $PP -n $TG -r $REPS" >&2
		lo=$WORK/lb-$preset-$i.md
		le=$WORK/lb-$preset-$i.err
		lst=0
		"$LB" -m "$model" "${set_args[@]}" -p "$PP" -n "$TG" -r "$REPS" -o md >"$lo" 2>"$le" || lst=$?
		for test in "pp$PP" "tg$TG"; do
			if ((lst != 0)); then
				lfail[$test]="failed: $(why "$le" $lst)"
				continue
			fi
			r=$(rate "$lo" "$test")
			v=${r%% *}
			[[ $v =~ ^[0-9.]+$ ]] || continue
			if [[ -z ${best[$test]:-} ]] || awk -v a="$v" -v b="${best[$test]%% *}" 'BEGIN { exit !(a > b) }'; then
				best[$test]=$r
				bestset[$test]=${lb_sets[$i]}
			fi
		done
	done
	for test in "pp$PP" "tg$TG"; do
		[[ $test == pp0 || $test == tg0 ]] && continue
		f="failed: $(why "$fe" $fst)"
		((fst == 0)) && f=$(rate "$fo" "$test")
		l=${best[$test]:-${lfail[$test]:--}}
		ratio=-
		fv=${f%% *}
		lv=${l%% *}
		if [[ $fv =~ ^[0-9.]+$ && $lv =~ ^[0-9.]+$ ]]; then
			ratio=$(awk -v a="$fv" -v b="$lv" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }')
		fi
		won=""
		[[ -n ${bestset[$test]:-} && ${#lb_sets[@]} -gt 1 ]] && won="; llama.cpp's best: ${bestset[$test]}"
		rows+=("| $preset $TYPE | $test | ${f:--} | ${l:--} | $ratio | $note$won |")
	done
	unset best bestset lfail
done

{
	echo "Vulkan device $DEV: $DEVNAME ($DEVTYPE); $(date -u '+%Y-%m-%d %H:%M UTC'); load: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)"
	echo "flowinfer $FI_COMMIT (bench --backend vulkan); llama.cpp $LLAMA_DESC (llama-bench, GGML_VK_VISIBLE_DEVICES=$DEV); $REPS repetitions"
	echo
	echo "| model | test | flowinfer t/s | llama.cpp t/s | ratio | placement |"
	echo "|---|---|---:|---:|---:|---|"
	printf '%s\n' "${rows[@]}"
} | tee "$OUT"
echo "bench/gpu.sh: table written to $OUT" >&2
