package testutil

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// RedisServer is a real redis-server (Debian's redis-server package) that a
// test started on loopback, with its own port and directory; it is killed
// when the test ends.
type RedisServer struct {
	t    testing.TB
	Port int
	Dir  string
	cmd  *exec.Cmd
	max  int64 // maxmemory, bytes (0: none)
}

// StartRedis starts redis-server on a free loopback port, without
// persistence, evicting least recently used keys past maxmemory bytes (0:
// no limit). Without a redis-server on PATH the test is skipped, except
// in CI ($CI set, as .ci/run does), where it fails.
func StartRedis(t testing.TB, maxmemory int64) *RedisServer {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("redis-server not found (apt-get install redis-server)")
		}
		t.Skip("redis-server not found (apt-get install redis-server)")
	}
	r := &RedisServer{t: t, Dir: t.TempDir(), Port: FreePort(t)}
	r.max = maxmemory
	r.Start()
	t.Cleanup(r.Kill)
	return r
}

// URL is the server's redis:// URL, database 0.
func (r *RedisServer) URL() string { return fmt.Sprintf("redis://127.0.0.1:%d/0", r.Port) }

// Start starts the server (again, after Kill) on its port and waits until
// it answers PING.
func (r *RedisServer) Start() {
	r.t.Helper()
	args := []string{"--port", strconv.Itoa(r.Port), "--bind", "127.0.0.1", "--dir", r.Dir,
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--protected-mode", "no",
		"--maxmemory-policy", "allkeys-lru", "--loglevel", "warning"}
	if r.max > 0 {
		args = append(args, "--maxmemory", strconv.FormatInt(r.max, 10))
	}
	cmd := exec.Command("redis-server", args...)
	DieWithParent(cmd)
	log, err := os.Create(r.Dir + "/redis.log")
	if err != nil {
		r.t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	r.cmd = cmd
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if r.Ping() == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	b, _ := os.ReadFile(r.Dir + "/redis.log")
	r.t.Fatalf("redis-server on port %d did not answer: %s", r.Port, b)
}

// Kill stops the server with SIGKILL (a crash) and waits for it to exit.
func (r *RedisServer) Kill() {
	if r.cmd == nil {
		return
	}
	r.cmd.Process.Kill()
	r.cmd.Wait()
	r.cmd = nil
}

// Ping sends PING over a plain connection and wants +PONG.
func (r *RedisServer) Ping() error {
	return r.Do("PING", "+PONG")
}

// Do sends one inline command and wants a reply line starting with want.
func (r *RedisServer) Do(cmd, want string) error {
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", r.Port), time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := fmt.Fprintf(c, "%s\r\n", cmd); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, want) {
		return fmt.Errorf("redis %q: %q, want %q", cmd, strings.TrimSpace(line), want)
	}
	return nil
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
