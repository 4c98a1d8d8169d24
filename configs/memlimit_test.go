package configs

import (
	"os"
	"path/filepath"
	"testing"
)

func TestMemoryLimit(t *testing.T) {
	write := func(root, p, s string) {
		t.Helper()
		f := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const meminfo = "MemTotal:       24000000 kB\nMemFree: 1 kB\n"
	const meminfoAvail = "MemTotal:       24000000 kB\nMemFree: 1 kB\nMemAvailable:   20000000 kB\n"
	cases := []struct {
		name   string
		files  map[string]string
		want   ByteSize
		source string
	}{
		{"no cgroup", map[string]string{"proc/meminfo": meminfo}, 24000000 * 1024, "MemTotal"},
		{"v1 limit", map[string]string{"proc/meminfo": meminfo,
			"proc/self/cgroup": "12:cpu,cpuacct:/\n5:memory:/bench\n",
			"sys/fs/cgroup/memory/bench/memory.limit_in_bytes": "4294967296\n"}, 4 << 30, "cgroup v1"},
		{"v1 unlimited", map[string]string{"proc/meminfo": meminfo,
			"proc/self/cgroup":                           "5:memory:/\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n"}, 24000000 * 1024, "MemTotal"},
		{"v2 limit", map[string]string{"proc/meminfo": meminfo,
			"proc/self/cgroup":                      "0::/user.slice/x\n",
			"sys/fs/cgroup/user.slice/x/memory.max": "8589934592\n"}, 8 << 30, "cgroup v2"},
		{"v2 max", map[string]string{"proc/meminfo": meminfo,
			"proc/self/cgroup": "0::/\n", "sys/fs/cgroup/memory.max": "max\n"}, 24000000 * 1024, "MemTotal"},
		{"limit above RAM", map[string]string{"proc/meminfo": meminfo,
			"proc/self/cgroup": "0::/\n", "sys/fs/cgroup/memory.max": "99999999999999\n"}, 24000000 * 1024, "MemTotal"},
		// MemAvailable, when the kernel gives it, is the machine's figure:
		// memory other processes hold is not the run's to fill.
		{"available", map[string]string{"proc/meminfo": meminfoAvail}, 20000000 * 1024, "MemAvailable"},
		{"v1 limit below available", map[string]string{"proc/meminfo": meminfoAvail,
			"proc/self/cgroup": "5:memory:/bench\n",
			"sys/fs/cgroup/memory/bench/memory.limit_in_bytes": "4294967296\n"}, 4 << 30, "cgroup v1"},
		{"v2 limit above available", map[string]string{"proc/meminfo": meminfoAvail,
			"proc/self/cgroup": "0::/x\n", "sys/fs/cgroup/x/memory.max": "22000000000\n"}, 20000000 * 1024, "MemAvailable"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for p, s := range tc.files {
				write(root, p, s)
			}
			got, src := memoryLimit(root)
			if got != tc.want || src != tc.source {
				t.Errorf("got %d (%s), want %d (%s)", got, src, tc.want, tc.source)
			}
		})
	}
}
