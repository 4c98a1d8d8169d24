package main

// weights.go: the weight path's flags and setup shared by the commands that
// run a model: the RAM budget, the I/O engine, the placement plan printed at
// load, the packed copies of the resident weights.

import (
	"context"
	"errors"
	"fmt"
	"os"
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
	RAMBudget     configs.ByteSize `name:"ram-budget" default:"0" env:"FLOWINFER_RAM_BUDGET" help:"Bytes of weights held in RAM (e.g. 4GiB, 512MiB): resident weights, the expert cache, layer slots and the read slabs; routed experts beyond it are read from disk as the router picks them, and layers beyond it are read ahead of compute every step. 0 = what the machine or its cgroup allows after the KV cache, activations and 256 MiB of headroom."`
	IOEngine      string           `name:"io-engine" default:"pread" env:"FLOWINFER_IO_ENGINE" help:"How weights beyond the budget are read: pread (O_DIRECT where the filesystem allows, into the expert cache and layer slots within --ram-budget), io_uring (Linux: the same reads through an io_uring, an expert's ranges in one submission; an error if the kernel refuses io_uring), or mmap (the whole file mapped, paged by the kernel, no budget)."`
	Slabs         int              `name:"slabs" default:"8" env:"FLOWINFER_SLABS" help:"Expert reads in flight (staging slabs)."`
	PrefetchDepth int              `name:"prefetch-depth" default:"1" env:"FLOWINFER_PREFETCH_DEPTH" help:"Layers of experts read ahead speculatively: 0 reads the experts the router picked (the moment it picks them); 1 also guesses the next layer's experts from the current residual stream and reads them ahead."`
	Mlock         bool             `name:"mlock" help:"Lock the expert cache and read slabs in RAM."`
	CachePolicy   string           `name:"expert-cache-policy" default:"slru" enum:"slru,lru" help:"Expert cache eviction: slru (segmented LRU: experts used again are protected) or lru."`
	DryRun        bool             `name:"dry-run" help:"Print the placement plan and exit."`
}

// ComputeFlags choose the compute backend and the KV cache's element
// types. This build computes on the CPU: any other backend is refused by
// name (checkCompute, before anything loads), never ignored.
type ComputeFlags struct {
	Backend string           `name:"backend" default:"auto" env:"FLOWINFER_BACKEND" help:"Compute backend: cpu, or auto (a GPU backend when there is one, else the CPU; this build has only the CPU). vulkan is refused: the Vulkan backend is not implemented yet."`
	VRAM    configs.ByteSize `name:"vram" default:"0" env:"FLOWINFER_VRAM" help:"VRAM budget for a GPU backend. This build has none: 0, or unused (with a warning) under --backend auto."`
	// -ctk and -ctv (llama.cpp's spelling) are rewritten to these by
	// main (kong's short flags are one letter).
	CacheTypeK string `name:"cache-type-k" default:"f16" env:"FLOWINFER_CACHE_TYPE_K" help:"KV cache type for K (-ctk): f32, f16, bf16, q8_0, q4_0 (block types need heads of a multiple of 32), or the TurboQuant types tq4 and tq3 (a seeded rotation per layer and head, then 4 or 3 bits per coordinate)."`
	CacheTypeV string `name:"cache-type-v" default:"f16" env:"FLOWINFER_CACHE_TYPE_V" help:"KV cache type for V (-ctv): as --cache-type-k."`
	KVProtect  int    `name:"kv-protect" default:"0" env:"FLOWINFER_KV_PROTECT" help:"Keep the first and the last N layers' K and V in f16 when -ctk or -ctv is a quantized type (q8_0, q4_0, tq4, tq3)."`
	KVRecent   int    `name:"kv-recent" default:"-1" env:"FLOWINFER_KV_RECENT" help:"Also keep the K and V rows of each query's N most recent positions (up to N+63) in f16 when -ctk or -ctv is a quantized type (q8_0, q4_0, tq4, tq3), and attend to them exactly: a fixed cost of about (N+64)×2 rows of f16 per sequence, whatever the context. A reused prompt prefix stops where the f16 rows its next queries read are no longer kept. 0: none; -1 (default): 192 when -ctk or -ctv is tq4 or tq3, else 0 (llama.cpp's types keep llama.cpp's meaning)."`
}

