// Package configs holds flowinfer's typed configuration: the hardware
// profile of a machine, the pipeline settings (threads, edge capacities,
// memory budgets, KV cache, parallel sequences, prefetch, I/O engine), the
// sampling defaults and the server settings, with their defaults,
// validation and the YAML profiles shipped in this directory.
//
// A profile is decoded strictly: an unknown key is an error that names it
// and its line, so a typo never silently falls back to a default. Every
// field has a default (Default), and Validate reports every bad value with
// its key path (ValidateRun also what this build cannot run): the one
// validation of every command's configuration. This package reads no
// environment and parses no flags: cmd merges flags, the profile and the
// environment (flag > file > environment > default) and hands the result
// down as these structs. Detect and the
// Measure functions describe the current machine for `flowinfer config
// detect`.
package configs

// Config is one complete configuration (a profile file decodes into it).
type Config struct {
	// Profile names the profile ("cpu-2core", "desktop-12gb-gpu", ...).
	Profile string `yaml:"profile,omitempty"`
	// Description says what machine the profile is for.
	Description string   `yaml:"description,omitempty"`
	Hardware    Hardware `yaml:"hardware"`
	Pipeline    Pipeline `yaml:"pipeline"`
	Sampling    Sampling `yaml:"sampling"`
	Server      Server   `yaml:"server"`
	// Flags gives values to command-line flags by flag name ("ignore-eos":
	// true), for flags no typed field covers. A name no command knows is
	// an error, like an unknown key.
	Flags map[string]any `yaml:"flags,omitempty"`
}

// Hardware describes a machine. Detect fills it. The computing commands
// refuse a description bigger than this machine (Config.CheckHost) and
// take a smaller one as limits: Cores is the default thread count,
// LogicalCPUs bounds the threads, RAM bounds Pipeline.RAMPool, ISA lists
// extensions the CPU must have; the trace's stall summary compares
// achieved memory bandwidth with MemBandwidth. No command reads DiskRead
// yet.
type Hardware struct {
	CPU         string   `yaml:"cpu,omitempty"`          // model name
	Cores       int      `yaml:"cores"`                  // physical cores (0 = unknown)
	LogicalCPUs int      `yaml:"logical_cpus,omitempty"` // hardware threads
	RAM         ByteSize `yaml:"ram"`                    // total memory (0 = unknown)
	ISA         []string `yaml:"isa,omitempty"`          // SIMD extensions: avx2, fma, avx512f, avx512_vnni, ...
	GPUs        []GPU    `yaml:"gpus,omitempty"`
	// MemBandwidth is the measured memory read bandwidth in GB/s (1e9
	// bytes/s) with all cores: the ceiling of decode on CPU.
	MemBandwidth float64 `yaml:"mem_bandwidth_gbps,omitempty"`
	// DiskRead is the measured sequential read bandwidth of the model disk
	// in GB/s, bypassing the page cache: the ceiling of weight streaming,
	// which trace compares the reader's bytes with.
	DiskRead float64 `yaml:"disk_read_gbps,omitempty"`
}

// GPU is one Vulkan device.
type GPU struct {
	Name string   `yaml:"name"`
	Type string   `yaml:"type,omitempty"` // discrete, integrated, virtual, cpu
	VRAM ByteSize `yaml:"vram"`           // device-local heap size
}

// Pipeline sizes the stage graph.
type Pipeline struct {
	// Backend: auto (Vulkan when a GPU is present, else CPU), cpu, vulkan.
	Backend string `yaml:"backend"`
	// Threads computing on the CPU; 0 = Hardware.Cores when the profile
	// gives it (Loaded.Derive), else this machine's physical cores.
	Threads int `yaml:"threads"`
	// BatchSize is the number of tokens per forward step (prompt chunk).
	BatchSize int `yaml:"batch_size"`
	// Parallel is the number of sequences decoded together (KV slots).
	Parallel int `yaml:"parallel"`
	// Queue is the admission queue: requests beyond it are refused (429).
	Queue int `yaml:"queue"`
	// Edges are the capacities of the graph's buffered edges.
	Edges Edges `yaml:"edges"`
	// RAMPool is the byte budget for weights in RAM (flag --ram-budget):
	// resident weights, the expert cache and the read slabs; routed
	// experts beyond it are read from disk as the router picks them.
	// 0 = what the machine or its cgroup allows after the KV cache,
	// activations and headroom.
	RAMPool ByteSize `yaml:"ram_pool"`
	// VRAM is the byte budget on the GPU; 0 = none (CPU only).
	VRAM ByteSize `yaml:"vram"`
	// Device picks the Vulkan device a GPU backend computes on: its index
	// (as `flowinfer config detect` lists them: GPU0, GPU1, ...) or a
	// part of its name (case-insensitive, matching exactly one device);
	// empty: the backend's own choice. A device that is not there is an
	// error naming it.
	Device string `yaml:"device,omitempty"`
	// KVCache is the KV cache's element type and size.
	KVCache KVCache `yaml:"kv_cache"`
	// PrefetchDepth is how many layers of experts the reader requests
	// ahead of the router, speculatively: 0 reads only what the router
	// picked (the moment it picks it); 1 (default) also guesses the next
	// layer's experts from the current residual stream and reads them
	// ahead (measured: +11% decode at a 4 GiB cap, +18% at 8 GiB, 84-89%
	// of the guesses used). Deeper values are refused.
	PrefetchDepth int `yaml:"prefetch_depth"`
	// IOEngine reads weights: pread (default; O_DIRECT into the expert
	// cache), io_uring (Linux; the same reads through an io_uring) or mmap
	// (the whole file mapped; no budget).
	IOEngine IOEngine `yaml:"io_engine"`
}

