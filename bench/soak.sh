#!/usr/bin/env bash
# Soak test: serve a model, send requests from CONC clients for DURATION
# seconds, and print the server's RSS, goroutines and requests done every
# INTERVAL seconds, so a leak shows as a line that keeps rising.
#
#   bench/soak.sh MODEL.gguf [DURATION=180] [CONC=16] [INTERVAL=15]
#
# FLOWINFER names the binary (default: go build into a temporary dir).
set -u
model=${1:?usage: bench/soak.sh MODEL.gguf [DURATION] [CONC] [INTERVAL]}
dur=${2:-180}; conc=${3:-16}; every=${4:-15}
cd "$(dirname "$0")/.."
bin=${FLOWINFER:-}
tmp=$(mktemp -d); trap 'kill $pid 2>/dev/null; rm -rf "$tmp"' EXIT
if [ -z "$bin" ]; then bin=$tmp/flowinfer; go build -o "$bin" ./cmd/flowinfer || exit 2; fi
port=$((20000 + RANDOM % 20000))
"$bin" serve -m "$model" --port $port --parallel 4 -c 256 --queue 1024 --log-level error 2>"$tmp/serve.log" &
pid=$!
for _ in $(seq 100); do curl -sf "localhost:$port/health" >/dev/null && break; sleep 0.2; done
client() { # loop until the deadline: a short chat request, some streamed
	local end=$1 i=0
	while [ "$(date +%s)" -lt "$end" ]; do
		i=$((i + 1))
		stream=false; [ $((i % 3)) = 0 ] && stream=true
		curl -s -o /dev/null "localhost:$port/v1/chat/completions" \
			-d "{\"messages\":[{\"role\":\"user\",\"content\":\"Once upon a time $i\"}],\"max_tokens\":8,\"stream\":$stream}"
	done
}
end=$(( $(date +%s) + dur ))
clients=()
for _ in $(seq "$conc"); do client "$end" & clients+=($!); done
metric() { curl -s "localhost:$port/metrics" | awk -v k="$1" '$1 == k {print $2}'; }
reqs() { curl -s "localhost:$port/metrics" | awk '/^flowinfer_requests_total\{endpoint="\/v1\/chat\/completions",status="200"\}/ {print $2}'; }
echo "soak: $model, $dur s, $conc clients, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
printf "%6s %10s %10s %11s\n" "t (s)" "RSS MiB" "goroutines" "requests"
t0=$(date +%s)
while [ "$(date +%s)" -lt "$end" ]; do
	rss=$(awk '/^VmRSS/ {print $2}' /proc/$pid/status)
	printf "%6d %10.1f %10s %11s\n" $(( $(date +%s) - t0 )) "$(echo "$rss / 1024" | bc -l)" "$(metric go_goroutines)" "$(reqs)"
	sleep "$every"
done
wait "${clients[@]}" # not the server
rss=$(awk '/^VmRSS/ {print $2}' /proc/$pid/status)
printf "%6d %10.1f %10s %11s\n" $(( $(date +%s) - t0 )) "$(echo "$rss / 1024" | bc -l)" "$(metric go_goroutines)" "$(reqs)"
