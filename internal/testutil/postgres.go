package testutil

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// PostgresServer is a real PostgreSQL server (Debian's postgresql
// package) that a test started on loopback, with its own port and data
// directory; it is killed and its directory removed when the test ends.
// Under root it runs as the package's postgres user (PostgreSQL refuses
// root).
type PostgresServer struct {
	t      testing.TB
	Port   int
	Dir    string
	bin    string
	uid    uint32
	gid    uint32
	root   bool
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited
	next   int
}

// pgBin is the directory of initdb and postgres: on PATH, else Debian's
// /usr/lib/postgresql/<version>/bin.
func pgBin() string {
	if p, err := exec.LookPath("initdb"); err == nil {
		if _, err := exec.LookPath("postgres"); err == nil {
			return filepath.Dir(p)
		}
	}
	m, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(m) == 0 {
		return ""
	}
	return filepath.Dir(m[len(m)-1])
}

var (
	pgTemplateOnce sync.Once
	pgTemplate     string
	pgTemplateErr  error
)

// StartPostgres starts PostgreSQL on a free loopback port, with trust
// authentication for user memosrt and fsync off (a killed server keeps
// every commit, since the OS keeps its writes; synchronous_commit stays on,
// or a kill would lose acknowledged commits); it is killed when the
// test ends. Without PostgreSQL the test is skipped, except in CI ($CI
// set, as .ci/run does), where it fails. The cluster is made once per
// test process by initdb and copied.
func StartPostgres(t testing.TB) *PostgresServer {
	t.Helper()
	if pgBin() == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("PostgreSQL not found (apt-get install postgresql)")
		}
		t.Skip("PostgreSQL not found (apt-get install postgresql)")
	}
	p, stop := startPostgres(t)
	t.Cleanup(stop)
	return p
}

// StartPostgresMain is StartPostgres for a whole test binary (TestMain):
// it panics instead of failing a test, and stop kills the server. ok is
// false without PostgreSQL.
func StartPostgresMain() (p *PostgresServer, stop func(), ok bool) {
	if pgBin() == "" {
		return nil, nil, false
	}
	p, stop = startPostgres(nil)
	return p, stop, true
}

func startPostgres(t testing.TB) (*PostgresServer, func()) {
	p := &PostgresServer{t: t, bin: pgBin()}
	port, err := freePort()
	if err != nil {
		p.fatalf("%v", err)
	}
	p.Port = port
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			p.fatalf("running as root, PostgreSQL needs its postgres user: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		p.uid, p.gid, p.root = uint32(uid), uint32(gid), true
	}
	pgTemplateOnce.Do(func() { pgTemplate, pgTemplateErr = p.initdb() })
	if pgTemplateErr != nil {
		p.fatalf("%v", pgTemplateErr)
	}
	dir, err := os.MkdirTemp("", "memosrt-pg-")
	if err != nil {
		p.fatalf("%v", err)
	}
	p.Dir = filepath.Join(dir, "data")
	if out, err := exec.Command("cp", "-a", pgTemplate, p.Dir).CombinedOutput(); err != nil {
		p.fatalf("copy cluster: %v: %s", err, out)
	}
	p.chown(dir)
	p.Start()
	return p, func() {
		p.Kill()
		os.RemoveAll(dir)
	}
}

func (p *PostgresServer) fatalf(f string, a ...any) {
	if p.t == nil {
		panic(fmt.Sprintf(f, a...))
	}
	p.t.Helper()
	p.t.Fatalf(f, a...)
}

func (p *PostgresServer) helper() {
	if p.t != nil {
		p.t.Helper()
	}
}

func (p *PostgresServer) chown(dir string) {
	if p.root {
		if err := os.Chown(dir, int(p.uid), int(p.gid)); err != nil {
			p.fatalf("%v", err)
		}
	}
}

