// servers.go: starting and stopping the servers under test, each a child
// process on a free loopback port, ready once GET /health answers 200.

package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// server is a running server process.
type server struct {
	name   string
	url    string
	cmd    *exec.Cmd
	log    *os.File
	exited chan error // Wait's result
}

// freePort returns a loopback port that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// startServer runs bin with args (plus --host/--port) and waits for health.
func startServer(ctx context.Context, name, bin string, args []string, logDir string) (*server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	args = append(args, "--host", "127.0.0.1", "--port", strconv.Itoa(port))
	log, err := os.Create(filepath.Join(logDir, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+filepath.Dir(bin))
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	s := &server{name: name, url: fmt.Sprintf("http://127.0.0.1:%d", port), cmd: cmd, log: log, exited: make(chan error, 1)}
	go func() { s.exited <- cmd.Wait(); close(s.exited) }()
	deadline := time.Now().Add(5 * time.Minute)
	for {
		select {
		case err := <-s.exited:
			log.Close()
			return nil, fmt.Errorf("%s exited while loading (%v); see %s", name, err, log.Name())
		case <-ctx.Done():
			s.stop()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if resp, err := http.Get(s.url + "/health"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return s, nil
			}
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("%s not ready after 5 minutes; see %s", name, log.Name())
		}
	}
}

// stop sends SIGTERM, then SIGKILL after 10 s, and waits for the exit.
// It may be called more than once.
func (s *server) stop() {
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		s.cmd.Process.Kill()
		<-s.exited
	}
	s.log.Close()
}
