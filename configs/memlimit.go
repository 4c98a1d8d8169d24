// This file finds the memory a process may use: the machine's available
// memory, or its container's limit (cgroup v2 memory.max, cgroup v1
// memory.limit_in_bytes), whichever is smaller.

package configs

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// MemoryLimit returns the smaller of the machine's available memory and the
// memory limit of the calling process's cgroup, and which one it is
// ("cgroup v1", "cgroup v2", "MemAvailable" or "MemTotal"); 0 when neither
// is known. The machine's figure is MemAvailable, not MemTotal: memory
// other processes hold is not ours to fill, and a budget sized from
// MemTotal on a machine running anything else ends in the OOM killer (a
// 20 GB expert cache was killed so beside a few GB of other work);
// MemTotal stands in only on kernels without MemAvailable (before 3.14).
func MemoryLimit() (ByteSize, string) { return memoryLimit("/") }

// memoryLimit is MemoryLimit with the filesystem rooted at root (tests).
func memoryLimit(root string) (ByteSize, string) {
	var total, avail ByteSize
	if b, err := os.ReadFile(filepath.Join(root, "proc/meminfo")); err == nil {
		total = ParseMemTotal(bytes.NewReader(b))
		avail = ParseMemAvailable(bytes.NewReader(b))
	}
	best, src := total, "MemTotal"
	switch {
	case avail > 0:
		best, src = avail, "MemAvailable"
	case total == 0:
		src = ""
	}
	cg, err := os.ReadFile(filepath.Join(root, "proc/self/cgroup"))
	if err != nil {
		return best, src
	}
	sc := bufio.NewScanner(strings.NewReader(string(cg)))
	for sc.Scan() {
		// hierarchy-ID:controllers:path
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		var file, kind string
		switch {
		case parts[0] == "0" && parts[1] == "":
			file, kind = filepath.Join(root, "sys/fs/cgroup", parts[2], "memory.max"), "cgroup v2"
		case hasController(parts[1], "memory"):
			file, kind = filepath.Join(root, "sys/fs/cgroup/memory", parts[2], "memory.limit_in_bytes"), "cgroup v1"
		default:
			continue
		}
		b, err := os.ReadFile(file)
		if err != nil {
			continue
		}
		v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil || v <= 0 || v >= 1<<60 { // "max" or the v1 "unlimited" value
			continue
		}
		if best == 0 || ByteSize(v) < best {
			best, src = ByteSize(v), kind
		}
	}
	return best, src
}

func hasController(list, name string) bool {
	for _, c := range strings.Split(list, ",") {
		if c == name {
			return true
		}
	}
	return false
}
