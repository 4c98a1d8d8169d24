// This file holds the Prometheus metrics served at /metrics (through
// fasthttpadaptor): request counts by endpoint and status, token counters,
// time-to-first-token and inter-token latency histograms, the scheduler's
// steps (tokens per step by kind, step time) and queue wait, and, read from
// the engine at scrape time, queue depth, running sequences, KV blocks,
// the prefix-cache hit ratio and each graph stage's busy and stalled time.

package serve

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"
	"go.uber.org/zap"

	"github.com/flowinfer/flowinfer/stages"
)

type metrics struct {
	reg       *prometheus.Registry
	requests  *prometheus.CounterVec
	prompt    prometheus.Counter
	cached    prometheus.Counter
	generated prometheus.Counter
	ttft      prometheus.Histogram
	itl       prometheus.Histogram
	// the scheduler's, through stages.Observer
	steps        *prometheus.CounterVec
	stepTokens   *prometheus.HistogramVec
	stepSeconds  prometheus.Histogram
	queueWait    prometheus.Histogram
	stepPrompt   prometheus.Observer
	stepDecode   prometheus.Observer
	stepsPrefill prometheus.Counter
	stepsMixed   prometheus.Counter
	stepsDecode  prometheus.Counter
	debug        *zap.Logger // each step at debug level; nil when not enabled
	handler      fasthttp.RequestHandler
}

