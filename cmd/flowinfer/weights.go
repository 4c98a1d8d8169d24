package main

// weights.go: the weight path's flags and setup shared by the commands that
// run a model: the RAM budget (derived by stages.WeightBudget when
// --ram-budget is 0), the I/O engine, the placement plan printed at load,
// the packed copies of the resident weights.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/flowinfer/flowinfer/configs"
	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/io/nvme"
	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/stages"
)

// WeightFlags choose where weights live: the RAM budget and how the rest is
// read from disk.
type WeightFlags struct {
	ComputeFlags
	RAMBudget     configs.ByteSize    `name:"ram-budget" default:"0" env:"FLOWINFER_RAM_BUDGET" help:"Bytes of weights held in RAM (e.g. 4GiB, 512MiB): resident weights, the expert cache, layer slots and the read slabs; routed experts beyond it are read from disk as the router picks them, and layers beyond it are read ahead of compute every step. 0 = what the machine has available (MemAvailable at start) or its cgroup allows, whichever is less, after the KV cache, activations and 256 MiB of headroom."`
	IOEngine      configs.IOEngine    `name:"io-engine" default:"pread" env:"FLOWINFER_IO_ENGINE" help:"How weights beyond the budget are read: pread (O_DIRECT where the filesystem allows, into the expert cache and layer slots within --ram-budget), io_uring (Linux: the same reads through an io_uring, an expert's ranges in one submission; an error if the kernel refuses io_uring), or mmap (the whole file mapped, paged by the kernel, no budget)."`
	Slabs         int                 `name:"slabs" default:"8" env:"FLOWINFER_SLABS" help:"Expert reads in flight (staging slabs)."`
	PrefetchDepth int                 `name:"prefetch-depth" default:"1" env:"FLOWINFER_PREFETCH_DEPTH" help:"Layers of experts read ahead speculatively: 0 reads the experts the router picked (the moment it picks them); 1 also guesses the next layer's experts from the current residual stream and reads them ahead."`
	Mlock         bool                `name:"mlock" help:"Lock the expert cache and read slabs in RAM."`
	CachePolicy   configs.CachePolicy `name:"expert-cache-policy" default:"slru" enum:"${cache_policies}" help:"Expert cache eviction: slru (segmented LRU: experts used again are protected) or lru."`
	DryRun        bool                `name:"dry-run" help:"Print the placement plan and exit."`
}