// Edges are edge capacities of the stage graph. The request path moves one
// step at a time (its edges have capacity 1 by construction); these are the
// edges whose capacity is a tuning choice.
type Edges struct {
	// Tokens is the sampler -> streamer edge (token events).
	Tokens int `yaml:"tokens"`
	// Slabs is the number of staging slabs of the weight path: expert
	// reads in flight (reader -> uploader -> pool).
	Slabs int `yaml:"slabs"`
}

// KVCache sizes the KV cache.
type KVCache struct {
	// TypeK and TypeV are the element types of the cached K and V rows
	// (llama.cpp's -ctk/-ctv): f32, f16, bf16, q8_0, q4_0, or the
	// TurboQuant types tq4 and tq3.
	TypeK string `yaml:"type_k"`
	TypeV string `yaml:"type_v"`
	// Protect keeps the first and the last Protect layers in f16 when a
	// type is quantized (q8_0, q4_0, tq4, tq3).
	Protect int `yaml:"protect"`
	// Recent keeps the K and V rows of at least the Recent most recent
	// positions of each query in f16 as well when a type is quantized
	// (--kv-recent; -1: model.DefaultKVRecent with a TurboQuant type, else
	// 0).
	Recent int `yaml:"recent"`
	// SWAFull keeps a full-size cache (a row per cell) in sliding-window
	// layers too, instead of a ring of their window (--swa-full, as
	// llama-server's): a cached prompt prefix is reused without
	// checkpoints, at full attention's memory.
	SWAFull bool `yaml:"swa_full"`
	// CtxSize is the number of cells per sequence (the context); 0 = the
	// model's training context, at most 4096.
	CtxSize int `yaml:"ctx_size"`
}

// Sampling are the defaults of requests that do not set their own
// (llama.cpp's defaults).
type Sampling struct {
	Temperature      float32 `yaml:"temperature"`
	TopK             int     `yaml:"top_k"`
	TopP             float32 `yaml:"top_p"`
	MinP             float32 `yaml:"min_p"`
	RepeatPenalty    float32 `yaml:"repeat_penalty"`
	RepeatLastN      int     `yaml:"repeat_last_n"` // penalty window; 0 = off (llama.cpp's -1 is not implemented)
	PresencePenalty  float32 `yaml:"presence_penalty"`
	FrequencyPenalty float32 `yaml:"frequency_penalty"`
	Seed             int64   `yaml:"seed"`       // -1 = random
	MaxTokens        int     `yaml:"max_tokens"` // -1 = until end of generation or a full context
}

// Server configures `flowinfer serve`.
type Server struct {
	Host string `yaml:"host"`
	Port int    `yaml:"port"`
}

// Backends returns the known values of pipeline.backend.
func Backends() []string { return []string{"auto", "cpu", "vulkan"} }

// KVTypes returns the known values of pipeline.kv_cache.type_k and
// type_v (model.ParseKVType's names).
func KVTypes() []string { return []string{"f32", "f16", "bf16", "q8_0", "q4_0", "tq4", "tq3"} }

// Default returns the configuration used for everything a profile, the
// environment and the flags leave unset.
func Default() Config {
	return Config{
		Pipeline: Pipeline{
			Backend:       "auto",
			Threads:       0,
			BatchSize:     512,
			Parallel:      1,
			Queue:         64,
			Edges:         Edges{Tokens: 64, Slabs: 8},
			KVCache:       KVCache{TypeK: "f16", TypeV: "f16", Recent: -1, CtxSize: 0},
			PrefetchDepth: 1,
			IOEngine:      EnginePread,
		},
		Sampling: Sampling{
			Temperature: 0.8, TopK: 40, TopP: 0.95, MinP: 0.05,
			RepeatPenalty: 1, RepeatLastN: 64, Seed: -1, MaxTokens: -1,
		},
		Server: Server{Host: "127.0.0.1", Port: 8080},
	}
}
