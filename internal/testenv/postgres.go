package testenv

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// PostgresInstall says how to get PostgreSQL when it is missing.
const PostgresInstall = "PostgreSQL's initdb and postgres are not on PATH or under /usr/lib/postgresql/*/bin: install them (Debian/Ubuntu: `apt-get install -y postgresql`; .ci/run does); tests start their own server and never use one already running"

// Postgres is a throwaway PostgreSQL server owned by one test: its own data
// directory, a free loopback port, fsync off, trust authentication for the
// user postgres.
type Postgres struct {
	// Addr is the server's host:port on 127.0.0.1.
	Addr string

	tb   testing.TB
	dir  string // data directory and socket directory live under it
	bin  string // the directory of initdb and postgres
	cred *syscall.Credential
	process
}

// StartPostgres creates a database cluster in a temporary directory, starts
// postgres on a free loopback port and registers its shutdown with
// tb.Cleanup. PostgreSQL refuses to run as root: when the test runs as root,
// the cluster belongs to, and the server runs as, the unprivileged user
// postgres (or nobody). It fails tb, saying how to install them, when the
// binaries are missing.
func StartPostgres(tb testing.TB) *Postgres {
	tb.Helper()
	bin, err := postgresBin()
	if err != nil {
		tb.Fatal(PostgresInstall)
	}
	p := &Postgres{tb: tb, bin: bin}
	if os.Geteuid() == 0 {
		if p.cred, err = unprivileged(); err != nil {
			tb.Fatalf("testenv: PostgreSQL refuses to run as root and no unprivileged user was found: %v", err)
		}
	}
	// Not tb.TempDir: its parent is root's, 0700, closed to the server's user.
	if p.dir, err = os.MkdirTemp("", "testenv-postgres-"); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = os.RemoveAll(p.dir) })
	if p.cred != nil {
		if err := os.Chown(p.dir, int(p.cred.Uid), int(p.cred.Gid)); err != nil {
			tb.Fatal(err)
		}
	}
	initdb := p.command("initdb", "-D", p.data(), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-locale", "--no-sync")
	if out, err := initdb.CombinedOutput(); err != nil {
		tb.Fatalf("testenv: initdb: %v\n%s", err, out)
	}
	for attempt := 0; attempt < 5; attempt++ {
		var port int
		if port, err = freePort(); err != nil {
			continue
		}
		p.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		if err = p.start(); err == nil {
			break
		}
	}
	if err != nil {
		tb.Fatalf("testenv: starting postgres: %v", err)
	}
	tb.Cleanup(p.Kill)
	return p
}

// URL returns a postgres:// URL for the server's database postgres.
func (p *Postgres) URL() string {
	return "postgres://postgres@" + p.Addr + "/postgres?sslmode=disable"
}

// Restart kills the server and starts it again on the same port and data
// directory: committed data survives.
func (p *Postgres) Restart() {
	p.tb.Helper()
	p.Kill()
	// A killed postmaster leaves its pid file; the next start would refuse it.
	_ = os.Remove(filepath.Join(p.data(), "postmaster.pid"))
	var err error
	for attempt := 0; attempt < 20; attempt++ {
		if err = p.start(); err == nil {
			return
		}
	}
	p.tb.Fatalf("testenv: restarting postgres on %s: %v", p.Addr, err)
}

func (p *Postgres) data() string { return filepath.Join(p.dir, "data") }

// command runs one of PostgreSQL's binaries as the server's user.
func (p *Postgres) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(p.bin, name), args...)
	cmd.Dir = p.dir
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred, Setpgid: true}
	return cmd
}

func (p *Postgres) start() error {
	_, port, _ := net.SplitHostPort(p.Addr)
	cmd := p.command("postgres", "-D", p.data(), "-p", port, "-h", "127.0.0.1", "-k", p.dir,
		"-c", "fsync=off", "-c", "full_page_writes=off", // safe against a killed process, not a crashed machine
		"-c", "logging_collector=off", "-c", "max_connections=200")
	out, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	return p.launch(cmd, out, "postgres", "ready to accept connections", killPostmaster)
}

// killPostmaster kills the postmaster and every process it started, and
// waits for them to be gone: each backend runs in a session of its own
// (PostgreSQL's children call setsid), so killing the postmaster's process
// group leaves them serving their connections until they notice.
func killPostmaster(c *exec.Cmd) {
	pid := c.Process.Pid
	children := childrenOf(pid)
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	for _, child := range children {
		_ = syscall.Kill(child, syscall.SIGKILL)
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, child := range children {
		for alive(child) && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// childrenOf lists the processes whose parent is pid, from /proc.
func childrenOf(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so read after ')'.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(string(stat[i+1:]))
		if len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			out = append(out, child)
		}
	}
	return out
}

// alive reports whether pid still runs (a zombie has exited: its parent,
// the killed postmaster, will never reap it, init will).
func alive(pid int) bool {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && len(stat) > i+2 && stat[i+2] != 'Z'
}

// postgresBin finds the directory of initdb and postgres: on PATH, or
// Debian's versioned /usr/lib/postgresql/<version>/bin (the newest).
func postgresBin() (string, error) {
	if path, err := exec.LookPath("initdb"); err == nil {
		dir := filepath.Dir(path)
		if _, err := os.Stat(filepath.Join(dir, "postgres")); err == nil {
			return dir, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, dir := range dirs {
		if _, err := os.Stat(filepath.Join(dir, "initdb")); err == nil {
			return dir, nil
		}
	}
	return "", fmt.Errorf("initdb not found")
}

// version is the major version in /usr/lib/postgresql/<version>/bin.
func version(dir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
	return n
}

// unprivileged returns the credentials of the user postgres, else nobody.
func unprivileged() (*syscall.Credential, error) {
	var lastErr error
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			lastErr = err
			continue
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err1 != nil || err2 != nil {
			lastErr = fmt.Errorf("user %s: uid %q, gid %q", name, u.Uid, u.Gid)
			continue
		}
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
	}
	return nil, lastErr
}

// Pool returns a pgx pool on the server, configured by configure when it is
// not nil, closed when tb ends.
func (p *Postgres) Pool(tb testing.TB, configure func(*pgxpool.Config)) *pgxpool.Pool {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(p.URL())
	if err != nil {
		tb.Fatal(err)
	}
	if configure != nil {
		configure(cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		tb.Fatalf("testenv: a pool on %s: %v", p.Addr, err)
	}
	tb.Cleanup(pool.Close)
	return pool
}