func newMetrics(s *Server) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	if s.cfg.Log != nil && s.cfg.Log.Core().Enabled(zap.DebugLevel) {
		m.debug = s.cfg.Log
	}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flowinfer_requests_total", Help: "HTTP requests by endpoint and status code."}, []string{"endpoint", "status"})
	m.prompt = prometheus.NewCounter(prometheus.CounterOpts{Name: "flowinfer_prompt_tokens_total", Help: "Prompt tokens of finished requests."})
	m.cached = prometheus.NewCounter(prometheus.CounterOpts{Name: "flowinfer_prompt_cached_tokens_total", Help: "Prompt tokens of finished requests reused from the KV cache."})
	m.generated = prometheus.NewCounter(prometheus.CounterOpts{Name: "flowinfer_generated_tokens_total", Help: "Generated tokens of finished requests."})
	m.ttft = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "flowinfer_time_to_first_token_seconds", Help: "Time from request arrival to its first generated token.",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}})
	m.itl = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "flowinfer_inter_token_latency_seconds", Help: "Time between consecutive generated tokens of a request.",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}})
	m.steps = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flowinfer_steps_total",
		Help: "Forward steps by what they carried: prefill (prompt tokens only), mixed (prompt and decode tokens), decode (decode tokens only)."}, []string{"kind"})
	m.stepTokens = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "flowinfer_step_tokens",
		Help:    "Tokens per forward step, by kind: prompt (prefill chunks) or decode (one per generating sequence).",
		Buckets: []float64{0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048}}, []string{"kind"})
	m.stepSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "flowinfer_step_seconds", Help: "Duration of each forward step (compute).",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}})
	m.queueWait = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "flowinfer_queue_wait_seconds",
		Help:    "Time from a request's arrival at the engine until it holds a KV sequence and its blocks (queued and waiting for admission).",
		Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}})
	m.stepPrompt, m.stepDecode = m.stepTokens.WithLabelValues("prompt"), m.stepTokens.WithLabelValues("decode")
	m.stepsPrefill, m.stepsMixed, m.stepsDecode = m.steps.WithLabelValues("prefill"), m.steps.WithLabelValues("mixed"), m.steps.WithLabelValues("decode")
	m.reg.MustRegister(m.requests, m.prompt, m.cached, m.generated, m.ttft, m.itl, m.steps, m.stepTokens, m.stepSeconds, m.queueWait, newEngineCollector(s),
		// the Go runtime's and the process's own (go_goroutines,
		// go_memstats_*, process_resident_memory_bytes, ...): leaks show
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.handler = fasthttpadaptor.NewFastHTTPHandler(promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	return m
}

func (m *metrics) request(endpoint string, status int) {
	m.requests.WithLabelValues(endpoint, strconv.Itoa(status)).Inc()
}

// token is the jobs' onToken hook (called from the engine's streamer).
func (m *metrics) token(first bool, since time.Duration) {
	if first {
		m.ttft.Observe(since.Seconds())
	} else {
		m.itl.Observe(since.Seconds())
	}
}

func (m *metrics) finished(ev *stages.Event) {
	m.prompt.Add(float64(ev.Usage.PromptTokens))
	m.cached.Add(float64(ev.Usage.CachedTokens))
	m.generated.Add(float64(ev.Usage.GeneratedTokens))
}

// Step implements stages.Observer.
func (m *metrics) Step(prompt, decode int, d time.Duration) {
	switch {
	case decode == 0:
		m.stepsPrefill.Inc()
	case prompt == 0:
		m.stepsDecode.Inc()
	default:
		m.stepsMixed.Inc()
	}
	m.stepPrompt.Observe(float64(prompt))
	m.stepDecode.Observe(float64(decode))
	m.stepSeconds.Observe(d.Seconds())
	if m.debug != nil {
		m.debug.Debug("step", zap.Int("prompt", prompt), zap.Int("decode", decode), zap.Duration("took", d))
	}
}

// Admitted implements stages.Observer.
func (m *metrics) Admitted(wait time.Duration) { m.queueWait.Observe(wait.Seconds()) }

// Observer returns what the engine reports its steps and admissions to,
// for /metrics (stages.Config.Observer).
func (s *Server) Observer() stages.Observer { return s.metrics }

func (s *Server) handleMetrics(ctx *fasthttp.RequestCtx) { s.metrics.handler(ctx) }

// engineCollector reads the engine's state and the stage recorder at
// scrape time.
type engineCollector struct {
	s                                                        *Server
	queue, running, blocks, used, cached, hit, pre, blockTok *prometheus.Desc
	stage                                                    *prometheus.Desc
	// the weight path's expert cache (streamed MoE models)
	expHits, expMisses, expRatio, expRead, expEvict, expCached, expSlots *prometheus.Desc
	pfIssued, pfUsed, pfWasted                                           *prometheus.Desc
	layRuns, layWait, layStreamed                                        *prometheus.Desc
	// the weight tiers of routed experts: device slots (VRAM), the expert
	// cache (RAM), the model file (disk)
	tier, devHits, devMisses, devEvict, devCached, devSlots *prometheus.Desc
}

func newEngineCollector(s *Server) *engineCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	return &engineCollector{s: s,
		queue:    d("flowinfer_queue_depth", "Requests waiting for admission."),
		running:  d("flowinfer_running_sequences", "Sequences being generated (holding KV blocks)."),
		blocks:   d("flowinfer_kv_blocks_total", "KV cache blocks in the pool."),
		used:     d("flowinfer_kv_blocks_used", "KV cache blocks held by running sequences."),
		cached:   d("flowinfer_kv_blocks_cached", "Free KV cache blocks still holding a reusable prefix."),
		hit:      d("flowinfer_prefix_cache_hit_ratio", "Prompt tokens reused from the KV cache over all admitted prompt tokens."),
		pre:      d("flowinfer_preemptions_total", "Sequences preempted (KV blocks reclaimed, recomputed later)."),
		blockTok: d("flowinfer_kv_block_tokens", "Tokens per KV cache block."),
		stage:    d("flowinfer_stage_seconds_total", "Wall time of each graph stage: busy, waiting for input, or blocked on output (stalled = waiting + blocked).", "stage", "state"),

		expHits:     d("flowinfer_expert_cache_hits_total", "Routed experts a step needed that were in the expert cache, by layer.", "layer"),
		expMisses:   d("flowinfer_expert_cache_misses_total", "Routed experts a step needed that were read from disk, by layer.", "layer"),
		expRatio:    d("flowinfer_expert_cache_hit_ratio", "Expert cache hits over all routed experts needed (all layers)."),
		expRead:     d("flowinfer_weight_read_bytes_total", "Bytes of weights read from disk by the weight path's reader."),
		expEvict:    d("flowinfer_expert_cache_evictions_total", "Experts evicted from the expert cache."),
		expCached:   d("flowinfer_expert_cache_experts", "Experts held in the expert cache."),
		expSlots:    d("flowinfer_expert_cache_slots", "Experts the expert cache can hold (its byte budget over the slot size)."),
		pfIssued:    d("flowinfer_expert_prefetch_total", "Experts read ahead on a guess of the next layer's routing."),
		pfUsed:      d("flowinfer_expert_prefetch_used_total", "Prefetched experts that the next layer's router did pick (accuracy = used / prefetched)."),
		pfWasted:    d("flowinfer_expert_prefetch_wasted_total", "Prefetched experts evicted before any layer used them."),
		layRuns:     d("flowinfer_layer_stream_runs_total", "Streamed layers run, by whether their weights were already read (ready) or compute waited for them (waited).", "state"),
		layWait:     d("flowinfer_layer_stream_wait_seconds_total", "Time compute waited for streamed layers' weights."),
		layStreamed: d("flowinfer_layer_stream_layers", "Layers whose matrices stream from disk (the budget holds the others)."),

		tier:      d("flowinfer_expert_tier_total", "Routed experts steps needed, by the tier that served each: vram (a device expert slot held it), ram (the RAM expert cache held it), disk (read from the model file: the weight path's reads, or a device slot filled from the file's mapping). The three add up to the experts needed.", "tier"),
		devHits:   d("flowinfer_expert_device_hits_total", "Routed experts a step needed that were in a device expert slot (VRAM)."),
		devMisses: d("flowinfer_expert_device_misses_total", "Routed experts a step needed that were uploaded into a device expert slot from the model file's bytes."),
		devEvict:  d("flowinfer_expert_device_evictions_total", "Experts evicted from the device expert slots."),
		devCached: d("flowinfer_expert_device_experts", "Experts held in the device expert slots."),
		devSlots:  d("flowinfer_expert_device_slots", "Device expert slots (the VRAM budget over the slot size, or one per expert when all fit)."),
	}
}