// ComputeFlags choose the compute backend and the KV cache's element
// types. This build computes on the CPU: any other backend is refused by
// name (configs.ValidateRun, before anything loads), never ignored.
type ComputeFlags struct {
	Backend string           `name:"backend" default:"auto" env:"FLOWINFER_BACKEND" help:"Compute backend: cpu; vulkan (run, chat, trace, bench, serve and batch: the first discrete or integrated Vulkan GPU, else the first device, such as lavapipe; dense models and qwen3moe, f32/f16 KV cache); auto (vulkan on a discrete or integrated GPU that runs the model, else the CPU)."`
	VRAM    configs.ByteSize `name:"vram" default:"0" env:"FLOWINFER_VRAM" help:"Device-memory budget of the vulkan backend (0 = its device-local heaps). Without --n-gpu-layers, the output layer and as many of the last layers as fit (weights and KV cache, beside activations and staging) go to the device and the rest computes on the CPU; with it, a weight beyond the budget is an error naming it. A MoE model (qwen3moe) is not split: everything but its routed experts goes to the device and the budget left holds expert slots, a cache of the experts the router picks (--expert-cache-policy). Unused (with a warning) when auto computes on the CPU."`
	Device  string           `name:"device" env:"FLOWINFER_DEVICE" help:"Vulkan device of the vulkan and auto backends: its index (GPU0 is 0, as config detect lists them) or a part of its name matching one device (case-insensitive); one not found is an error naming it. Default: vulkan takes the first discrete or integrated GPU, else the first device; auto a discrete or integrated GPU."`
	// -ngl (llama.cpp's spelling) is rewritten to this by main.
	NGL int `name:"n-gpu-layers" default:"-1" env:"FLOWINFER_N_GPU_LAYERS" help:"Layers on the vulkan device (-ngl), as llama.cpp counts them: the output layer is one, so N puts the output and the last N-1 repeating layers there and the first layers compute on the CPU; N > the layer count puts everything there; 0 computes on the CPU alone; -1 (default): everything, or what fits --vram."`
	// -ctk and -ctv (llama.cpp's spelling) are rewritten to these by
	// main (kong's short flags are one letter).
	CacheTypeK string `name:"cache-type-k" default:"f16" env:"FLOWINFER_CACHE_TYPE_K" help:"KV cache type for K (-ctk): f32, f16, bf16, q8_0, q4_0 (block types need heads of a multiple of 32), or the TurboQuant types tq4 and tq3 (a seeded rotation per layer and head, then 4 or 3 bits per coordinate)."`
	CacheTypeV string `name:"cache-type-v" default:"f16" env:"FLOWINFER_CACHE_TYPE_V" help:"KV cache type for V (-ctv): as --cache-type-k."`
	KVProtect  int    `name:"kv-protect" default:"0" env:"FLOWINFER_KV_PROTECT" help:"Keep the first and the last N layers' K and V in f16 when -ctk or -ctv is a quantized type (q8_0, q4_0, tq4, tq3)."`
	KVRecent   int    `name:"kv-recent" default:"-1" env:"FLOWINFER_KV_RECENT" help:"Also keep the K and V rows of each query's N most recent positions (up to N+63) in f16 when -ctk or -ctv is a quantized type (q8_0, q4_0, tq4, tq3), and attend to those copies: a fixed cost of about (N+64)×2 rows of f16 per sequence, whatever the context. A reused prompt prefix stops where the f16 rows its next queries read are no longer kept. 0: none; -1 (default): 192 when -ctk or -ctv is tq4 or tq3, else 0 (llama.cpp's types keep llama.cpp's meaning)."`
	SWAFull    bool   `name:"swa-full" env:"FLOWINFER_SWA_FULL" help:"Sliding-window layers (Gemma 3/4, GPT-OSS) keep a full-size cache, a row per position, instead of a ring of their window: a cached prompt prefix is reused from its blocks alone, without window checkpoints, at the memory of full attention in those layers (as llama-server's --swa-full)."`
}

// setPipeline copies the compute flags onto p.
func (f *ComputeFlags) setPipeline(p *configs.Pipeline) {
	p.Backend, p.VRAM, p.Device = f.Backend, f.VRAM, f.Device
	kv := &p.KVCache
	kv.TypeK, kv.TypeV, kv.Protect, kv.Recent, kv.SWAFull = f.CacheTypeK, f.CacheTypeV, f.KVProtect, f.KVRecent, f.SWAFull
}

// setPipeline copies the weight and compute flags onto p.
func (f *WeightFlags) setPipeline(p *configs.Pipeline) {
	f.ComputeFlags.setPipeline(p)
	p.RAMPool, p.IOEngine, p.Edges.Slabs, p.PrefetchDepth = f.RAMBudget, f.IOEngine, f.Slabs, f.PrefetchDepth
}

// openWeights plans the model's weights for the budget, packs the resident
// ones (dropping their mapped pages, so they cost their size once) and
// returns the weight path; with DryRun it prints the plan and returns
// errDryRun. The keyed settings come from p; f gives the flags no key
// covers (mlock, the cache policy, dry run).
func openWeights(l *loaded, be *cpu.Backend, p *configs.Pipeline, f *WeightFlags, fp stages.Footprint, log *zap.Logger) (*stages.WeightPath, error) {
	budget, derived, err := ramBudget(l.Model, p, fp, log)
	if err != nil {
		return nil, err
	}
	wp, err := stages.NewWeightPath(l.Model, l.path, be, stages.WeightConfig{
		Engine: p.IOEngine, Budget: budget, QueueDepth: p.Edges.Slabs, Lock: f.Mlock, Policy: f.CachePolicy,
		PrefetchDepth: p.PrefetchDepth, PlanOnly: f.DryRun,
	})
	if err != nil && derived {
		err = fmt.Errorf("%w (the budget was derived from the machine's memory; set --ram-budget to choose it)", err)
	}
	if err != nil {
		return nil, err
	}
	plan := wp.Plan()
	fmt.Fprintf(os.Stderr, "flowinfer: %s\n", plan)
	if f.DryRun {
		wp.Close()
		return nil, errDryRun
	}
	if err := packResident(be, l.Model, plan.Experts > 0 && !plan.Streaming(), wp.StreamsLayer, log); err != nil {
		wp.Close()
		return nil, err
	}
	if err := ownResident(be, wp, log); err != nil {
		wp.Close()
		return nil, err
	}
	if plan.Streaming() && plan.Experts > 0 && plan.Slots == plan.Experts {
		if err := preload(wp); err != nil {
			wp.Close()
			return nil, err
		}
	}
	return wp, nil
}