// kvTypes returns the parsed KV cache types (checkCompute has vetted them).
func (f *ComputeFlags) kvTypes() model.KVTypes {
	k, _ := model.ParseKVType(f.CacheTypeK)
	v, _ := model.ParseKVType(f.CacheTypeV)
	return model.KVTypes{K: k, V: v, Protect: f.KVProtect, Recent: model.KVRecentFor(k, v, f.KVRecent)}
}

// checkCompute refuses the backend, VRAM and KV settings this build cannot
// honour, naming the key, the value and what is supported. main calls it
// for every command that embeds ComputeFlags.
func (f *ComputeFlags) checkCompute(log *zap.Logger) error {
	var errs []string
	switch f.Backend {
	case "cpu":
	case "auto":
		if f.VRAM > 0 {
			log.Warn("backend auto: this build has no GPU backend, computing on the CPU; the VRAM budget is unused", zap.String("vram", f.VRAM.String()))
		} else {
			log.Debug("backend auto: computing on the CPU (this build has no GPU backend)")
		}
	case "vulkan":
		errs = append(errs, "pipeline.backend / --backend vulkan: this build has no Vulkan backend yet (supported: cpu; auto computes on the CPU)")
	default:
		errs = append(errs, fmt.Sprintf("pipeline.backend / --backend %q: unknown (supported: auto, cpu)", f.Backend))
	}
	if f.VRAM < 0 || (f.VRAM > 0 && f.Backend != "auto") {
		errs = append(errs, fmt.Sprintf("pipeline.vram / --vram %v: only a GPU backend uses VRAM and this build has none (supported: 0)", f.VRAM))
	}
	if _, err := model.ParseKVType(f.CacheTypeK); err != nil {
		errs = append(errs, fmt.Sprintf("pipeline.kv_cache.type_k / --cache-type-k (-ctk) %q: not supported (supported: %s)", f.CacheTypeK, model.KVTypeNames()))
	}
	if f.KVProtect < 0 {
		errs = append(errs, fmt.Sprintf("pipeline.kv_cache.protect / --kv-protect %d: must not be negative", f.KVProtect))
	}
	if f.KVRecent < -1 {
		errs = append(errs, fmt.Sprintf("pipeline.kv_cache.recent / --kv-recent %d: must not be negative (-1: the default)", f.KVRecent))
	}
	if _, err := model.ParseKVType(f.CacheTypeV); err != nil {
		errs = append(errs, fmt.Sprintf("pipeline.kv_cache.type_v / --cache-type-v (-ctv) %q: not supported (supported: %s)", f.CacheTypeV, model.KVTypeNames()))
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

// weightSetup is what openWeights needs beyond the flags.
type weightSetup struct {
	nCtx, nSeq, maxBatch int
	// running is the sequences running at once (0: nSeq), whose
	// --kv-recent windows the cache keeps beside the nCtx·nSeq cells, in
	// blocks of blockSize (0: the engine's 16; -1: a contiguous cache)
	running, blockSize int
}

// kvBlock is the block size of the cache the setup is for (0: contiguous).
func (s weightSetup) kvBlock() int {
	switch {
	case s.blockSize < 0:
		return 0
	case s.blockSize == 0:
		return 16 // stages.Config's default
	}
	return s.blockSize
}

// openWeights plans the model's weights for the budget, packs the resident
// ones (dropping their mapped pages, so they cost their size once) and
// returns the weight path; with DryRun it prints the plan and returns
// errDryRun.
func openWeights(f *WeightFlags, l *loaded, be *cpu.Backend, s weightSetup, log *zap.Logger) (*stages.WeightPath, error) {
	if f.PrefetchDepth != 0 && f.PrefetchDepth != 1 {
		return nil, fmt.Errorf("--prefetch-depth / pipeline.prefetch_depth %d: not implemented (supported: 0, the experts the router picked; 1, also the next layer's guessed experts)", f.PrefetchDepth)
	}
	if f.Slabs < 1 || f.Slabs > 1024 {
		return nil, fmt.Errorf("--slabs / pipeline.edges.slabs %d: must be between 1 and 1024", f.Slabs)
	}
	m := l.Model
	budget := int64(f.RAMBudget)
	auto := budget == 0
	if auto {
		limit, src := configs.MemoryLimit()
		if limit > 0 {
			budget = int64(limit) - kvBytes(m, f.kvTypes(), s.nCtx, s.nSeq) - model.KVRecentReserve(&m.Hyper, f.kvTypes(), max(s.nSeq, s.running), s.maxBatch, s.kvBlock(), s.nCtx*s.nSeq) - actBytes(m, s.maxBatch) - headroom
			if budget <= 0 {
				return nil, fmt.Errorf("the %s limit of %v leaves no RAM for weights after the KV cache and activations: lower -c or -b, or set --ram-budget", src, limit)
			}
			log.Debug("RAM budget from the memory limit", zap.String("source", src), zap.Int64("limit", int64(limit)), zap.Int64("budget", budget))
		}
	}
	wp, err := stages.NewWeightPath(m, l.path, be, stages.WeightConfig{
		Engine: configs.IOEngine(f.IOEngine), Budget: budget, QueueDepth: f.Slabs, Lock: f.Mlock, Policy: configs.CachePolicy(f.CachePolicy), PrefetchDepth: f.PrefetchDepth,
		PlanOnly: f.DryRun,
	})
	if err != nil && auto && budget > 0 {
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
	if err := packResident(be, m, plan.Experts > 0 && !plan.Streaming(), wp.StreamsLayer, log); err != nil {
		wp.Close()
		return nil, err
	}
	if plan.Streaming() && plan.Experts > 0 && plan.Slots == plan.Experts {
		// everything fits: read every expert now, at disk speed, rather
		// than one miss at a time in the first tokens
		t0 := time.Now()
		if err := wp.Preload(context.Background()); err != nil {
			wp.Close()
			return nil, err
		}
		st := wp.Stats()
		d := time.Since(t0)
		fmt.Fprintf(os.Stderr, "flowinfer: preloaded %d experts (%v) in %.1f s (%.2f GB/s)\n", plan.Experts,
			configs.ByteSize(st.BytesRead), d.Seconds(), float64(st.BytesRead)/d.Seconds()/1e9)
		wp.ResetStats()
	}
	return wp, nil
}

// errDryRun ends a command after --dry-run printed the plan.
var errDryRun = fmt.Errorf("dry run")

// headroom is RAM kept outside the weight budget for the Go runtime, the
// tokenizer, buffers of the server and the page cache of the mapping's few
// pages still used (embedding rows). Measured: llama-8b preset under a
// 3.22 GiB budget peaked at 3.27 GiB RSS (KV cache included), so 512 MiB
// left a fifth of a 2 GiB cap unused.
const headroom = 256 << 20

// kvBytes is the size of a KV cache of types t (f32's if the model's heads
// do not fit t: the cache itself then refuses to be made, naming why).
func kvBytes(m *model.Model, t model.KVTypes, nCtx, nSeq int) int64 {
	per, err := model.KVBytesPerToken(&m.Hyper, t)
	if err != nil {
		per = m.NLayer * (m.KDim() + m.VDim()) * 4
	}
	return int64(nCtx) * int64(nSeq) * int64(per)
}

// actBytes estimates a context's scratch for batches of maxBatch tokens:
// the logits and the per-layer activations.
func actBytes(m *model.Model, maxBatch int) int64 {
	w := int64(m.NVocab) + 12*int64(m.NEmbd) + 2*int64(max(m.NFF, m.NFFExp)) + int64(m.NExpertUsed)*int64(m.NEmbd)
	return int64(maxBatch) * w * 4
}

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

// forEachMatrix calls fn for each weight matrix of m (the routed experts
// only if experts).
func forEachMatrix(m *model.Model, experts bool, fn func(*model.Weight)) {
	if m.Output != nil {
		fn(m.Output)
	}
	for i := range m.Layers {
		L := &m.Layers[i]
		for _, w := range L.Matrices() {
			if *w != nil {
				fn(*w)
			}
		}
		if !experts {
			continue
		}
		for _, e := range L.Experts() {
			for j := range e {
				fn(&e[j])
			}
		}
	}
}

// printWeightStats prints the expert cache's counters on stderr: hits and
// misses (all layers, and the layers' range), bytes read and the read time.
func printWeightStats(wp *stages.WeightPath) {
	st := wp.Stats()
	if n := st.LayersReady + st.LayersWaited; n > 0 {
		fmt.Fprintf(os.Stderr, "flowinfer: layer stream: %d layers run, %d already read, %d waited for (%.2f s in all)\n",
			n, st.LayersReady, st.LayersWaited, float64(st.LayerWaitNanos)/1e9)
	}
	if wp.Plan().Experts == 0 {
		if st.BytesRead > 0 {
			fmt.Fprintf(os.Stderr, "flowinfer: layer reads: %.2f GiB, %.2f s of reads in flight\n", float64(st.BytesRead)/(1<<30), float64(st.ReadNanos)/1e9)
		}
		return
	}
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
	fmt.Fprintf(os.Stderr, "flowinfer: expert cache: %d hits, %d misses (hit rate %.1f%%, per layer %.1f%%-%.1f%%), %d evictions, %d experts cached\n",
		hits, misses, 100*rate, 100*lo, 100*hi, st.Evictions, st.CachedExperts)
	if st.PrefetchIssued > 0 {
		fmt.Fprintf(os.Stderr, "flowinfer: prefetch: %d experts read ahead, %d used by the next layer (%.1f%%), %d evicted unused\n",
			st.PrefetchIssued, st.PrefetchUsed, 100*float64(st.PrefetchUsed)/float64(st.PrefetchIssued), st.PrefetchWasted)
	}
	if st.BytesRead > 0 {
		fmt.Fprintf(os.Stderr, "flowinfer: expert reads: %.2f GiB in %d experts, %.2f s of reads in flight\n",
			float64(st.BytesRead)/(1<<30), misses, float64(st.ReadNanos)/1e9)
	}
}

// diskBandwidth measures the O_DIRECT read bandwidth of the file at path
// (1 MiB reads at random aligned offsets, qd in flight, for d), in GB/s:
// what the reader's bytes are compared with (bench/diskbw is the same
// measurement as a tool).
func diskBandwidth(ctx context.Context, path string, qd int, d time.Duration) (float64, error) {
	r, err := nvme.Open(path, nvme.Options{Engine: "pread", Direct: true})
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

// validEdge checks --edge-tokens / pipeline.edges.tokens (the engine would
// take 0 as its default, silently).
func validEdge(n int) error {
	if n < 1 || n > 1<<20 {
		return fmt.Errorf("--edge-tokens / pipeline.edges.tokens %d: must be between 1 and %d", n, 1<<20)
	}
	return nil
}

// Validate is called by kong after parsing.
func (r *RunCmd) Validate() error { return validEdge(r.EdgeTokens) }

// Validate is called by kong after parsing.
func (c *ChatCmd) Validate() error { return validEdge(c.EdgeTokens) }

// Validate is called by kong after parsing.

func (c *ServeCmd) Validate() error { return validEdge(c.EdgeTokens) }