func (c *engineCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.queue, c.running, c.blocks, c.used, c.cached, c.hit, c.pre, c.blockTok, c.stage,
		c.expHits, c.expMisses, c.expRatio, c.expRead, c.expEvict, c.expCached, c.expSlots, c.pfIssued, c.pfUsed, c.pfWasted,
		c.layRuns, c.layWait, c.layStreamed, c.tier, c.devHits, c.devMisses, c.devEvict, c.devCached, c.devSlots} {
		ch <- d
	}
}

func (c *engineCollector) Collect(ch chan<- prometheus.Metric) {
	b := c.s.backend.Load()
	if b == nil {
		return
	}
	st := b.Engine.Stats()
	gauge := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	gauge(c.queue, float64(st.Queued))
	gauge(c.running, float64(st.Running))
	gauge(c.blocks, float64(st.KVBlocks))
	gauge(c.used, float64(st.KVBlocksUsed))
	gauge(c.cached, float64(st.KVBlocksCached))
	gauge(c.blockTok, float64(st.BlockSize))
	ratio := 0.0
	if st.PromptTokens > 0 {
		ratio = float64(st.CachedTokens) / float64(st.PromptTokens)
	}
	gauge(c.hit, ratio)
	ch <- prometheus.MustNewConstMetric(c.pre, prometheus.CounterValue, float64(st.Preemptions))
	c.collectTiers(ch, b)
	if w := b.Engine.Config().Weights; w != nil && w.Plan().Streaming() {
		ws := w.Stats()
		counter := func(d *prometheus.Desc, v float64, labels ...string) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
		}
		counter(c.expRead, float64(ws.BytesRead))
		if p := w.Plan(); p.Layers > 0 {
			counter(c.layRuns, float64(ws.LayersReady), "ready")
			counter(c.layRuns, float64(ws.LayersWaited), "waited")
			counter(c.layWait, float64(ws.LayerWaitNanos)/1e9)
			gauge(c.layStreamed, float64(p.Layers))
		}
		if w.Plan().Experts > 0 {
			var hits, misses int64
			for l := range ws.Hits {
				counter(c.expHits, float64(ws.Hits[l]), strconv.Itoa(l))
				counter(c.expMisses, float64(ws.Misses[l]), strconv.Itoa(l))
				hits += ws.Hits[l]
				misses += ws.Misses[l]
			}
			r := 0.0
			if hits+misses > 0 {
				r = float64(hits) / float64(hits+misses)
			}
			gauge(c.expRatio, r)
			counter(c.expEvict, float64(ws.Evictions))
			gauge(c.expCached, float64(ws.CachedExperts))
			gauge(c.expSlots, float64(w.Plan().Slots))
			counter(c.pfIssued, float64(ws.PrefetchIssued))
			counter(c.pfUsed, float64(ws.PrefetchUsed))
			counter(c.pfWasted, float64(ws.PrefetchWasted))
		}
	}
	if b.Recorder == nil {
		return
	}
	for _, ss := range b.Recorder.Summary() {
		for state, d := range map[string]time.Duration{"busy": ss.Busy, "waiting": ss.Waiting, "blocked": ss.Blocked} {
			ch <- prometheus.MustNewConstMetric(c.stage, prometheus.CounterValue, d.Seconds(), ss.Stage, state)
		}
	}
}

// collectTiers reports the routed experts by tier (VRAM, RAM, disk) and
// the device expert slots' counters, when the model's experts are in
// device slots or in the weight path's expert cache.
func (c *engineCollector) collectTiers(ch chan<- prometheus.Metric, b *Backend) {
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v int) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v))
	}
	var vram, ram, disk int64
	tiers := false
	if w := b.Engine.Config().Weights; w != nil && w.Plan().Streaming() && w.Plan().Experts > 0 {
		ws := w.Stats()
		for l := range ws.Hits {
			ram += ws.Hits[l]
			disk += ws.Misses[l]
		}
		tiers = true
	}
	if b.DeviceExperts != nil {
		if ds := b.DeviceExperts(); ds.Slots > 0 {
			vram, disk = vram+ds.Hits, disk+ds.Misses
			counter(c.devHits, ds.Hits)
			counter(c.devMisses, ds.Misses)
			counter(c.devEvict, ds.Evictions)
			gauge(c.devCached, ds.Cached)
			gauge(c.devSlots, ds.Slots)
			tiers = true
		}
	}
	if tiers {
		counter(c.tier, vram, "vram")
		counter(c.tier, ram, "ram")
		counter(c.tier, disk, "disk")
	}
}