// ramBudget returns the weights' RAM budget: pipeline.ram_pool, or when it
// is 0 what the machine's or cgroup's memory leaves beside a run of
// footprint fp (stages.WeightBudget), and whether it was derived so; 0
// when the memory is unknown too.
func ramBudget(m *model.Model, p *configs.Pipeline, fp stages.Footprint, log *zap.Logger) (int64, bool, error) {
	if p.RAMPool != 0 {
		return int64(p.RAMPool), false, nil
	}
	limit, src := configs.MemoryLimit()
	if limit <= 0 {
		return 0, false, nil
	}
	budget := stages.WeightBudget(int64(limit), &m.Hyper, kvTypes(p), fp)
	if budget <= 0 {
		return 0, false, fmt.Errorf("the %s limit of %v leaves no RAM for weights after the KV cache and activations: lower -c or -b, or set --ram-budget", src, limit)
	}
	log.Debug("RAM budget from the memory limit", zap.String("source", src), zap.Int64("limit", int64(limit)), zap.Int64("budget", budget))
	return budget, true, nil
}

// preload reads every expert now, at disk speed, rather than one miss at a
// time in the first tokens (when they all fit), and says how fast.
func preload(wp *stages.WeightPath) error {
	t0 := time.Now()
	if err := wp.Preload(context.Background()); err != nil {
		return err
	}
	st := wp.Stats()
	d := time.Since(t0)
	fmt.Fprintf(os.Stderr, "flowinfer: preloaded %d experts (%v) in %.1f s (%.2f GB/s)\n", wp.Plan().Experts,
		configs.ByteSize(st.BytesRead), d.Seconds(), float64(st.BytesRead)/d.Seconds()/1e9)
	wp.ResetStats()
	return nil
}

// errDryRun ends a command after --dry-run printed the plan (main exits 0).
var errDryRun = errors.New("dry run")

// packResident makes the backend's packed copies of the resident weights
// (all of them, experts too when experts is true) at load time, as
// llama.cpp repacks at load, and drops the mapped pages the copies replace.
func packResident(be *cpu.Backend, m *model.Model, experts bool, streamed func(il int) bool, log *zap.Logger) error {
	t0 := time.Now()
	be.DropPacked = true
	n, err := be.PackModel(m, experts, streamed)
	if err != nil {
		return err
	}
	if n > 0 {
		log.Info("packed weights", zap.Int64("bytes", n), zap.Duration("took", time.Since(t0)))
	}
	return nil
}

// ownResident copies what compute reads of the file's mapping after load
// (the weights it reads unpacked, the token embeddings) into memory the
// process owns (stages.WeightPath.OwnResident): a model file truncated or
// rewritten while the model runs can then fail reads, never fault the
// process through a resident weight.
func ownResident(be *cpu.Backend, wp *stages.WeightPath, log *zap.Logger) error {
	t0 := time.Now()
	n, err := wp.OwnResident(func(w *model.Weight) bool {
		d := be.MatMulBytes(w)
		return len(d) > 0 && len(w.Data) > 0 && &d[0] != &w.Data[0]
	})
	if err != nil {
		return err
	}
	log.Info("resident weights read into owned memory", zap.Int64("bytes", n), zap.Duration("took", time.Since(t0)))
	return nil
}

// printWeightStats prints the weight path's counters on stderr
// (formatWeightStats), without a per-token figure.
func printWeightStats(wp *stages.WeightPath) {
	formatWeightStats(os.Stderr, wp.Stats(), wp.Plan().Experts > 0, 0)
}