// initdb makes the template cluster in a directory the postgres user can
// reach (not under t.TempDir, whose parents are root's, mode 0700).
func (p *PostgresServer) initdb() (string, error) {
	dir, err := os.MkdirTemp("", "memosrt-pgtemplate-")
	if err != nil {
		return "", err
	}
	p.chown(dir)
	data := filepath.Join(dir, "data")
	cmd := exec.Command(filepath.Join(p.bin, "initdb"), "-D", data, "-U", "memosrt", "--auth=trust",
		"-E", "UTF8", "--locale=C", "--no-sync")
	if p.root {
		runAs(cmd, p.uid, p.gid)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("initdb: %v: %s", err, out)
	}
	return data, nil
}

// URL is the server's URL for database db ("postgres" always exists).
func (p *PostgresServer) URL(db string) string {
	return fmt.Sprintf("postgres://memosrt@127.0.0.1:%d/%s?sslmode=disable", p.Port, db)
}

// CreateDB creates a fresh database and returns its URL.
func (p *PostgresServer) CreateDB() string {
	p.helper()
	p.next++
	name := fmt.Sprintf("db%d", p.next)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, p.URL("postgres"))
	if err != nil {
		p.fatalf("%v", err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		p.fatalf("%v", err)
	}
	return p.URL(name)
}

// Start starts the server (again, after Kill or Stop) and waits until it
// accepts connections.
func (p *PostgresServer) Start() {
	p.helper()
	logf := filepath.Join(filepath.Dir(p.Dir), "postgres.log")
	log, err := os.OpenFile(logf, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		p.fatalf("%v", err)
	}
	defer log.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		cmd := exec.Command(filepath.Join(p.bin, "postgres"), "-D", p.Dir, "-p", strconv.Itoa(p.Port),
			"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="+filepath.Dir(p.Dir),
			"-c", "fsync=off", "-c", "full_page_writes=off",
			"-c", "max_connections=200", "-c", "shared_buffers=32MB")
		if p.root {
			runAs(cmd, p.uid, p.gid)
		}
		DieWithParent(cmd)
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Start(); err != nil {
			p.fatalf("%v", err)
		}
		exited := make(chan struct{})
		go func() { cmd.Wait(); close(exited) }()
		for time.Now().Before(deadline) {
			select {
			case <-exited:
			default:
				if p.ping() == nil {
					p.cmd, p.exited = cmd, exited
					return
				}
				time.Sleep(50 * time.Millisecond)
				continue
			}
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			b, _ := os.ReadFile(logf)
			p.fatalf("postgres on port %d did not start: %s", p.Port, b)
		}
		// exited early (the last one's backends still held its shared
		// memory after a kill): try again
		time.Sleep(200 * time.Millisecond)
	}
}

func (p *PostgresServer) ping() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, p.URL("postgres"))
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	return c.Ping(ctx)
}

// Kill stops the server and its backends with SIGKILL (a crash) and
// waits for the postmaster to exit.
func (p *PostgresServer) Kill() {
	if p.cmd == nil {
		return
	}
	p.Resume() // a paused server's backends would stay stopped
	// the postmaster and every backend it forked: a backend outlives a
	// killed postmaster until it next checks for it, and could still
	// commit a write sent on its open connection after Kill returned
	p.signalAll(syscall.SIGKILL)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
	}
	p.cmd = nil
}

// Pause stops the server and every backend process it forked with
// SIGSTOP: a hung server whose connections stay open. Resume continues
// them.
func (p *PostgresServer) Pause() { p.signalAll(syscall.SIGSTOP) }

// Resume continues a paused server (SIGCONT).
func (p *PostgresServer) Resume() { p.signalAll(syscall.SIGCONT) }

func (p *PostgresServer) signalAll(sig syscall.Signal) {
	if p.cmd == nil {
		return
	}
	root := p.cmd.Process.Pid
	pids := []int{root}
	// children by parent pid, from /proc/<pid>/stat (field 4)
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// the command name (field 2) is in parentheses and may hold spaces
		s := string(b)
		if i := strings.LastIndexByte(s, ')'); i > 0 {
			f := strings.Fields(s[i+1:])
			if len(f) > 1 && f[1] == strconv.Itoa(root) {
				pids = append(pids, pid)
			}
		}
	}
	for _, pid := range pids {
		syscall.Kill(pid, sig)
	}
}