// formatWeightStats writes the weight path's counters, each line saying
// what it counts: the layer stream's layers; the expert cache's hits and
// misses (and the misses that waited for a prefetch already in flight);
// the prefetches issued, used and wasted; and what was read from disk:
// bytes, reads issued, experts and layer matrices read whole, the disk's
// busy time (at least one read in flight) beside the reads' summed
// durations, and with tokens > 0 the bytes per generated token.
func formatWeightStats(w io.Writer, st stages.WeightStats, experts bool, tokens int) {
	if n := st.LayersReady + st.LayersWaited; n > 0 {
		fmt.Fprintf(w, "flowinfer: layer stream: %d layers run, %d already read, %d waited for (%.2f s in all)\n",
			n, st.LayersReady, st.LayersWaited, float64(st.LayerWaitNanos)/1e9)
	}
	if experts {
		var hits, misses int64
		lo, hi := 1.0, 0.0
		for i := range st.Hits {
			hits += st.Hits[i]
			misses += st.Misses[i]
			if n := st.Hits[i] + st.Misses[i]; n > 0 {
				r := float64(st.Hits[i]) / float64(n)
				lo, hi = min(lo, r), max(hi, r)
			}
		}
		rate := 0.0
		if hits+misses > 0 {
			rate = float64(hits) / float64(hits+misses)
		}
		fmt.Fprintf(w, "flowinfer: expert cache: %d hits, %d misses (%d of them already being prefetched), hit rate %.1f%% (per layer %.1f%%-%.1f%%), %d evictions, %d experts cached\n",
			hits, misses, st.PrefetchLate, 100*rate, 100*lo, 100*hi, st.Evictions, st.CachedExperts)
		if st.PrefetchIssued > 0 {
			fmt.Fprintf(w, "flowinfer: prefetch: %d expert reads issued ahead, %d used by the next layer (%.1f%%), %d evicted unused\n",
				st.PrefetchIssued, st.PrefetchUsed, 100*float64(st.PrefetchUsed)/float64(st.PrefetchIssued), st.PrefetchWasted)
		}
	}
	if st.Reads == 0 {
		return
	}
	var whole []string
	if experts {
		whole = append(whole, fmt.Sprintf("%d experts (misses and prefetches)", st.ExpertsRead))
	}
	if st.MatricesRead > 0 || !experts {
		whole = append(whole, fmt.Sprintf("%d layer matrices", st.MatricesRead))
	}
	fmt.Fprintf(w, "flowinfer: disk reads: %d reads issued; read whole: %s; %s read", st.Reads, strings.Join(whole, ", "), byteCount(st.BytesRead))
	if tokens > 0 {
		fmt.Fprintf(w, ", %s per generated token", byteCount(st.BytesRead/int64(tokens)))
	}
	fmt.Fprintf(w, "; disk busy %.2f s (at least one read in flight; the reads' durations sum to %.2f s)\n",
		float64(st.DiskBusyNanos)/1e9, float64(st.ReadNanos)/1e9)
}

// byteCount formats n bytes with a binary unit ("1.50MiB", "512 B").
func byteCount(n int64) string {
	if n < 1<<10 {
		return strconv.FormatInt(n, 10) + " B"
	}
	return configs.ByteSize(n).String()
}

// diskBandwidth measures the O_DIRECT read bandwidth of the file at path
// (1 MiB reads at random aligned offsets, qd in flight, for d), in GB/s:
// what the reader's bytes are compared with (bench/diskbw is the same
// measurement as a tool).
func diskBandwidth(ctx context.Context, path string, qd int, d time.Duration) (float64, error) {
	r, err := nvme.Open(path, nvme.Options{Engine: configs.EnginePread, Direct: true})
	if err != nil {
		return 0, err
	}
	defer r.Close()
	const n = 1 << 20
	if r.Size() < 2*n {
		return 0, fmt.Errorf("file too small")
	}
	var total atomic.Int64
	deadline := time.Now().Add(d)
	start := time.Now()
	var wg sync.WaitGroup
	for g := range max(qd, 1) {
		wg.Go(func() {
			buf, err := nvme.AlignedAlloc(nvme.BufferSize(n), false)
			if err != nil {
				return
			}
			defer nvme.AlignedFree(buf)
			x := uint64(g)*0x9E3779B97F4A7C15 + 1
			for time.Now().Before(deadline) && ctx.Err() == nil {
				x ^= x << 13
				x ^= x >> 7
				x ^= x << 17
				off := int64(x%uint64((r.Size()-n)/nvme.Align)) * nvme.Align
				if _, err := r.ReadAt(buf, off, n); err != nil {
					return
				}
				total.Add(n)
			}
		})
	}
	wg.Wait()
	return float64(total.Load()) / time.Since(start).Seconds() / 1e9, nil
}
